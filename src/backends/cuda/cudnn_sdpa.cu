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

#include "backends/cuda/cudnn_descriptors.h"
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
  explicit SdpaPlanImpl(const Api& api) : d_(api) {}
  size_t workspace() const override { return (size_t)workspace_; }
  const char* pattern() const override { return pattern_; }
  void abandon() override { d_.abandon(); }

  // Builds the graph with the given softmax pattern and finalizes the first ranked engine that takes it.
  bool prepare(Handle handle, const DnnAttention& a, bool div_pattern, std::string* why) {
    pattern_ = div_pattern ? "div" : "stats";
    const int io = a.dtype == DType::F16 ? kDataHalf : kDataBfloat16;
    const int f32 = kDataFloat;
    const int64_t b = a.b, h = a.h, tq = a.tq, tk = a.tk, d = a.d, align = a.align;
    const Dims4 scores{b, h, tq, tk}, scores_strides{h * tq * tk, tq * tk, tk, 1};
    const Dims4 rows{b, h, tq, 1}, rows_strides{h * tq, tq, 1, 1};

    auto operand = [&](int64_t uid, const Dims4& dims, const Dims4& strides) {
      return d_.tensor(uid, io, dims, strides, align, /*is_virtual=*/false);
    };
    BackendDesc q = operand(kUidQ, {b, h, tq, d}, {a.q_strides[0], a.q_strides[1], a.q_strides[2], 1});
    BackendDesc kt = operand(kUidK, {b, h, d, tk}, {a.k_strides[0], a.k_strides[1], 1, a.k_strides[2]});
    BackendDesc v = operand(kUidV, {b, h, tk, d}, {a.v_strides[0], a.v_strides[1], a.v_strides[2], 1});
    BackendDesc o = operand(kUidO, {b, h, tq, d}, {a.o_strides[0], a.o_strides[1], a.o_strides[2], 1});
    BackendDesc scale = d_.tensor(kUidScale, f32, {1, 1, 1, 1}, {1, 1, 1, 1}, 16, false, /*by_value=*/true);
    auto scores_f32 = [&](int64_t uid) { return d_.tensor(uid, f32, scores, scores_strides, 16, true); };
    auto rows_f32 = [&](int64_t uid) { return d_.tensor(uid, f32, rows, rows_strides, 16, true); };
    BackendDesc s = scores_f32(kUidS), z = scores_f32(kUidZ), zm = scores_f32(kUidZm), e = scores_f32(kUidE);
    BackendDesc m = rows_f32(kUidM), l = rows_f32(kUidL), log_l = rows_f32(kUidLogL), stats = rows_f32(kUidStats);
    BackendDesc p = d_.tensor(kUidP, io, scores, scores_strides, 16, true);
    BackendDesc zs = div_pattern ? nullptr : scores_f32(kUidZs);
    if (!q || !kt || !v || !o || !scale || !s || !z || !zm || !e || !m || !l || !log_l || !stats || !p ||
        (!div_pattern && !zs))
      return fail(why, "a tensor descriptor");

    std::vector<BackendDesc> ops = {
        matmul(q, kt, s),
        d_.pointwise(kPointwiseMul, s, scale, z),
        reduction(kReduceMax, z, m),
        d_.pointwise(kPointwiseSub, z, m, zm),
        d_.pointwise(kPointwiseExp, zm, nullptr, e),
        reduction(kReduceAdd, e, l),
        d_.pointwise(kPointwiseLog, l, nullptr, log_l),
        d_.pointwise(kPointwiseAdd, m, log_l, stats),
    };
    if (div_pattern) {
      ops.push_back(d_.pointwise(kPointwiseDiv, e, l, p));
    } else {
      ops.push_back(d_.pointwise(kPointwiseSub, z, stats, zs));
      ops.push_back(d_.pointwise(kPointwiseExp, zs, nullptr, p));
    }
    ops.push_back(matmul(p, v, o));
    for (BackendDesc op : ops) {
      if (!op) return fail(why, "a node of the attention graph");
    }
    BackendDesc graph = d_.graph(handle, ops);
    if (!graph) return fail(why, "the operation graph (no engine takes these nodes)");
    std::string step;
    for (const int mode : {kHeurModeA, kHeurModeFallback}) {
      const auto plans = d_.ranked_plans(handle, graph, mode, 1, &step);
      if (!plans.empty()) {
        plan_ = plans[0].plan;
        workspace_ = plans[0].workspace;
        return true;
      }
    }
    return fail(why, step.c_str());
  }

  Status run(Handle handle, float scale, const void* q, const void* k, const void* v, void* out,
             void* workspace) override {
    const int64_t uids[5] = {kUidQ, kUidK, kUidV, kUidO, kUidScale};
    void* const ptrs[5] = {const_cast<void*>(q), const_cast<void*>(k), const_cast<void*>(v), out, &scale};
    return d_.execute(handle, plan_, 5, uids, ptrs, workspace);
  }

 private:
  static bool fail(std::string* why, const char* what) {
    *why = std::string("cuDNN's graph API refused ") + what;
    return false;
  }

  // y [.., 1] = op over the last axis of x, in f32.
  BackendDesc reduction(int reduce_op, BackendDesc x, BackendDesc y) {
    BackendDesc rd = d_.make(kReductionDescriptor);
    const int comp = kDataFloat;
    if (!rd || !d_.set(rd, kAttrReductionOperator, kTypeReductionOperator, 1, &reduce_op) ||
        !d_.set(rd, kAttrReductionCompType, kTypeDataType, 1, &comp) || !d_.finalize(rd))
      return nullptr;
    BackendDesc op = d_.make(kOpReductionDescriptor);
    if (!op || !d_.set(op, kAttrOpReductionDesc, kTypeBackendDescriptor, 1, &rd) ||
        !d_.set(op, kAttrOpReductionX, kTypeBackendDescriptor, 1, &x) ||
        !d_.set(op, kAttrOpReductionY, kTypeBackendDescriptor, 1, &y) || !d_.finalize(op))
      return nullptr;
    return op;
  }

  // c = a . b over the last two axes, batched over the first two, accumulated in f32.
  BackendDesc matmul(BackendDesc a, BackendDesc b, BackendDesc c) {
    BackendDesc mm = d_.make(kMatmulDescriptor);
    const int comp = kDataFloat;
    if (!mm || !d_.set(mm, kAttrMatmulCompType, kTypeDataType, 1, &comp) || !d_.finalize(mm)) return nullptr;
    BackendDesc op = d_.make(kOpMatmulDescriptor);
    if (!op || !d_.set(op, kAttrOpMatmulA, kTypeBackendDescriptor, 1, &a) ||
        !d_.set(op, kAttrOpMatmulB, kTypeBackendDescriptor, 1, &b) ||
        !d_.set(op, kAttrOpMatmulC, kTypeBackendDescriptor, 1, &c) ||
        !d_.set(op, kAttrOpMatmulDesc, kTypeBackendDescriptor, 1, &mm) || !d_.finalize(op))
      return nullptr;
    return op;
  }

  Descriptors d_;
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
