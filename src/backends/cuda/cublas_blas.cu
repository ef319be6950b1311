// cuBLAS behind rbee::gpu::Blas. Row-major products are computed as the column-major product of the
// transposes: C^T = op(B)^T . op(A)^T, so A and B swap places and no data moves.
#include <cublasLt.h>
#include <cublas_v2.h>

#include "backends/cuda/cublaslt_plans.h"
#include "backends/gpu/blas.h"
#include "rbee/core/env.h"
#include "rbee/core/log.h"

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

// RBEE_LINEAR_TUNE (a switch read through rbee/core/env.h; on unless 0): each gemm_bias shape's first call outside a
// graph capture times the heuristic's candidates (and split-K forms of its first two) as replayed graphs and keeps
// the fastest (LtPlans); 0: the heuristic's first algorithm for every shape. Measured on an H100 (2026-11-28,
// docs/perf-notes/sd-speed.md session 11): SD 1.5's linear layers 1.36 -> 1.25 ms a step, its UNet step -4%, SDXL's
// within noise; it costs up to a few seconds at the first call of each new shape (an SD pipeline's prepare at load).
bool lt_tune_enabled() {
  static const bool on = env::flag_or("RBEE_LINEAR_TUNE", true);
  return on;
}

// RBEE_DECODE_GEMM_TUNE (on unless 0): gemm_f32_out's 16-bit products of kDecodeMinRows..kDecodeMaxRows rows (an
// LLM's batched decode and short prompts on F16 / BF16 weights) run through cuBLASLt with a timed algorithm per
// shape (LtPlans: the heuristic's candidates and split-K forms, timed at the shape's first call outside a capture
// on weights out of L2, decode_tune_cold; the m of one power-of-two row group from 16 share the first timed winner,
// and the devices of a process share it too, so a tensor split's ranks run the same algorithms); off:
// cublasGemmEx with CUBLAS_GEMM_DEFAULT for every product. An LLM decode graph's first step of each batch size runs
// eagerly (GraphCache), so its products are timed before the capture; the timing costs 20-70 ms a product shape
// and row group there. Measured on two H200s (2026-11-28, docs/perf-notes/multi-device.md, ninth session): timed
// on warm operands the choice moved 64-stream decoding by +6% in one process and -15% in the next; timed cold and
// shared between the ranks, +3.9% to +6.5% with the tensor split and -0.2% to +2.0% on one GPU, in every process.
bool decode_tune_enabled() {
  static const bool on = env::flag_or("RBEE_DECODE_GEMM_TUNE", true);
  return on;
}
// How the decode tuning times its candidates: on weights out of L2, as a decode step reads them (default), or
// with RBEE_DECODE_GEMM_TIMING=warm on the operands the previous timed call left in L2 (the eighth session's timing,
// whose winners lost in the step: docs/perf-notes/multi-device.md).
bool decode_tune_cold() {
  static const bool cold = env::text("RBEE_DECODE_GEMM_TIMING").value_or("cold") != "warm";
  return cold;
}
// The rows gemm_f32_out tunes: from the first M the float-weight qmatmul gives the vendor GEMM (more rows than one
// gemv launch, quant_launch.h kMatvecMaxRows = 8) to the largest decode batch we serve; prompts above keep the
// heuristic, where the output has tiles enough for every multiprocessor.
constexpr int kDecodeMinRows = 9;
constexpr int kDecodeMaxRows = 256;
constexpr int kDecodeGroupRows = 16;  // row groups 9-16, 17-32, 33-64, 65-128, 129-256

class CublasBlas final : public Blas {
 public:
  CublasBlas(cublasHandle_t handle, cublasLtHandle_t lt, void* workspace, size_t workspace_bytes)
      : handle_(handle), lt_(lt), workspace_(workspace), lt_plans_(lt, workspace, workspace_bytes) {}
  ~CublasBlas() override {
    lt_plans_.release();
    if (workspace_) cudaFree(workspace_);
    if (lt_) cublasLtDestroy(lt_);
    cublasDestroy(handle_);
  }
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
    // f32 sums for every input type; f32 inputs in full f32 (no TF32 tensor cores), for exactness.
    const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
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
    if (!cuda_type(ab_dtype, &type)) return false;
    if (decode_rows(ab_dtype, trans_a, trans_b, m) && (beta == 0.0f || beta == 1.0f)) {
      // Row-major c [m, n] = a [m, k] . (b stored [n, k])^T (+ c): LtPlans' product with x = a, w = b, out = c.
      LtProduct p;
      p.ab = type;
      p.cd = CUDA_R_32F;
      p.m = m, p.n = n, p.k = k;
      p.ldx = lda, p.ldw = ldb, p.ldo = ldc;
      p.reads_c = beta == 1.0f;
      p.align_w = lt_alignment(b), p.align_x = lt_alignment(a), p.align_c = p.align_d = lt_alignment(c);
      const LtTuning tuning{true, kDecodeGroupRows, decode_tune_cold(), true};
      if (lt_plans_.matmul(p, tuning, {a, b, nullptr, c, c}, stream)) return true;
      // cuBLASLt declined the shape or the call: cublasGemmEx below.
    }
    if (cublasSetStream(handle_, stream) != CUBLAS_STATUS_SUCCESS) return false;
    const float alpha = 1.0f;
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasStatus_t s = cublasGemmEx(handle_, op_b, op_a, n, m, k, &alpha, b, type, (int)ldb, a, type, (int)lda,
                                          &beta, c, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return s == CUBLAS_STATUS_SUCCESS;
  }

  // The fused linear layer through LtPlans (x = x, w = w, out = out, C = the residual with beta = 1, C and out
  // distinct): bias in the epilogue, sums and epilogue in f32, out rounded once; split-K partial sums only in f32.
  bool gemm_bias(DType dtype, int m, int n, int k, const void* x, const void* w, const void* bias,
                 const void* residual, void* out, Stream stream) override {
    cudaDataType_t type;
    if (!cuda_type(dtype, &type)) return false;
    LtProduct p;
    p.ab = p.cd = type;
    p.m = m, p.n = n, p.k = k;
    p.ldx = k, p.ldw = k, p.ldo = n;
    p.bias = bias != nullptr;
    p.reads_c = residual != nullptr;
    p.align_w = lt_alignment(w), p.align_x = lt_alignment(x), p.align_d = lt_alignment(out);
    p.align_c = residual ? lt_alignment(residual) : p.align_d;
    return lt_plans_.matmul(p, LtTuning{lt_tune_enabled(), 0}, {x, w, bias, residual, out}, stream);
  }

 private:
  // Whether gemm_f32_out takes LtPlans' tuned path: 16-bit A and B, the layout the float-weight qmatmul and the
  // linear layer pass (a row-major, b row-major [n, k] read transposed), decode-sized rows, the switch on.
  static bool decode_rows(DType ab_dtype, bool trans_a, bool trans_b, int m) {
    return (ab_dtype == DType::F16 || ab_dtype == DType::BF16) && !trans_a && trans_b && m >= kDecodeMinRows &&
           m <= kDecodeMaxRows && decode_tune_enabled();
  }

  cublasHandle_t handle_;
  cublasLtHandle_t lt_;
  void* workspace_;
  LtPlans lt_plans_;  // over lt_ and workspace_: released before them
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
  // cuBLASLt for the fused linear layer (gemm_bias) and gemm_f32_out's decode rows, with its own workspace; without
  // it gemm_bias says no and gemm_f32_out takes cublasGemmEx.
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) lt = nullptr;
  if (lt && cudaMalloc(&workspace, kLtWorkspaceBytes) != cudaSuccess) {
    cudaGetLastError();
    workspace = nullptr;
  }
  if (why) *why = lt ? "cuBLAS ready (cuBLASLt for fused linear layers and decode rows)" : "cuBLAS ready (no cuBLASLt)";
  return std::make_unique<CublasBlas>(handle, lt, workspace, workspace ? kLtWorkspaceBytes : 0);
}

}  // namespace rbee::gpu
