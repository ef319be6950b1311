// LtPlans (cublaslt_plans.h): cuBLASLt plans per shape and their timed algorithm choice.
#include "backends/cuda/cublaslt_plans.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>

#include "rbee/core/log.h"

namespace rbee::gpu {

namespace {

constexpr int kLtTimedReps = 10;     // calls recorded in one timing graph
constexpr int kLtTimedLaunches = 2;  // timed replays of that graph
// A candidate replaces the heuristic's first only when it takes less than this fraction of its time.
constexpr float kLtMargin = 0.97f;

bool ok(cublasStatus_t st) { return st == CUBLAS_STATUS_SUCCESS; }

// LtTuning::shared: the choices of the process's devices, per row-group key and device kind (compute capability and
// multiprocessors: one choice fits identical cards). decided: the timing device is done (have: it found one).
struct SharedChoice {
  bool decided = false;
  bool have = false;
  cublasLtMatmulAlgo_t algo{};
};
using SharedKey = std::array<int64_t, 16>;
std::mutex g_shared_mutex;
std::condition_variable g_shared_decided;
std::map<SharedKey, SharedChoice>& shared_choices() {
  static std::map<SharedKey, SharedChoice> choices;
  return choices;
}
// How long a device waits for another's timing before it keeps the heuristic's first (a timing takes well under a
// second; this only bounds a stuck peer).
constexpr auto kSharedWait = std::chrono::seconds(30);

// The reduction schemes whose partial sums stay in f32: in the workspace in the compute type always; for f32
// outputs also in place and in the output type (both f32 then).
uint32_t f32_reductions(cudaDataType_t cd) {
  uint32_t mask = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  if (cd == CUDA_R_32F) mask |= CUBLASLT_REDUCTION_SCHEME_INPLACE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
  return mask;
}

// Records kLtTimedReps calls of `call` as a graph on `stream` (thread-local capture), replays it once untimed and
// kLtTimedLaunches times between `start` and `stop`: device time per call without the host's launch cost, which is
// larger than the GEMM itself for small shapes (timing eager calls measured the launches: 2026-11-27 H100 call,
// docs/perf-notes/sd-speed.md). *ms = milliseconds per call. False when a call, the capture or a replay fails (the
// capture is ended either way).
// With flush_bytes > 0 each call comes after a write of flush_bytes to `flush` (recorded too; the caller takes its
// own time off).
template <class Call>
bool time_in_graph(cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop, const Call& call, float* ms,
                   void* flush = nullptr, size_t flush_bytes = 0) {
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return false;
  bool good = true;
  for (int r = 0; r < kLtTimedReps && good; ++r) {
    if (flush_bytes > 0) good = cudaMemsetAsync(flush, r & 0xff, flush_bytes, stream) == cudaSuccess;
    good = good && call();
  }
  cudaGraph_t graph = nullptr;
  good = cudaStreamEndCapture(stream, &graph) == cudaSuccess && good && graph;
  cudaGraphExec_t exec = nullptr;
  good = good && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  good = good && cudaGraphLaunch(exec, stream) == cudaSuccess && cudaEventRecord(start, stream) == cudaSuccess;
  for (int r = 0; r < kLtTimedLaunches && good; ++r) good = cudaGraphLaunch(exec, stream) == cudaSuccess;
  good = good && cudaEventRecord(stop, stream) == cudaSuccess && cudaEventSynchronize(stop) == cudaSuccess &&
         cudaEventElapsedTime(ms, start, stop) == cudaSuccess;
  if (exec) {
    cudaStreamSynchronize(stream);  // the replays are done before their graph goes
    cudaGraphExecDestroy(exec);
  }
  if (graph) cudaGraphDestroy(graph);
  if (good) *ms /= (float)(kLtTimedReps * kLtTimedLaunches);
  return good;
}

void describe(const cublasLtMatmulAlgo_t& algo, uint32_t* tile, int32_t* splits, uint32_t* scheme) {
  size_t written = 0;
  *tile = 0, *splits = 1, *scheme = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, tile, sizeof(*tile), &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, splits, sizeof(*splits), &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, scheme, sizeof(*scheme),
                                       &written);
}

}  // namespace

uint32_t lt_alignment(const void* ptr) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(ptr);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

int lt_row_group(int m, int group_rows) {
  int g = std::max(group_rows, 1);
  while (g < m) g *= 2;
  return g;
}

void LtPlans::release() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [key, p] : plans_) {
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) cublasLtMatrixLayoutDestroy(p.c);
    if (p.op) cublasLtMatmulDescDestroy(p.op);
  }
  plans_.clear();
  winners_.clear();
  if (flush_) cudaFree(flush_);
  flush_ = nullptr;
  flush_bytes_ = 0;
}

LtPlans::Key LtPlans::key_of(const LtProduct& p, int m) {
  return {m,     (int64_t)p.ab, (int64_t)p.cd, p.n,       p.k,       p.ldx,     p.ldw,
          p.ldo, p.bias,        p.reads_c,     p.align_w, p.align_x, p.align_c, p.align_d};
}

bool LtPlans::matmul(const LtProduct& p, const LtTuning& tuning, const LtOperands& o, cudaStream_t stream) {
  if (!lt_) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  Plan& plan = plans_[key_of(p, p.m)];
  if (!plan.op && !make_plan(plan, p, tuning.time)) return false;
  if (!plan.ok) return false;
  if (p.bias && !ok(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &o.bias,
                                                   sizeof(o.bias))))
    return false;
  const float alpha = 1.0f, beta = p.reads_c ? 1.0f : 0.0f;
  const void* c = p.reads_c && o.c ? o.c : o.out;
  auto run = [&](const cublasLtMatmulAlgo_t& algo) {
    return ok(cublasLtMatmul(lt_, plan.op, &alpha, o.w, plan.a, o.x, plan.b, &beta, c, plan.c, o.out, plan.c, &algo,
                             workspace_, workspace_bytes_, stream));
  };
  // Timing reruns the call: only sound when out is rewritten with the same values (C not read, or read elsewhere).
  const bool timeable = !p.reads_c || c != o.out;
  if (!plan.decided) decide(plan, p, tuning, timeable, stream, run);
  return run(plan.algo);
}

// Descriptors and the heuristic's candidates (one when the choice is not timed), then split-K forms. False when a
// descriptor could not be made; true with plan.ok false when the heuristic has no algorithm for the shape.
bool LtPlans::make_plan(Plan& plan, const LtProduct& p, bool with_splits) {
  if (!ok(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F))) return false;
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const cublasLtEpilogue_t epi = p.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  if (!ok(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta))) ||
      !ok(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb))) ||
      !ok(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi))))
    return false;
  if (p.bias && !ok(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &p.cd, sizeof(p.cd))))
    return false;
  // Column-major: w as [k, n] (ld ldw) read transposed, x as [k, m] (ld ldx), C and out as [n, m] (ld ldo).
  if (!ok(cublasLtMatrixLayoutCreate(&plan.a, p.ab, p.k, p.n, p.ldw)) ||
      !ok(cublasLtMatrixLayoutCreate(&plan.b, p.ab, p.k, p.m, p.ldx)) ||
      !ok(cublasLtMatrixLayoutCreate(&plan.c, p.cd, p.n, p.m, p.ldo)))
    return false;
  cublasLtMatmulPreference_t pref = nullptr;
  if (!ok(cublasLtMatmulPreferenceCreate(&pref))) return false;
  const uint32_t reduction = f32_reductions(p.cd);
  const uint32_t aligns[4] = {p.align_w, p.align_x, p.align_c, p.align_d};
  const cublasLtMatmulPreferenceAttributes_t align_attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  bool got = ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                                     sizeof(workspace_bytes_))) &&
             ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction,
                                                     sizeof(reduction)));
  for (int i = 0; i < 4 && got; ++i)
    got = ok(cublasLtMatmulPreferenceSetAttribute(pref, align_attrs[i], &aligns[i], sizeof(uint32_t)));
  cublasLtMatmulHeuristicResult_t results[kLtCandidates] = {};
  int found = 0;
  got = got &&
        ok(cublasLtMatmulAlgoGetHeuristic(lt_, plan.op, plan.a, plan.b, plan.c, plan.c, pref,
                                          with_splits ? kLtCandidates : 1, results, &found)) &&
        found > 0;
  cublasLtMatmulPreferenceDestroy(pref);
  if (!got) return true;  // planned: this shape has no algorithm (plan.ok stays false)
  for (int i = 0; i < found; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS) plan.candidates[plan.count++] = results[i].algo;
  }
  if (plan.count == 0) return true;
  plan.algo = plan.candidates[0];
  plan.ok = true;
  if (with_splits) add_split_k_variants(plan, p);
  return true;
}

// Split-K forms of the heuristic's first candidates that take none: kLtSplits slices of K summed in f32 (in the
// workspace; for f32 outputs also in place), kept when cuBLASLt accepts them for this shape within the workspace.
// They help where the output has fewer tiles than the device has multiprocessors (SD's narrow layers, an LLM's
// decode rows on N = 4096 products); the timing in decide() says.
void LtPlans::add_split_k_variants(Plan& plan, const LtProduct& p) {
  const int bases = std::min(plan.count, kLtSplitBases);
  uint32_t schemes[kLtSplitSchemes] = {CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, 0};
  if (p.cd == CUDA_R_32F) schemes[1] = CUBLASLT_REDUCTION_SCHEME_INPLACE;
  for (int i = 0; i < bases; ++i) {
    const cublasLtMatmulAlgo_t base = plan.candidates[i];
    int32_t support = 0, splits = 1;
    uint32_t supported = 0;
    size_t written = 0;
    if (!ok(cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &support, sizeof(support),
                                              &written)) ||
        !ok(cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &supported,
                                              sizeof(supported), &written)) ||
        !ok(cublasLtMatmulAlgoConfigGetAttribute(&base, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits),
                                                 &written)))
      continue;
    if (!support || splits > 1) continue;
    for (uint32_t scheme : schemes) {
      if (scheme == 0 || !(supported & scheme)) continue;
      for (int n : kLtSplits) {
        if (plan.count >= kLtMaxCandidates) return;
        cublasLtMatmulAlgo_t algo = base;
        const int32_t split = n;
        cublasLtMatmulHeuristicResult_t check{};
        if (ok(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof(split))) &&
            ok(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                                    sizeof(scheme))) &&
            ok(cublasLtMatmulAlgoCheck(lt_, plan.op, plan.a, plan.b, plan.c, plan.c, &algo, &check)) &&
            check.workspaceSize <= workspace_bytes_)
          plan.candidates[plan.count++] = algo;
      }
    }
  }
}

// Whether `winner` (another m's choice in this plan's row group) runs this plan's shape within the workspace; if
// so it becomes the plan's algorithm.
bool LtPlans::borrow(Plan& plan, const cublasLtMatmulAlgo_t& winner) const {
  cublasLtMatmulHeuristicResult_t check{};
  if (!ok(cublasLtMatmulAlgoCheck(lt_, plan.op, plan.a, plan.b, plan.c, plan.c, &winner, &check)) ||
      check.workspaceSize > workspace_bytes_)
    return false;
  plan.algo = winner;
  return true;
}

// Fixes plan.algo for good (the plan's life, step 2, in cublaslt_plans.h). Timing: each candidate runs once eagerly
// (a candidate that refuses the call is skipped), then kLtTimedReps of its calls are recorded as one graph and
// replayed (time_in_graph), with the call's own operands (out is rewritten with the same values). This synchronizes
// the host with the stream once per candidate, so it happens only at a shape's first call.
template <class Run>
void LtPlans::decide(Plan& plan, const LtProduct& p, const LtTuning& tuning, bool timeable, cudaStream_t stream,
                     const Run& run) {
  plan.decided = true;
  const Key group = key_of(p, lt_row_group(p.m, tuning.group_rows));
  if (tuning.group_rows > 0) {
    const auto it = winners_.find(group);
    if (it != winners_.end() && borrow(plan, it->second)) {
      log::debug("cuBLASLt [{} x {}] . [{} x {}]: the algorithm timed for another m of rows up to {}", p.m, p.k, p.k,
                 p.n, group[0]);
      return;
    }
  }
  if (!tuning.time || plan.count < 2 || !timeable) return;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone) {
    cudaGetLastError();
    log::debug("cuBLASLt [{} x {}] . [{} x {}]: first seen inside a graph capture, heuristic's first algorithm", p.m,
               p.k, p.k, p.n);
    return;
  }
  // Shared choice: the first device to get here times; the others wait for its algorithm and take it.
  SharedChoice* shared = nullptr;
  if (tuning.shared) {
    // The group's key, then the device kind in the two entries after it.
    static_assert(std::tuple_size_v<Key> + 2 == std::tuple_size_v<SharedKey>, "SharedKey: a group key + 2 entries");
    SharedKey key{};
    std::copy(group.begin(), group.end(), key.begin());
    // Devices of one kind (compute capability, multiprocessor count) share a choice: three attributes, not the
    // whole cudaDeviceProp (which also queries clocks and limits this key does not use).
    int device = 0, major = 0, minor = 0, sms = 0;
    if (cudaGetDevice(&device) == cudaSuccess &&
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess) {
      key[group.size()] = major * 10 + minor;
      key[group.size() + 1] = sms;
      std::unique_lock<std::mutex> lock(g_shared_mutex);
      auto [it, first] = shared_choices().try_emplace(key);
      if (first) {
        shared = &it->second;  // this device times it and publishes below (map nodes stay put)
      } else {
        const SharedChoice& c = it->second;
        g_shared_decided.wait_for(lock, kSharedWait, [&] { return c.decided; });
        if (c.decided && c.have && borrow(plan, c.algo)) {
          if (tuning.group_rows > 0) winners_.emplace(group, plan.algo);
          log::debug("cuBLASLt [{} x {}] . [{} x {}]: the algorithm another device timed", p.m, p.k, p.k, p.n);
        }
        return;  // not decided in time, or it does not fit here: the heuristic's first
      }
    } else {
      cudaGetLastError();
    }
  }
  // Publishes this device's outcome to the others waiting on the shared choice, however the timing ends.
  struct Publish {
    SharedChoice* c;
    const Plan& plan;
    bool have = false;
    ~Publish() {
      if (!c) return;
      {
        std::lock_guard<std::mutex> lock(g_shared_mutex);
        c->decided = true;
        c->have = have;
        c->algo = plan.algo;
      }
      g_shared_decided.notify_all();
    }
  } publish{shared, plan};
  cudaEvent_t start = nullptr, stop = nullptr;
  if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
    cudaGetLastError();
    if (start) cudaEventDestroy(start);
    return;
  }
  // Cold timing: the flush alone is timed first and taken off every candidate's time.
  float flush_ms = 0;
  size_t flush_bytes = 0;
  if (tuning.cold && flush_buffer()) {
    flush_bytes = flush_bytes_;
    if (!time_in_graph(stream, start, stop, [] { return true; }, &flush_ms, flush_, flush_bytes)) {
      cudaGetLastError();
      flush_bytes = 0, flush_ms = 0;
    }
  }
  float best_ms = 0, first_ms = 0;
  int best = 0;
  bool have = false;
  for (int i = 0; i < plan.count; ++i) {
    float ms = 0;
    if (!run(plan.candidates[i]) ||
        !time_in_graph(stream, start, stop, [&] { return run(plan.candidates[i]); }, &ms, flush_, flush_bytes)) {
      cudaGetLastError();
      continue;
    }
    ms -= flush_ms;
    if (i == 0) first_ms = ms;
    // Another candidate must beat the heuristic's first by kLtMargin: timing noise alone does not move a shape.
    const float bar = i > 0 && best == 0 && first_ms > 0 ? best_ms * kLtMargin : best_ms;
    if (!have || ms < bar) best_ms = ms, best = i, have = true;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!have) return;
  plan.algo = plan.candidates[best];
  publish.have = true;
  if (tuning.group_rows > 0) winners_.emplace(group, plan.algo);
  uint32_t tile = 0, scheme = 0;
  int32_t splits = 1;
  describe(plan.algo, &tile, &splits, &scheme);
  log::debug("cuBLASLt [{} x {}] . [{} x {}]: candidate {} of {} by timing (tile id {}, split-K {}, reduction {}), "
             "{:.2f} us (heuristic's first {:.2f} us{})",
             p.m, p.k, p.k, p.n, best + 1, plan.count, tile, splits, scheme, best_ms * 1e3, first_ms * 1e3,
             flush_bytes > 0 ? ", weights out of L2" : "");
}

// LtTuning::cold's buffer, twice the L2 size, made once (outside graph captures: decide's caller checked); false
// when it cannot be had (the timing is then warm).
bool LtPlans::flush_buffer() {
  if (flush_) return true;
  int device = 0, l2 = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) != cudaSuccess || l2 <= 0) {
    cudaGetLastError();
    return false;
  }
  const size_t bytes = (size_t)l2 * 2;
  if (cudaMalloc(&flush_, bytes) != cudaSuccess) {
    cudaGetLastError();
    flush_ = nullptr;
    return false;
  }
  flush_bytes_ = bytes;
  return true;
}

}  // namespace rbee::gpu
