// Vendor BLAS behind one small interface: cuBLAS on CUDA, rocBLAS (opened at run time when installed) on
// ROCm. When no vendor library can do a product, gemm() returns false and the caller uses our own kernel.
#pragma once

#include <cstdint>
#include <memory>

#include "backends/gpu/platform.h"
#include "rbee/core/dtype.h"

namespace rbee::gpu {

class Blas {
 public:
  virtual ~Blas() = default;
  virtual const char* name() const = 0;
  // Row-major batched product C[i] = op(A[i]) . op(B[i]) for i < batch, f32 accumulation, dtype F32, F16 or
  // BF16 for A, B and C alike. A[i] starts at a + i * stride_a (elements); lda/ldb/ldc are row strides.
  // op(A) is A^T when trans_a (A stored [k, m]). Returns false when this library cannot do it.
  virtual bool gemm(DType dtype, bool trans_a, bool trans_b, int m, int n, int k, const void* a, int64_t lda,
                    int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, void* c, int64_t ldc,
                    int64_t stride_c, int batch, Stream stream) = 0;
  // Batched C[i] = alpha * op(A[i]) . op(B[i]) with A and B in ab_dtype (F32, F16 or BF16) and C in c_dtype (F32 or
  // ab_dtype), f32 accumulation, alpha applied before C is rounded; layout arguments as gemm(). Returns false when
  // this library cannot do it (the default: libraries without a mixed-precision batched product).
  virtual bool gemm_scaled(DType /*ab_dtype*/, DType /*c_dtype*/, float /*alpha*/, bool /*trans_a*/, bool /*trans_b*/,
                           int /*m*/, int /*n*/, int /*k*/, const void* /*a*/, int64_t /*lda*/, int64_t /*stride_a*/,
                           const void* /*b*/, int64_t /*ldb*/, int64_t /*stride_b*/, void* /*c*/, int64_t /*ldc*/,
                           int64_t /*stride_c*/, int /*batch*/, Stream /*stream*/) {
    return false;
  }
  // The fused linear layer (op_table.def LinearFused) in one library call: row-major out [m, n] = x [m, k] .
  // (w stored [n, k])^T + bias [n] + residual [m, n] (bias and residual may be null), all in `dtype` (F32, F16 or
  // BF16), all contiguous, sums in f32 and the result rounded once. Returns false when this library cannot do it
  // (the default; cuBLAS does it through cuBLASLt's bias epilogue).
  virtual bool gemm_bias(DType /*dtype*/, int /*m*/, int /*n*/, int /*k*/, const void* /*x*/, const void* /*w*/,
                         const void* /*bias*/, const void* /*residual*/, void* /*out*/, Stream /*stream*/) {
    return false;
  }
  // One product with an F32 result whatever A and B hold (F32, F16 or BF16, f32 accumulation; F32 inputs use
  // full f32 arithmetic, no TF32): C = op(A) . op(B) + beta * C, so beta = 1 accumulates several products into
  // one result. Layout arguments as gemm(). Returns false when this library cannot do it.
  virtual bool gemm_f32_out(DType ab_dtype, bool trans_a, bool trans_b, int m, int n, int k, const void* a,
                            int64_t lda, const void* b, int64_t ldb, float* c, int64_t ldc, float beta,
                            Stream stream) = 0;
};

// The vendor library of this build (cuBLAS / rocBLAS) for the current device, or nullptr when absent.
// `why` receives a sentence for the logs.
std::unique_ptr<Blas> make_vendor_blas(std::string* why);

}  // namespace rbee::gpu
