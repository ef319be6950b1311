// cuBLAS behind rbee::gpu::Blas. Row-major products are computed as the column-major product of the
// transposes: C^T = op(B)^T . op(A)^T, so A and B swap places and no data moves.
#include <cublas_v2.h>

#include "backends/gpu/blas.h"

namespace rbee::gpu {

namespace {

bool cuda_type(DType dtype, cudaDataType_t* type) {
  switch (dtype) {
    case DType::F32: *type = CUDA_R_32F; return true;
    case DType::F16: *type = CUDA_R_16F; return true;
    case DType::BF16: *type = CUDA_R_16BF; return true;
    default: return false;
  }
}

class CublasBlas final : public Blas {
 public:
  explicit CublasBlas(cublasHandle_t handle) : handle_(handle) {}
  ~CublasBlas() override { cublasDestroy(handle_); }
  const char* name() const override { return "cuBLAS"; }

  bool gemm(DType dtype, bool trans_a, bool trans_b, int m, int n, int k, const void* a, int64_t lda,
            int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, void* c, int64_t ldc, int64_t stride_c,
            int batch, Stream stream) override {
    cudaDataType_t type;
    switch (dtype) {
      case DType::F32: type = CUDA_R_32F; break;
      case DType::F16: type = CUDA_R_16F; break;
      case DType::BF16: type = CUDA_R_16BF; break;
      default: return false;
    }
    if (cublasSetStream(handle_, stream) != CUBLAS_STATUS_SUCCESS) return false;
    // f32 inputs may use TF32 tensor cores only if the caller asked; we keep full f32 for exactness.
    const cublasComputeType_t compute = dtype == DType::F32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F;
    const float alpha = 1.0f, beta = 0.0f;
    // Column-major view: C^T [n x m] = op(B)^T [n x k] . op(A)^T [k x m].
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasStatus_t s = cublasGemmStridedBatchedEx(
        handle_, op_b, op_a, n, m, k, &alpha, b, type, (int)ldb, stride_b, a, type, (int)lda, stride_a, &beta, c,
        type, (int)ldc, stride_c, batch, compute, CUBLAS_GEMM_DEFAULT);
    return s == CUBLAS_STATUS_SUCCESS;
  }

  bool gemm_scaled(DType ab_dtype, DType c_dtype, float alpha, bool trans_a, bool trans_b, int m, int n, int k,
                   const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, void* c,
                   int64_t ldc, int64_t stride_c, int batch, Stream stream) override {
    cudaDataType_t type, ctype;
    if (!cuda_type(ab_dtype, &type) || !cuda_type(c_dtype, &ctype)) return false;
    if (c_dtype != DType::F32 && c_dtype != ab_dtype) return false;
    if (cublasSetStream(handle_, stream) != CUBLAS_STATUS_SUCCESS) return false;
    const float beta = 0.0f;
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasStatus_t s = cublasGemmStridedBatchedEx(
        handle_, op_b, op_a, n, m, k, &alpha, b, type, (int)ldb, stride_b, a, type, (int)lda, stride_a, &beta, c,
        ctype, (int)ldc, stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return s == CUBLAS_STATUS_SUCCESS;
  }

  bool gemm_f32_out(DType ab_dtype, bool trans_a, bool trans_b, int m, int n, int k, const void* a, int64_t lda,
                    const void* b, int64_t ldb, float* c, int64_t ldc, float beta, Stream stream) override {
    cudaDataType_t type;
    switch (ab_dtype) {
      case DType::F32: type = CUDA_R_32F; break;
      case DType::F16: type = CUDA_R_16F; break;
      case DType::BF16: type = CUDA_R_16BF; break;
      default: return false;
    }
    if (cublasSetStream(handle_, stream) != CUBLAS_STATUS_SUCCESS) return false;
    const float alpha = 1.0f;
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasStatus_t s = cublasGemmEx(handle_, op_b, op_a, n, m, k, &alpha, b, type, (int)ldb, a, type, (int)lda,
                                          &beta, c, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return s == CUBLAS_STATUS_SUCCESS;
  }

 private:
  cublasHandle_t handle_;
};

}  // namespace

std::unique_ptr<Blas> make_vendor_blas(std::string* why) {
  cublasHandle_t handle = nullptr;
  const cublasStatus_t s = cublasCreate(&handle);
  if (s != CUBLAS_STATUS_SUCCESS) {
    if (why) *why = fmt::format("cuBLAS unavailable (status {}); using rbee GEMM kernels", (int)s);
    return nullptr;
  }
  // Split-K reductions of f16/bf16 GEMMs stay in f32: cuBLAS may otherwise sum partial products in the output
  // type, which costs ~1e-2 relative error on long K (what PyTorch's allow_fp16_reduced_precision_reduction
  // turns off too).
  cublasSetMathMode(handle, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
  if (why) *why = "cuBLAS ready";
  return std::make_unique<CublasBlas>(handle);
}

}  // namespace rbee::gpu
