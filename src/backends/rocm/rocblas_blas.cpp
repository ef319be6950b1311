// rocBLAS behind rbee::gpu::Blas, opened at run time: Debian 12 ships no rocBLAS, so the ROCm backend must
// build and run without it. The few entry points used are declared here with rocBLAS's documented ABI.
// Row-major products are computed as column-major products of the transposes (A and B swap places).
#include <dlfcn.h>

#include "backends/gpu/blas.h"

namespace rbee::gpu {

namespace {

// rocBLAS ABI subset (rocblas-types.h / rocblas-functions.h).
using rocblas_handle = struct _rocblas_handle*;
using rocblas_status = int;
using rocblas_int = int32_t;
using rocblas_stride = int64_t;
enum rocblas_operation_ { rocblas_operation_none = 111, rocblas_operation_transpose = 112 };
enum rocblas_datatype_ { rocblas_datatype_f16_r = 150, rocblas_datatype_f32_r = 151, rocblas_datatype_bf16_r = 168 };
enum rocblas_gemm_algo_ { rocblas_gemm_algo_standard = 0 };
constexpr rocblas_status kRocblasSuccess = 0;

using CreateFn = rocblas_status (*)(rocblas_handle*);
using DestroyFn = rocblas_status (*)(rocblas_handle);
using SetStreamFn = rocblas_status (*)(rocblas_handle, hipStream_t);
using GemmStridedBatchedExFn = rocblas_status (*)(
    rocblas_handle, int /*transA*/, int /*transB*/, rocblas_int m, rocblas_int n, rocblas_int k, const void* alpha,
    const void* a, int a_type, rocblas_int lda, rocblas_stride stride_a, const void* b, int b_type, rocblas_int ldb,
    rocblas_stride stride_b, const void* beta, const void* c, int c_type, rocblas_int ldc, rocblas_stride stride_c,
    void* d, int d_type, rocblas_int ldd, rocblas_stride stride_d, rocblas_int batch_count, int compute_type,
    int algo, int32_t solution_index, uint32_t flags);

class RocblasBlas final : public Blas {
 public:
  RocblasBlas(void* lib, rocblas_handle handle, DestroyFn destroy, SetStreamFn set_stream, GemmStridedBatchedExFn gemm)
      : lib_(lib), handle_(handle), destroy_(destroy), set_stream_(set_stream), gemm_(gemm) {}
  ~RocblasBlas() override {
    destroy_(handle_);
    dlclose(lib_);
  }
  const char* name() const override { return "rocBLAS"; }

  bool gemm(DType dtype, bool trans_a, bool trans_b, int m, int n, int k, const void* a, int64_t lda,
            int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, void* c, int64_t ldc, int64_t stride_c,
            int batch, Stream stream) override {
    int type;
    switch (dtype) {
      case DType::F32: type = rocblas_datatype_f32_r; break;
      case DType::F16: type = rocblas_datatype_f16_r; break;
      case DType::BF16: type = rocblas_datatype_bf16_r; break;
      default: return false;
    }
    if (set_stream_(handle_, stream) != kRocblasSuccess) return false;
    const float alpha = 1.0f, beta = 0.0f;
    const int op_b = trans_b ? rocblas_operation_transpose : rocblas_operation_none;
    const int op_a = trans_a ? rocblas_operation_transpose : rocblas_operation_none;
    return gemm_(handle_, op_b, op_a, n, m, k, &alpha, b, type, (int)ldb, stride_b, a, type, (int)lda, stride_a, &beta,
                 c, type, (int)ldc, stride_c, c, type, (int)ldc, stride_c, batch, rocblas_datatype_f32_r,
                 rocblas_gemm_algo_standard, 0, 0) == kRocblasSuccess;
  }

  bool gemm_f32_out(DType ab_dtype, bool trans_a, bool trans_b, int m, int n, int k, const void* a, int64_t lda,
                    const void* b, int64_t ldb, float* c, int64_t ldc, float beta, Stream stream) override {
    int type;
    switch (ab_dtype) {
      case DType::F32: type = rocblas_datatype_f32_r; break;
      case DType::F16: type = rocblas_datatype_f16_r; break;
      case DType::BF16: type = rocblas_datatype_bf16_r; break;
      default: return false;
    }
    if (set_stream_(handle_, stream) != kRocblasSuccess) return false;
    const float alpha = 1.0f;
    const int op_b = trans_b ? rocblas_operation_transpose : rocblas_operation_none;
    const int op_a = trans_a ? rocblas_operation_transpose : rocblas_operation_none;
    // One product as a batch of one; C and D (the output) are the same f32 matrix.
    return gemm_(handle_, op_b, op_a, n, m, k, &alpha, b, type, (int)ldb, 0, a, type, (int)lda, 0, &beta, c,
                 rocblas_datatype_f32_r, (int)ldc, 0, c, rocblas_datatype_f32_r, (int)ldc, 0, 1,
                 rocblas_datatype_f32_r, rocblas_gemm_algo_standard, 0, 0) == kRocblasSuccess;
  }

 private:
  void* lib_;
  rocblas_handle handle_;
  DestroyFn destroy_;
  SetStreamFn set_stream_;
  GemmStridedBatchedExFn gemm_;
};

}  // namespace

std::unique_ptr<Blas> make_vendor_blas(std::string* why) {
  void* lib = nullptr;
  for (const char* name : {"librocblas.so", "librocblas.so.4", "librocblas.so.3", "librocblas.so.0"}) {
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
  }
  if (!lib) {
    if (why) *why = "rocBLAS not installed; using rbee GEMM kernels";
    return nullptr;
  }
  auto create = reinterpret_cast<CreateFn>(dlsym(lib, "rocblas_create_handle"));
  auto destroy = reinterpret_cast<DestroyFn>(dlsym(lib, "rocblas_destroy_handle"));
  auto set_stream = reinterpret_cast<SetStreamFn>(dlsym(lib, "rocblas_set_stream"));
  auto gemm = reinterpret_cast<GemmStridedBatchedExFn>(dlsym(lib, "rocblas_gemm_strided_batched_ex"));
  rocblas_handle handle = nullptr;
  if (!create || !destroy || !set_stream || !gemm || create(&handle) != kRocblasSuccess) {
    if (why) *why = "rocBLAS found but unusable (missing entry points or handle creation failed)";
    dlclose(lib);
    return nullptr;
  }
  if (why) *why = "rocBLAS opened at run time";
  return std::make_unique<RocblasBlas>(lib, handle, destroy, set_stream, gemm);
}

}  // namespace rbee::gpu
