// Pieces shared by gemm.cpp (validation, scratch memory) and the per-target kernels in gemm_kernels.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/cpu/gemm.h"

namespace rbee::cpu::gemm_detail {

// A validated GEMM problem. C element (i, j) is at c + i * c_rs + j * c_cs; the public API always has
// c_cs == 1, the kernels swap operands internally (C^T = B^T A^T) and then see other C strides.
struct GemmArgs {
  int64_t m = 0, n = 0, k = 0;
  GemmOperand a, b;
  void* c = nullptr;
  DType c_dtype = DType::F32;
  int64_t c_rs = 0, c_cs = 1;
  bool accumulate = false;
  int threads = 1;  // threads to spread over (1: run on the calling thread only)
};

// Per-thread scratch buffers, 64-byte aligned, grown on demand and reused by later calls on the same thread.
// Each slot is one buffer; a caller owns its slot until it returns.
enum class Scratch { PackA, PackB, SmallA, Workspace, kCount };
float* scratch(Scratch slot, size_t floats);

// Runs the problem on the best SIMD target of this CPU (defined in gemm_kernels.cpp).
void dispatch(const GemmArgs& args);

// For tests: the SIMD targets compiled in that this CPU can run (Highway target bits), and a switch that makes
// every Highway dispatch in the process use only `target` (0 restores the normal choice).
std::vector<int64_t> runnable_targets();
void force_target_for_testing(int64_t target);

}  // namespace rbee::cpu::gemm_detail
