// Decode-sized quantized matmul on the CPU (M = 1): out[j] = dot(weight row j, x) for a group of up to
// kMatVecRows weight rows at once, on the GGUF layout as it is (no repacking). Lane r of the vector registers =
// weight row r of the group: the rows' block sums are reduced together, so the per-block f32 fma of the contract
// runs for 8 rows in one instruction and 8 independent chains hide its latency (the row kernels, one weight row
// at a time, are bound by that chain: one fma per 32 elements).
//
// Contract: every output is bit-for-bit what the row kernels (quant.h, row_dot_kernel on the AVX2 / AVX3 target)
// give for that row alone: the accumulation order quant.h states (one exact int32 per block, or S and C per
// K-quant super-block, then the f32 fmas in block order from 0).
#pragma once

#include <cstdint>

#include "rbee/core/dtype.h"

namespace rbee::cpu::quant {

inline constexpr int kMatVecRows = 8;

// out[j] = dot(w_j, x) for j < rows (1 <= rows <= kMatVecRows), w_j = (const char*)w + j * w_row_bytes, one weight
// row of k elements; x one activation row as quant.h lays it out (quantize_activation_row).
using MatVecFn = void (*)(int64_t k, const void* w, int64_t w_row_bytes, int rows, const void* x, float* out);

// The kernel for `weight` on this CPU, or nullptr (no AVX-512 VNNI, a Highway target other than AVX2 / AVX3 chosen
// for the row kernels, RBEE_CPU_MATVEC=0 in the environment, or a type without one: then the row kernels run).
MatVecFn matvec_kernel(DType weight);

}  // namespace rbee::cpu::quant
