// The descriptors of one cuDNN backend-API plan (cudnn_graph.cu: fused convolutions; cudnn_sdpa.cu: fused attention),
// owned together and destroyed in reverse creation order, with the few builders both graphs use: tensors, pointwise
// nodes, the operation graph, and the heuristics' ranked engine configurations finalized into execution plans.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/cudnn_api.h"

namespace rbee::gpu::cudnn {

class Descriptors {
 public:
  explicit Descriptors(const Api& api) : api_(api) {}
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    // Dependents first: plans, engine configurations, heuristics, the graph, its nodes, its tensors.
    for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) api_.backend_destroy(*it);
  }
  // Forgets every descriptor without destroying it (the process's end: cudnn_dnn.cu says why).
  void abandon() { owned_.clear(); }
  const Api& api() const { return api_; }

  // A new descriptor of `type`, owned here; nullptr when cuDNN refuses.
  BackendDesc make(int type) {
    BackendDesc d = nullptr;
    if (api_.backend_create(type, &d) != kSuccess) return nullptr;
    owned_.push_back(d);
    return d;
  }
  bool set(BackendDesc d, int name, int type, int64_t count, const void* elements) {
    return api_.backend_set(d, name, type, count, elements) == kSuccess;
  }
  bool finalize(BackendDesc d) { return api_.backend_finalize(d) == kSuccess; }

  // A finalized 4-D tensor: data type, dims and strides in elements, unique id, byte alignment; virtual tensors are
  // never stored, by-value ones are host scalars bound per call in the variant pack.
  BackendDesc tensor(int64_t uid, int type, const std::array<int64_t, 4>& dims, const std::array<int64_t, 4>& strides,
                     int64_t align, bool is_virtual, bool by_value = false) {
    BackendDesc t = make(kTensorDescriptor);
    if (!t || !set(t, kAttrTensorDataType, kTypeDataType, 1, &type) ||
        !set(t, kAttrTensorDimensions, kTypeInt64, 4, dims.data()) ||
        !set(t, kAttrTensorStrides, kTypeInt64, 4, strides.data()) ||
        !set(t, kAttrTensorUniqueId, kTypeInt64, 1, &uid) || !set(t, kAttrTensorByteAlignment, kTypeInt64, 1, &align) ||
        !set(t, kAttrTensorIsVirtual, kTypeBoolean, 1, &is_virtual) ||
        (by_value && !set(t, kAttrTensorIsByValue, kTypeBoolean, 1, &by_value)) || !finalize(t))
      return nullptr;
    return t;
  }

  // A pointwise node y = mode(x, b) computed in f32 (b null: unary).
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

  // The finalized operation graph of `ops` on `handle`, or nullptr when no engine takes these nodes.
  BackendDesc graph(Handle handle, const std::vector<BackendDesc>& ops) {
    BackendDesc g = make(kOpGraphDescriptor);
    if (!g || !set(g, kAttrOpGraphHandle, kTypeHandle, 1, &handle) ||
        !set(g, kAttrOpGraphOps, kTypeBackendDescriptor, (int64_t)ops.size(), ops.data()) || !finalize(g))
      return nullptr;
    return g;
  }

  struct RankedPlan {
    BackendDesc plan;   // a finalized execution plan, owned here
    int rank;           // its engine configuration's place in the heuristics' ranking
    int64_t workspace;  // bytes it needs
  };
  // Execution plans of the best ranked (at most 8) engine configurations of heuristics `mode` for `graph`, in rank
  // order, up to `max_plans` that finalize (configurations that do not are skipped). Empty, with *why naming the
  // step cuDNN refused, when none does.
  std::vector<RankedPlan> ranked_plans(Handle handle, BackendDesc graph, int mode, int max_plans, std::string* why) {
    std::vector<RankedPlan> plans;
    BackendDesc heur = make(kEngineHeurDescriptor);
    int64_t count = 0;
    if (!heur || !set(heur, kAttrEngineHeurOpGraph, kTypeBackendDescriptor, 1, &graph) ||
        !set(heur, kAttrEngineHeurMode, kTypeHeurMode, 1, &mode) || !finalize(heur) ||
        api_.backend_get(heur, kAttrEngineHeurResults, kTypeBackendDescriptor, 0, &count, nullptr) != kSuccess) {
      *why = "the engine heuristics";
      return plans;
    }
    if (count <= 0) {
      *why = "the heuristics (no engine for this graph)";
      return plans;
    }
    count = std::min<int64_t>(count, 8);
    std::vector<BackendDesc> configs;
    for (int64_t i = 0; i < count; ++i) {
      BackendDesc cfg = make(kEngineCfgDescriptor);
      if (!cfg) {
        *why = "an engine configuration";
        return plans;
      }
      configs.push_back(cfg);
    }
    int64_t got = 0;
    if (api_.backend_get(heur, kAttrEngineHeurResults, kTypeBackendDescriptor, count, &got, configs.data()) !=
        kSuccess) {
      *why = "the heuristics' results";
      return plans;
    }
    for (int64_t i = 0; i < got && (int)plans.size() < max_plans; ++i) {
      BackendDesc plan = nullptr;
      int64_t returned = 0, bytes = 0;
      if (api_.backend_create(kExecutionPlanDescriptor, &plan) != kSuccess) {
        *why = "an execution plan";
        return plans;
      }
      if (set(plan, kAttrPlanHandle, kTypeHandle, 1, &handle) &&
          set(plan, kAttrPlanEngineConfig, kTypeBackendDescriptor, 1, &configs[(size_t)i]) && finalize(plan) &&
          api_.backend_get(plan, kAttrPlanWorkspaceSize, kTypeInt64, 1, &returned, &bytes) == kSuccess) {
        owned_.push_back(plan);
        plans.push_back({plan, (int)i, bytes});
        continue;
      }
      api_.backend_destroy(plan);  // this engine does not take the graph after all: the next one
    }
    if (plans.empty()) *why = "the execution plans (none of the ranked engines finalized)";
    return plans;
  }

  // Runs `plan` on the handle's stream with the variant pack (uids[i] bound to ptrs[i]; by-value tensors point to
  // host scalars) and `workspace`. cuDNN's status.
  Status execute(Handle handle, BackendDesc plan, int64_t count, const int64_t* uids, void* const* ptrs,
                 void* workspace) const {
    BackendDesc pack = nullptr;
    Status s = api_.backend_create(kVariantPackDescriptor, &pack);
    if (s != kSuccess) return s;
    s = api_.backend_set(pack, kAttrVariantPackUniqueIds, kTypeInt64, count, uids);
    if (s == kSuccess) s = api_.backend_set(pack, kAttrVariantPackDataPointers, kTypeVoidPtr, count, ptrs);
    if (s == kSuccess) s = api_.backend_set(pack, kAttrVariantPackWorkspace, kTypeVoidPtr, 1, &workspace);
    if (s == kSuccess) s = api_.backend_finalize(pack);
    if (s == kSuccess) s = api_.backend_execute(handle, plan, pack);
    api_.backend_destroy(pack);
    return s;
  }

 private:
  const Api& api_;
  std::vector<BackendDesc> owned_;  // in creation order
};

}  // namespace rbee::gpu::cudnn
