// Unmasked attention (gpu/dnn.h DnnAttention) through cuDNN's backend API: the operation graph that cuDNN's fused
// flash-attention engines recognise for inference, with Q, K, V and O read and written through their own strides
// (so [b, t, h * d] projections need no transpose):
//
//   S  [b, h, tq, tk] f32 (virtual) = matmul(Q [b, h, tq, d], Kt [b, h, d, tk])   Kt: K's strides with the last two
//                                                                                   axes swapped, no copy
//   Z  = S * scale                       pointwise, scale a by-value f32 scalar given per call
//   M  [b, h, tq, 1] = max over keys (Z) reduction
//   E  = exp(Z - M)                      pointwise sub, exp
//   L  [b, h, tq, 1] = sum over keys (E) reduction
//   stats = M + log(L)                   pointwise log, add (virtual: the engines expect it in the pattern)
//   P  [b, h, tq, tk] in Q's dtype (virtual) = E / L          (pattern "div"), or exp(Z - stats) (pattern "stats")
//   O  [b, h, tq, d] = matmul(P, V [b, h, tk, d])
//
// Every intermediate is virtual (never stored): the engine runs it as one flash kernel. The "div" pattern is what
// recent cudnn-frontend releases emit for a softmax without outputs, "stats" what older ones emitted; both are
// tried, in that order. cuDNN's heuristics (mode A, then the fallback list) rank the engines; the first ranked
// configuration that finalizes is kept.
#include <array>
#include <vector>

#include "backends/cuda/cudnn_sdpa.h"

namespace rbee::gpu::cudnn {

namespace {

// Unique ids of the graph's tensors (the variant pack binds the first five by id).
enum : int64_t {
  kUidQ = 1, kUidK, kUidV, kUidO, kUidScale,
  kUidS = 10, kUidZ, kUidM, kUidZm, kUidE, kUidL, kUidLogL, kUidStats, kUidZs, kUidP
};

using Dims4 = std::array<int64_t, 4>;

class SdpaPlanImpl final : public SdpaPlan {
 public:
  explicit SdpaPlanImpl(const Api& api) : api_(api) {}
  ~SdpaPlanImpl() override {
    for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) api_.backend_destroy(*it);
  }
  size_t workspace() const override { return (size_t)workspace_; }
  const char* pattern() const override { return pattern_; }
  void abandon() override { owned_.clear(); }

  // Builds the graph with the given softmax pattern and finalizes the first ranked engine that takes it.
  bool prepare(Handle handle, const DnnAttention& a, bool div_pattern, std::string* why) {
    pattern_ = div_pattern ? "div" : "stats";
    const int io = a.dtype == DType::F16 ? kDataHalf : kDataBfloat16;
    const int f32 = kDataFloat;
    const int64_t b = a.b, h = a.h, tq = a.tq, tk = a.tk, d = a.d, align = a.align;
    const Dims4 scores{b, h, tq, tk}, scores_strides{h * tq * tk, tq * tk, tk, 1};
    const Dims4 rows{b, h, tq, 1}, rows_strides{h * tq, tq, 1, 1};

    BackendDesc q = tensor(kUidQ, io, {b, h, tq, d}, {a.q_strides[0], a.q_strides[1], a.q_strides[2], 1}, align);
    BackendDesc kt = tensor(kUidK, io, {b, h, d, tk}, {a.k_strides[0], a.k_strides[1], 1, a.k_strides[2]}, align);
    BackendDesc v = tensor(kUidV, io, {b, h, tk, d}, {a.v_strides[0], a.v_strides[1], a.v_strides[2], 1}, align);
    BackendDesc o = tensor(kUidO, io, {b, h, tq, d}, {a.o_strides[0], a.o_strides[1], a.o_strides[2], 1}, align);
    BackendDesc scale = tensor(kUidScale, f32, {1, 1, 1, 1}, {1, 1, 1, 1}, 16, /*is_virtual=*/false, /*by_value=*/true);
    auto scores_f32 = [&](int64_t uid) { return tensor(uid, f32, scores, scores_strides, 16, true); };
    auto rows_f32 = [&](int64_t uid) { return tensor(uid, f32, rows, rows_strides, 16, true); };
    BackendDesc s = scores_f32(kUidS), z = scores_f32(kUidZ), zm = scores_f32(kUidZm), e = scores_f32(kUidE);
    BackendDesc m = rows_f32(kUidM), l = rows_f32(kUidL), log_l = rows_f32(kUidLogL), stats = rows_f32(kUidStats);
    BackendDesc p = tensor(kUidP, io, scores, scores_strides, 16, true);
    BackendDesc zs = div_pattern ? nullptr : scores_f32(kUidZs);
    if (!q || !kt || !v || !o || !scale || !s || !z || !zm || !e || !m || !l || !log_l || !stats || !p ||
        (!div_pattern && !zs))
      return fail(why, "a tensor descriptor");

    std::vector<BackendDesc> ops = {
        matmul(q, kt, s),
        pointwise(kPointwiseMul, s, scale, z),
        reduction(kReduceMax, z, m),
        pointwise(kPointwiseSub, z, m, zm),
        pointwise(kPointwiseExp, zm, nullptr, e),
        reduction(kReduceAdd, e, l),
        pointwise(kPointwiseLog, l, nullptr, log_l),
        pointwise(kPointwiseAdd, m, log_l, stats),
    };
    if (div_pattern) {
      ops.push_back(pointwise(kPointwiseDiv, e, l, p));
    } else {
      ops.push_back(pointwise(kPointwiseSub, z, stats, zs));
      ops.push_back(pointwise(kPointwiseExp, zs, nullptr, p));
    }
    ops.push_back(matmul(p, v, o));
    for (BackendDesc op : ops) {
      if (!op) return fail(why, "a node of the attention graph");
    }

    BackendDesc graph = make(kOpGraphDescriptor);
    if (!graph || !set(graph, kAttrOpGraphHandle, kTypeHandle, 1, &handle) ||
        !set(graph, kAttrOpGraphOps, kTypeBackendDescriptor, (int64_t)ops.size(), ops.data()) || !finalize(graph))
      return fail(why, "the operation graph (no engine takes these nodes)");
    for (const int mode : {kHeurModeA, kHeurModeFallback}) {
      if (first_plan(handle, graph, mode)) return true;
    }
    return fail(why, "the execution plans (no ranked engine finalized for this shape)");
  }

  Status run(Handle handle, float scale, const void* q, const void* k, const void* v, void* out,
             void* workspace) override {
    int64_t uids[5] = {kUidQ, kUidK, kUidV, kUidO, kUidScale};
    void* ptrs[5] = {const_cast<void*>(q), const_cast<void*>(k), const_cast<void*>(v), out, &scale};
    BackendDesc pack = nullptr;
    Status st = api_.backend_create(kVariantPackDescriptor, &pack);
    if (st != kSuccess) return st;
    st = api_.backend_set(pack, kAttrVariantPackUniqueIds, kTypeInt64, 5, uids);
    if (st == kSuccess) st = api_.backend_set(pack, kAttrVariantPackDataPointers, kTypeVoidPtr, 5, ptrs);
    if (st == kSuccess) st = api_.backend_set(pack, kAttrVariantPackWorkspace, kTypeVoidPtr, 1, &workspace);
    if (st == kSuccess) st = api_.backend_finalize(pack);
    if (st == kSuccess) st = api_.backend_execute(handle, plan_, pack);
    api_.backend_destroy(pack);
    return st;
  }

 private:
  // The first engine configuration of heuristics `mode` (up to 8 ranked) that finalizes into a plan.
  bool first_plan(Handle handle, BackendDesc graph, int mode) {
    BackendDesc heur = make(kEngineHeurDescriptor);
    int64_t count = 0;
    if (!heur || !set(heur, kAttrEngineHeurOpGraph, kTypeBackendDescriptor, 1, &graph) ||
        !set(heur, kAttrEngineHeurMode, kTypeHeurMode, 1, &mode) || !finalize(heur) ||
        api_.backend_get(heur, kAttrEngineHeurResults, kTypeBackendDescriptor, 0, &count, nullptr) != kSuccess ||
        count <= 0)
      return false;
    count = count < 8 ? count : 8;
    std::vector<BackendDesc> configs;
    for (int64_t i = 0; i < count; ++i) {
      BackendDesc cfg = make(kEngineCfgDescriptor);
      if (!cfg) return false;
      configs.push_back(cfg);
    }
    int64_t got = 0;
    if (api_.backend_get(heur, kAttrEngineHeurResults, kTypeBackendDescriptor, count, &got, configs.data()) !=
        kSuccess)
      return false;
    for (int64_t i = 0; i < got; ++i) {
      BackendDesc plan = nullptr;
      int64_t returned = 0, bytes = 0;
      if (api_.backend_create(kExecutionPlanDescriptor, &plan) != kSuccess) return false;
      if (set(plan, kAttrPlanHandle, kTypeHandle, 1, &handle) &&
          set(plan, kAttrPlanEngineConfig, kTypeBackendDescriptor, 1, &configs[(size_t)i]) &&
          api_.backend_finalize(plan) == kSuccess &&
          api_.backend_get(plan, kAttrPlanWorkspaceSize, kTypeInt64, 1, &returned, &bytes) == kSuccess) {
        owned_.push_back(plan);
        plan_ = plan;
        workspace_ = bytes;
        return true;
      }
      api_.backend_destroy(plan);
    }
    return false;
  }

  BackendDesc make(int type) {
    BackendDesc desc = nullptr;
    if (api_.backend_create(type, &desc) != kSuccess) return nullptr;
    owned_.push_back(desc);
    return desc;
  }
  bool set(BackendDesc desc, int name, int type, int64_t count, const void* elements) {
    return api_.backend_set(desc, name, type, count, elements) == kSuccess;
  }
  bool finalize(BackendDesc desc) { return api_.backend_finalize(desc) == kSuccess; }
  static bool fail(std::string* why, const char* what) {
    *why = std::string("cuDNN's graph API refused ") + what;
    return false;
  }

  BackendDesc tensor(int64_t uid, int type, const Dims4& dims, const Dims4& strides, int64_t align,
                     bool is_virtual = false, bool by_value = false) {
    BackendDesc t = make(kTensorDescriptor);
    if (!t || !set(t, kAttrTensorDataType, kTypeDataType, 1, &type) ||
        !set(t, kAttrTensorDimensions, kTypeInt64, 4, dims.data()) ||
        !set(t, kAttrTensorStrides, kTypeInt64, 4, strides.data()) ||
        !set(t, kAttrTensorUniqueId, kTypeInt64, 1, &uid) ||
        !set(t, kAttrTensorByteAlignment, kTypeInt64, 1, &align) ||
        !set(t, kAttrTensorIsVirtual, kTypeBoolean, 1, &is_virtual) ||
        (by_value && !set(t, kAttrTensorIsByValue, kTypeBoolean, 1, &by_value)) || !finalize(t))
      return nullptr;
    return t;
  }

  // y = mode(x, b) in f32 (b null: unary).
  BackendDesc pointwise(int mode, BackendDesc x, BackendDesc b, BackendDesc y) {
    BackendDesc pw = make(kPointwiseDescriptor);
    const int prec = kDataFloat;
    if (!pw || !set(pw, kAttrPointwiseMode, kTypePointwiseMode, 1, &mode) ||
        !set(pw, kAttrPointwiseMathPrec, kTypeDataType, 1, &prec) || !finalize(pw))
      return nullptr;
    BackendDesc op = make(kOpPointwiseDescriptor);
    if (!op || !set(op, kAttrOpPointwisePwDesc, kTypeBackendDescriptor, 1, &pw) ||
        !set(op, kAttrOpPointwiseX, kTypeBackendDescriptor, 1, &x) ||
        (b && !set(op, kAttrOpPointwiseB, kTypeBackendDescriptor, 1, &b)) ||
        !set(op, kAttrOpPointwiseY, kTypeBackendDescriptor, 1, &y) || !finalize(op))
      return nullptr;
    return op;
  }

  // y [.., 1] = op over the last axis of x, in f32.
  BackendDesc reduction(int reduce_op, BackendDesc x, BackendDesc y) {
    BackendDesc rd = make(kReductionDescriptor);
    const int comp = kDataFloat;
    if (!rd || !set(rd, kAttrReductionOperator, kTypeReductionOperator, 1, &reduce_op) ||
        !set(rd, kAttrReductionCompType, kTypeDataType, 1, &comp) || !finalize(rd))
      return nullptr;
    BackendDesc op = make(kOpReductionDescriptor);
    if (!op || !set(op, kAttrOpReductionDesc, kTypeBackendDescriptor, 1, &rd) ||
        !set(op, kAttrOpReductionX, kTypeBackendDescriptor, 1, &x) ||
        !set(op, kAttrOpReductionY, kTypeBackendDescriptor, 1, &y) || !finalize(op))
      return nullptr;
    return op;
  }

  // c = a . b over the last two axes, batched over the first two, accumulated in f32.
  BackendDesc matmul(BackendDesc a, BackendDesc b, BackendDesc c) {
    BackendDesc mm = make(kMatmulDescriptor);
    const int comp = kDataFloat;
    if (!mm || !set(mm, kAttrMatmulCompType, kTypeDataType, 1, &comp) || !finalize(mm)) return nullptr;
    BackendDesc op = make(kOpMatmulDescriptor);
    if (!op || !set(op, kAttrOpMatmulA, kTypeBackendDescriptor, 1, &a) ||
        !set(op, kAttrOpMatmulB, kTypeBackendDescriptor, 1, &b) ||
        !set(op, kAttrOpMatmulC, kTypeBackendDescriptor, 1, &c) ||
        !set(op, kAttrOpMatmulDesc, kTypeBackendDescriptor, 1, &mm) || !finalize(op))
      return nullptr;
    return op;
  }

  const Api& api_;
  std::vector<BackendDesc> owned_;  // in creation order
  BackendDesc plan_ = nullptr;
  int64_t workspace_ = 0;
  const char* pattern_ = "";
};

}  // namespace

std::unique_ptr<SdpaPlan> make_sdpa_plan(const Api& api, Handle handle, const DnnAttention& a, std::string* why) {
  std::string why_div, why_stats;
  for (const bool div : {true, false}) {
    auto plan = std::make_unique<SdpaPlanImpl>(api);
    if (plan->prepare(handle, a, div, div ? &why_div : &why_stats)) return plan;
  }
  *why = "softmax as E / L: " + why_div + "; as exp(Z - stats): " + why_stats;
  return nullptr;
}

}  // namespace rbee::gpu::cudnn
