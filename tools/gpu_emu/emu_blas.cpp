// The emulator's vendor Blas: the row-major -> column-major mapping of src/backends/cuda/cublas_blas.cu over a
// naive column-major strided-batched GEMM that validates its arguments as cuBLAS documents them
// (cublasGemmStridedBatchedEx: lda >= max(1, rows of the stored A), etc.), so the conformance suite checks the
// Blas mapping of the matmul and convolution kernels too. See tools/gpu_emu/README.md.
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "backends/gpu/blas.h"
#include "rbee/core/half.h"

namespace rbee::gpu {

namespace {

float load(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F16: return f16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: {  // BF16: the high half of an f32
      const uint32_t u = (uint32_t)static_cast<const uint16_t*>(p)[i] << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
  }
}
void store(DType t, void* p, int64_t i, float v) {
  switch (t) {
    case DType::F32: static_cast<float*>(p)[i] = v; return;
    case DType::F16: static_cast<uint16_t*>(p)[i] = f32_to_f16_bits(v); return;
    default: {
      const bf16 b(v);
      std::memcpy(static_cast<uint16_t*>(p) + i, &b, 2);
      return;
    }
  }
}

// Column-major C[b] (m x n, ldc) = op(A[b]) (m x k) . op(B[b]) (k x n), f32 accumulation; false when an
// argument is one cuBLAS would reject.
bool colmajor_gemm(DType t, bool ta, bool tb, int m, int n, int k, const void* a, int64_t lda, int64_t sa,
                   const void* b, int64_t ldb, int64_t sb, void* c, int64_t ldc, int64_t sc, int batch,
                   DType ct, float alpha, float beta = 0.f) {
  auto at_least = [](int64_t ld, int64_t rows) { return ld >= (rows > 1 ? rows : 1); };
  if (m < 0 || n < 0 || k < 0 || batch < 0) return false;
  if (!at_least(lda, ta ? k : m) || !at_least(ldb, tb ? n : k) || !at_least(ldc, m)) {
    std::fprintf(stderr, "gpu_emu blas: rejected lda %ld ldb %ld ldc %ld for m %d n %d k %d ta %d tb %d\n",
                 (long)lda, (long)ldb, (long)ldc, m, n, k, ta, tb);
    return false;
  }
  for (int bi = 0; bi < batch; ++bi) {
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        float acc = 0;
        for (int p = 0; p < k; ++p) {
          const float av = load(t, a, bi * sa + (ta ? i * lda + p : p * lda + i));
          const float bv = load(t, b, bi * sb + (tb ? p * ldb + j : j * ldb + p));
          acc += av * bv;
        }
        const int64_t ci = bi * sc + j * ldc + i;
        store(ct, c, ci, beta != 0.f ? alpha * acc + beta * load(ct, c, ci) : alpha * acc);
      }
    }
  }
  return true;
}

class EmuBlas final : public Blas {
 public:
  const char* name() const override { return "emulated cuBLAS"; }
  bool gemm(DType dtype, bool trans_a, bool trans_b, int m, int n, int k, const void* a, int64_t lda,
            int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, void* c, int64_t ldc, int64_t stride_c,
            int batch, Stream) override {
    if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16) return false;
    // As cublas_blas.cu: C^T [n x m] = op(B)^T . op(A)^T in column-major terms.
    return colmajor_gemm(dtype, trans_b, trans_a, n, m, k, b, ldb, stride_b, a, lda, stride_a, c, ldc, stride_c,
                         batch, dtype, 1.0f);
  }
  bool gemm_scaled(DType ab_dtype, DType c_dtype, float alpha, bool trans_a, bool trans_b, int m, int n, int k,
                   const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, void* c,
                   int64_t ldc, int64_t stride_c, int batch, Stream) override {
    if (ab_dtype != DType::F32 && ab_dtype != DType::F16 && ab_dtype != DType::BF16) return false;
    if (c_dtype != DType::F32 && c_dtype != ab_dtype) return false;
    return colmajor_gemm(ab_dtype, trans_b, trans_a, n, m, k, b, ldb, stride_b, a, lda, stride_a, c, ldc, stride_c,
                         batch, c_dtype, alpha);
  }
  bool gemm_f32_out(DType ab_dtype, bool trans_a, bool trans_b, int m, int n, int k, const void* a, int64_t lda,
                    const void* b, int64_t ldb, float* c, int64_t ldc, float beta, Stream) override {
    if (ab_dtype != DType::F32 && ab_dtype != DType::F16 && ab_dtype != DType::BF16) return false;
    return colmajor_gemm(ab_dtype, trans_b, trans_a, n, m, k, b, ldb, 0, a, lda, 0, c, ldc, 0, 1, DType::F32, 1.0f,
                         beta);
  }
};

}  // namespace

std::unique_ptr<Blas> make_vendor_blas(std::string* why) {
  if (why) *why = "emulated cuBLAS";
  return std::make_unique<EmuBlas>();
}

}  // namespace rbee::gpu
