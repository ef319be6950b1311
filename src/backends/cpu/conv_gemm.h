// The matrix product the CPU convolution kernels are built on: C[M, N] = A[M, K] . B[K, N].
//
// Row-major operands with leading dimensions in elements; C is overwritten (never read), K == 0 gives zeros.
// Single-threaded on purpose: the convolution drivers parallelize over output tiles and call this once per tile.
// This is the one seam to replace by the shared CPU GEMM (src/backends/cpu/gemm.h, written on branch `matmul`)
// once that lands in main; nothing else in the convolution files knows how the product is computed.
#pragma once

#include <cstdint>

namespace rbee::cpu {

void conv_gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
               int64_t ldc);
void conv_gemm(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb, double* c,
               int64_t ldc);

}  // namespace rbee::cpu
