// cpu::gemm: the CPU's general matrix multiply, shared by matmul, convolution and attention.
//
//   C[m, n] (+)= sum_k A[m, k] * B[k, n]        A [M, K], B [K, N], C [M, N]
//
// Operands are read through any strides (row-major, transposed, strided or broadcast views cost no copy) and
// may each be F32, F16 or BF16: 16-bit inputs are widened to f32 while they are packed, products are summed in
// f32, and a 16-bit C is rounded (to nearest even) once, at the end. C has adjacent columns and any row stride.
//
// Design (BLIS): panels of A and B are packed into contiguous, tile-ordered f32 buffers sized for the L2 and
// L1 caches, and a register-blocked FMA micro-kernel (Highway, picked at run time for the CPU: 6x16 on AVX2,
// 12x32 on AVX-512) computes C tiles from them. Decode-shaped products (M or N <= 8) skip packing and stream
// the large operand once. Work is spread over ThreadPool::global().
#pragma once

#include <cstdint>

#include "rbee/core/dtype.h"

namespace rbee::cpu {

// A read-only matrix operand: element (i, j) is at data + i * row_stride + j * col_stride (in elements).
// Strides may be 0 (broadcast) or anything else a tensor view can have.
struct GemmOperand {
  const void* data = nullptr;
  DType dtype = DType::F32;  // F32, F16 or BF16
  int64_t row_stride = 0;
  int64_t col_stride = 1;
};

// The result matrix: element (i, j) is at data + i * row_stride + j. It must not overlap A or B.
struct GemmResult {
  void* data = nullptr;
  DType dtype = DType::F32;  // F32, F16 or BF16
  int64_t row_stride = 0;
};

struct GemmOptions {
  bool accumulate = false;  // C += A*B (C is read) instead of C = A*B (C is only written)
  bool parallel = true;     // may use ThreadPool::global(); called from inside a pool task it runs serially anyway
};

// C[M, N] (+)= A[M, K] B[K, N]. M, N, K >= 0; with K == 0, C becomes 0 (or is left as is when accumulating).
// Throws InvalidArgument for a negative size, a null pointer with work to do, or a dtype other than F32/F16/BF16.
void gemm(int64_t m, int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b, const GemmResult& c,
          const GemmOptions& options = {});

// The all-f32 case: A element (i, p) at a[i * a_rs + p * a_cs], B element (p, j) at b[p * b_rs + j * b_cs],
// C element (i, j) at c[i * ldc + j].
inline void gemm_f32(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                     int64_t b_rs, int64_t b_cs, float* c, int64_t ldc, const GemmOptions& options = {}) {
  gemm(m, n, k, {a, DType::F32, a_rs, a_cs}, {b, DType::F32, b_rs, b_cs}, {c, DType::F32, ldc}, options);
}

// The SIMD target the GEMM kernels run on ("AVX2", "AVX3", ...), for benchmarks and logs.
const char* gemm_target_name();

}  // namespace rbee::cpu
