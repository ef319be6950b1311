// cuBLAS behind rbee::gpu::Blas. Row-major products are computed as the column-major product of the
// transposes: C^T = op(B)^T . op(A)^T, so A and B swap places and no data moves.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

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
// the fastest (LtPlan); 0: the heuristic's first algorithm for every shape. Measured on an H100 (2026-11-28,
// docs/perf-notes/sd-speed.md session 11): SD 1.5's linear layers 1.36 -> 1.25 ms a step, its UNet step -4%, SDXL's
// within noise; it costs up to a few seconds at the first call of each new shape (an SD pipeline's prepare at load).
bool lt_tune_enabled() {
  static const bool on = env::flag_or("RBEE_LINEAR_TUNE", true);
  return on;
}

// Candidates asked of the heuristic per shape, and split-K variants added to its first kLtSplitBases (kLtSplits
// slices, partial sums reduced in f32).
constexpr int kLtCandidates = 16;
constexpr int kLtSplitBases = 2;
constexpr int kLtSplits[] = {2, 3, 4, 8};
constexpr int kLtMaxCandidates = kLtCandidates + kLtSplitBases * (int)(sizeof(kLtSplits) / sizeof(kLtSplits[0]));
constexpr int kLtTimedReps = 10;     // calls recorded in one timing graph
constexpr int kLtTimedLaunches = 2;  // timed replays of that graph
// A candidate replaces the heuristic's first only when it takes less than this fraction of its time.
constexpr float kLtMargin = 0.97f;

// One cuBLASLt product shape of gemm_bias, planned once: descriptors, the heuristic's candidate algorithms (best
// ranked first) and the one this shape runs. The choice is made once per shape for the process: at its first call
// outside a graph capture, the fastest candidate by device-event timing (RBEE_LINEAR_TUNE=1), else the
// heuristic's first; a shape first seen inside a capture keeps the heuristic's first. Later calls reuse it, so a
// shape's result does not change between calls.
struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t candidates[kLtMaxCandidates] = {};
  int count = 0;  // candidates held
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;       // the heuristic gave at least one algorithm
  bool decided = false;  // algo is final
};

class CublasBlas final : public Blas {
 public:
  CublasBlas(cublasHandle_t handle, cublasLtHandle_t lt, void* workspace, size_t workspace_bytes)
      : handle_(handle), lt_(lt), workspace_(workspace), workspace_bytes_(workspace_bytes) {}
  ~CublasBlas() override {
    for (auto& [key, p] : plans_) {
      if (p.a) cublasLtMatrixLayoutDestroy(p.a);
      if (p.b) cublasLtMatrixLayoutDestroy(p.b);
      if (p.c) cublasLtMatrixLayoutDestroy(p.c);
      if (p.op) cublasLtMatmulDescDestroy(p.op);
    }
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

  // cuBLASLt, column-major view of the row-major product: out^T [n, m] = op(w) [n, k] . x^T [k, m] with w stored
  // column-major [k, n] (transposed), x column-major [k, m], out column-major [n, m]; the bias runs along out^T's
  // rows (the n output features); the residual is C with beta = 1 (C and D distinct). Sums and epilogue in f32, D
  // rounded once; split-K partial sums only in f32 (no output-type reduction, as the cuBLAS handle's math mode).
  bool gemm_bias(DType dtype, int m, int n, int k, const void* x, const void* w, const void* bias,
                 const void* residual, void* out, Stream stream) override {
    if (!lt_) return false;
    cudaDataType_t type;
    if (!cuda_type(dtype, &type)) return false;
    // The heuristic picks an algorithm for the operands' alignments (cuBLASLt assumes 256 bytes unless told).
    auto align = [](const void* ptr) -> uint32_t {
      const uintptr_t v = reinterpret_cast<uintptr_t>(ptr);
      uint32_t a = 256;
      while (a > 1 && v % a != 0) a /= 2;
      return a;
    };
    const uint32_t aligns[4] = {align(w), align(x), align(residual ? residual : out), align(out)};
    int align_key = 0;
    for (int i = 0; i < 4; ++i) align_key |= (31 - __builtin_clz(aligns[i])) << (4 * i);  // log2, 0..8
    std::lock_guard<std::mutex> lock(mutex_);
    LtPlan& p = plans_[std::make_tuple((int)dtype, m, n, k, (bias ? 1 : 0) | (residual ? 2 : 0), align_key)];
    if (!p.op) {
      if (!plan(p, type, m, n, k, bias != nullptr, aligns)) return false;
    }
    if (!p.ok) return false;
    if (bias && cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)) !=
                    CUBLAS_STATUS_SUCCESS)
      return false;
    const float alpha = 1.0f, beta = residual ? 1.0f : 0.0f;
    const void* c = residual ? residual : out;
    auto run = [&](const cublasLtMatmulAlgo_t& algo) {
      return cublasLtMatmul(lt_, p.op, &alpha, w, p.a, x, p.b, &beta, c, p.c, out, p.c, &algo, workspace_,
                            workspace_bytes_, stream) == CUBLAS_STATUS_SUCCESS;
    };
    if (!p.decided) decide(p, m, n, k, stream, out != residual, run);
    return run(p.algo);
  }

 private:
  bool plan(LtPlan& p, cudaDataType_t type, int m, int n, int k, bool bias, const uint32_t (&aligns)[4]) {
    auto ok = [](cublasStatus_t st) { return st == CUBLAS_STATUS_SUCCESS; };
    if (!ok(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F))) return false;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (!ok(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta))) ||
        !ok(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb))) ||
        !ok(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi))))
      return false;
    if (bias) {
      const cudaDataType_t bias_type = type;
      if (!ok(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                             sizeof(bias_type))))
        return false;
    }
    if (!ok(cublasLtMatrixLayoutCreate(&p.a, type, k, n, k)) || !ok(cublasLtMatrixLayoutCreate(&p.b, type, k, m, k)) ||
        !ok(cublasLtMatrixLayoutCreate(&p.c, type, n, m, n)))
      return false;
    cublasLtMatmulPreference_t pref = nullptr;
    if (!ok(cublasLtMatmulPreferenceCreate(&pref))) return false;
    const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    cublasLtMatmulHeuristicResult_t results[kLtCandidates] = {};
    int found = 0;
    const bool got =
        ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                                sizeof(workspace_bytes_))) &&
        ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction,
                                                sizeof(reduction))) &&
        ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aligns[0],
                                                sizeof(uint32_t))) &&
        ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &aligns[1],
                                                sizeof(uint32_t))) &&
        ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &aligns[2],
                                                sizeof(uint32_t))) &&
        ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &aligns[3],
                                                sizeof(uint32_t))) &&
        ok(cublasLtMatmulAlgoGetHeuristic(lt_, p.op, p.a, p.b, p.c, p.c, pref, lt_tune_enabled() ? kLtCandidates : 1,
                                          results, &found)) &&
        found > 0;
    cublasLtMatmulPreferenceDestroy(pref);
    if (!got) return true;  // planned: this shape has no algorithm (p.ok stays false)
    for (int i = 0; i < found; ++i) {
      if (results[i].state == CUBLAS_STATUS_SUCCESS) p.candidates[p.count++] = results[i].algo;
    }
    if (p.count == 0) return true;
    p.algo = p.candidates[0];
    p.ok = true;
    if (lt_tune_enabled()) add_split_k_variants(p);
    return true;
  }

  // Split-K forms of the heuristic's first candidates that take none: kLtSplits slices of K summed in f32 (the
  // compute type) before the epilogue, kept when cuBLASLt accepts them for this shape within the workspace. They
  // help where the output has fewer tiles than the device has multiprocessors; the timing in decide() says.
  void add_split_k_variants(LtPlan& p) {
    const int bases = std::min(p.count, kLtSplitBases);
    for (int i = 0; i < bases; ++i) {
      const cublasLtMatmulAlgo_t base = p.candidates[i];
      int32_t support = 0, splits = 1;
      uint32_t schemes = 0;
      size_t written = 0;
      if (cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &support, sizeof(support),
                                            &written) != CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &schemes,
                                            sizeof(schemes), &written) != CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoConfigGetAttribute(&base, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits),
                                               &written) != CUBLAS_STATUS_SUCCESS)
        continue;
      if (!support || splits > 1 || !(schemes & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)) continue;
      for (int n : kLtSplits) {
        if (p.count >= kLtMaxCandidates) return;
        cublasLtMatmulAlgo_t algo = base;
        const int32_t split = n;
        const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        cublasLtMatmulHeuristicResult_t check{};
        if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof(split)) ==
                CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                                 sizeof(scheme)) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulAlgoCheck(lt_, p.op, p.a, p.b, p.c, p.c, &algo, &check) == CUBLAS_STATUS_SUCCESS &&
            check.workspaceSize <= workspace_bytes_)
          p.candidates[p.count++] = algo;
      }
    }
  }

  // Fixes p.algo for good. With tuning on, several candidates and an uncaptured stream, each candidate runs once
  // eagerly (a candidate that refuses the call is skipped), then kLtTimedReps of its calls are recorded as one device
  // graph on `stream` and the graph is replayed kLtTimedLaunches times between two events: device time per call
  // without the host's launch cost, which is larger than the GEMM itself for SD's small shapes (timing eager calls
  // measured the launches: 2026-11-27 H100 call, docs/perf-notes/sd-speed.md). The calls use the call's own
  // operands (D is rewritten with the same values, as C and D are distinct when `idempotent`). The heuristic's first
  // stays unless another takes less than kLtMargin of its time. This synchronizes the host with the stream once per
  // candidate, so it runs only at a shape's first call (an SD pipeline makes those calls at load: Pipeline::prepare).
  template <class Run>
  void decide(LtPlan& p, int m, int n, int k, Stream stream, bool idempotent, const Run& run) {
    p.decided = true;
    if (!lt_tune_enabled() || p.count < 2 || !idempotent) return;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone) {
      cudaGetLastError();
      log::debug("cuBLASLt linear [{} x {}] . [{} x {}]: first seen inside a graph capture, heuristic's first algorithm",
                 m, k, k, n);
      return;
    }
    cudaEvent_t start = nullptr, stop = nullptr;
    if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
      cudaGetLastError();
      if (start) cudaEventDestroy(start);
      return;
    }
    float best_ms = 0, first_ms = 0;
    int best = 0;
    bool have = false;
    for (int i = 0; i < p.count; ++i) {
      float ms = 0;
      if (!run(p.candidates[i]) || !time_in_graph(stream, start, stop, [&] { return run(p.candidates[i]); }, &ms)) {
        cudaGetLastError();
        continue;
      }
      if (i == 0) first_ms = ms;
      // Another candidate must beat the heuristic's first by kLtMargin: timing noise alone does not move a shape.
      const float bar = i > 0 && best == 0 && first_ms > 0 ? best_ms * kLtMargin : best_ms;
      if (!have || ms < bar) best_ms = ms, best = i, have = true;
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    if (!have) return;
    p.algo = p.candidates[best];
    int32_t splits = 1;
    uint32_t tile = 0;
    size_t written = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits), &written);
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &written);
    log::debug("cuBLASLt linear [{} x {}] . [{} x {}]: candidate {} of {} by timing (tile id {}, split-K {}), {:.2f} us "
               "(heuristic's first {:.2f} us)",
               m, k, k, n, best + 1, p.count, tile, splits, best_ms * 1e3, first_ms * 1e3);
  }

  // Records kLtTimedReps calls of `call` as a graph on `stream` (thread-local capture), replays it once untimed and
  // kLtTimedLaunches times between `start` and `stop`; *ms = milliseconds per call. False when a call, the capture
  // or a replay fails (the capture is ended either way).
  template <class Call>
  static bool time_in_graph(Stream stream, cudaEvent_t start, cudaEvent_t stop, const Call& call, float* ms) {
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return false;
    bool ok = true;
    for (int r = 0; r < kLtTimedReps && ok; ++r) ok = call();
    cudaGraph_t graph = nullptr;
    ok = cudaStreamEndCapture(stream, &graph) == cudaSuccess && ok && graph;
    cudaGraphExec_t exec = nullptr;
    ok = ok && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    ok = ok && cudaGraphLaunch(exec, stream) == cudaSuccess && cudaEventRecord(start, stream) == cudaSuccess;
    for (int r = 0; r < kLtTimedLaunches && ok; ++r) ok = cudaGraphLaunch(exec, stream) == cudaSuccess;
    ok = ok && cudaEventRecord(stop, stream) == cudaSuccess && cudaEventSynchronize(stop) == cudaSuccess &&
         cudaEventElapsedTime(ms, start, stop) == cudaSuccess;
    if (exec) {
      cudaStreamSynchronize(stream);  // the replays are done before their graph goes
      cudaGraphExecDestroy(exec);
    }
    if (graph) cudaGraphDestroy(graph);
    if (ok) *ms /= (float)(kLtTimedReps * kLtTimedLaunches);
    return ok;
  }

  cublasHandle_t handle_;
  cublasLtHandle_t lt_;
  void* workspace_;
  size_t workspace_bytes_;
  std::mutex mutex_;
  std::map<std::tuple<int, int, int, int, int, int>, LtPlan> plans_;
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
  // cuBLASLt for the fused linear layer (gemm_bias), with its own workspace; without it gemm_bias says no.
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) lt = nullptr;
  if (lt && cudaMalloc(&workspace, kLtWorkspaceBytes) != cudaSuccess) {
    cudaGetLastError();
    workspace = nullptr;
  }
  if (why) *why = lt ? "cuBLAS ready (cuBLASLt for fused linear layers)" : "cuBLAS ready (no cuBLASLt)";
  return std::make_unique<CublasBlas>(handle, lt, workspace, workspace ? kLtWorkspaceBytes : 0);
}

}  // namespace rbee::gpu
