// A convolution through cuDNN's backend API: one operation graph
//   conv fprop (x, w) -> t0 [f32, virtual]
//   t1 = t0 + bias           (pointwise add; bias [1 or n, cout, 1, 1] broadcast over the positions; with n rows no
//                             engine of cuDNN 9.14 finalized on an H200, so conv_dnn.cu then calls once per image)
//   t2 = t1 + residual       (pointwise add)
//   out = swish(t2)          (SiLU: x / (1 + exp(-x)))
// where absent terms drop their node and the last node writes out (16-bit); the intermediates are f32 and never
// stored, so the result is rounded once. cuDNN's heuristics (mode A) rank the engines that take the graph (fused
// engines apply the epilogue to the accumulators before the store); the first ranked configuration
// that finalizes is kept, or (candidates > 1, RBEE_CONV_CUDNN_TUNE=1) the fastest of the first few on the shape's
// first call (tune()).
#include <algorithm>
#include <array>
#include <vector>

#include "backends/cuda/cudnn_descriptors.h"
#include "backends/cuda/cudnn_plan.h"

namespace rbee::gpu::cudnn {

namespace {

// Unique ids of the graph's tensors (the variant pack binds pointers by them).
enum : int64_t { kUidX = 1, kUidW, kUidOut, kUidBias, kUidResidual, kUidConv = 10, kUidBiased, kUidSummed };

class GraphPlan final : public ConvPlan {
 public:
  explicit GraphPlan(const Api& api) : d_(api) {}
  const char* api() const override { return "graph"; }
  size_t workspace() const override { return (size_t)workspace_; }
  void abandon() override { d_.abandon(); }

  bool needs_tuning() const override { return candidates_.size() > 1; }

  int tune(Handle handle, cudaStream_t stream, const void* x, const void* w, const void* bias, const void* residual,
           void* out, void* workspace, size_t workspace_bytes) override {
    cudaEvent_t start = nullptr, stop = nullptr;
    int best = 0;
    if (cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess) {
      float best_ms = 0;
      for (size_t i = 0; i < candidates_.size(); ++i) {
        plan_ = candidates_[i];
        if (run(handle, x, w, bias, residual, out, workspace, workspace_bytes) != kSuccess) continue;  // warm-up
        bool ok = cudaEventRecord(start, stream) == cudaSuccess;
        for (int r = 0; r < 3 && ok; ++r) ok = run(handle, x, w, bias, residual, out, workspace, workspace_bytes) == kSuccess;
        float ms = 0;
        ok = ok && cudaEventRecord(stop, stream) == cudaSuccess && cudaEventSynchronize(stop) == cudaSuccess &&
             cudaEventElapsedTime(&ms, start, stop) == cudaSuccess;
        if (ok && (i == 0 || ms < best_ms)) {
          best_ms = ms;
          best = (int)i;
        }
      }
    }
    cudaGetLastError();
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    plan_ = candidates_[(size_t)best];
    const int rank = ranks_[(size_t)best];
    candidates_.clear();  // tuned: the others stay owned (destroyed with this plan) but unused
    return rank;
  }

  bool prepare(Handle handle, const DnnConv2d& c, int max_candidates, std::string* why) {
    const int io_type = c.dtype == DType::F16 ? kDataHalf : kDataBfloat16;
    const int f32 = kDataFloat;
    const int64_t n = c.n, k = c.cout, align = c.align;
    // Strides of a contiguous tensor of logical dims [d0, channels, rows, cols]: NCHW, or NHWC (channels last:
    // memory [d0, rows, cols, channels]; cuDNN's dims stay in NCHW order whatever the layout).
    auto strides = [&](int64_t ch, int64_t rows, int64_t cols) -> std::array<int64_t, 4> {
      if (c.channels_last) return {ch * rows * cols, 1, cols * ch, ch};
      return {ch * rows * cols, rows * cols, cols, 1};
    };
    BackendDesc x = d_.tensor(kUidX, io_type, {n, c.cin, c.h, c.w}, strides(c.cin, c.h, c.w), align, false);
    BackendDesc w = d_.tensor(kUidW, io_type, {k, c.cin, c.kh, c.kw}, strides(c.cin, c.kh, c.kw), align, false);
    const std::array<int64_t, 4> out_dims{n, k, c.ho, c.wo}, out_strides = strides(k, c.ho, c.wo);
    const bool epilogue = c.bias || c.residual || c.silu;
    BackendDesc out = d_.tensor(kUidOut, io_type, out_dims, out_strides, align, false);
    BackendDesc conv_out = epilogue ? d_.tensor(kUidConv, f32, out_dims, out_strides, align, true) : out;
    if (!x || !w || !out || !conv_out) return fail(why, "a tensor descriptor");

    BackendDesc conv = d_.make(kConvolutionDescriptor);
    const int mode = kCrossCorrelation;
    const int64_t dims = 2, dil[2] = {c.dilation_h, c.dilation_w}, str[2] = {c.stride_h, c.stride_w},
                  pad[2] = {c.pad_h, c.pad_w};
    if (!conv || !d_.set(conv, kAttrConvCompType, kTypeDataType, 1, &f32) ||
        !d_.set(conv, kAttrConvMode, kTypeConvolutionMode, 1, &mode) ||
        !d_.set(conv, kAttrConvSpatialDims, kTypeInt64, 1, &dims) ||
        !d_.set(conv, kAttrConvDilations, kTypeInt64, 2, dil) ||
        !d_.set(conv, kAttrConvFilterStrides, kTypeInt64, 2, str) ||
        !d_.set(conv, kAttrConvPrePaddings, kTypeInt64, 2, pad) ||
        !d_.set(conv, kAttrConvPostPaddings, kTypeInt64, 2, pad) || !d_.finalize(conv))
      return fail(why, "the convolution descriptor");

    std::vector<BackendDesc> ops;
    BackendDesc fprop = d_.make(kOpConvForwardDescriptor);
    const float alpha = 1.0f, beta = 0.0f;
    if (!fprop || !d_.set(fprop, kAttrConvFwdX, kTypeBackendDescriptor, 1, &x) ||
        !d_.set(fprop, kAttrConvFwdW, kTypeBackendDescriptor, 1, &w) ||
        !d_.set(fprop, kAttrConvFwdY, kTypeBackendDescriptor, 1, &conv_out) ||
        !d_.set(fprop, kAttrConvFwdConvDesc, kTypeBackendDescriptor, 1, &conv) ||
        !d_.set(fprop, kAttrConvFwdAlpha, kTypeFloat, 1, &alpha) ||
        !d_.set(fprop, kAttrConvFwdBeta, kTypeFloat, 1, &beta) || !d_.finalize(fprop))
      return fail(why, "the convolution node");
    ops.push_back(fprop);

    // The epilogue chain: each node reads the previous result and writes a new f32 virtual tensor, or out.
    BackendDesc prev = conv_out;
    int remaining = (c.bias ? 1 : 0) + (c.residual ? 1 : 0) + (c.silu ? 1 : 0);
    auto next_out = [&](int64_t uid) {
      return --remaining == 0 ? out : d_.tensor(uid, f32, out_dims, out_strides, align, true);
    };
    if (c.bias) {
      const int64_t rows = c.bias_per_image ? n : 1;
      BackendDesc bias = d_.tensor(kUidBias, io_type, {rows, k, 1, 1}, {k, 1, k, k}, align, false);
      BackendDesc dst = next_out(kUidBiased);
      BackendDesc op = bias && dst ? d_.pointwise(kPointwiseAdd, prev, bias, dst) : nullptr;
      if (!op) return fail(why, "the bias node");
      ops.push_back(op);
      prev = dst;
    }
    if (c.residual) {
      BackendDesc residual = d_.tensor(kUidResidual, io_type, out_dims, out_strides, align, false);
      BackendDesc dst = next_out(kUidSummed);
      BackendDesc op = residual && dst ? d_.pointwise(kPointwiseAdd, prev, residual, dst) : nullptr;
      if (!op) return fail(why, "the residual node");
      ops.push_back(op);
      prev = dst;
    }
    if (c.silu) {
      BackendDesc op = d_.pointwise(kPointwiseSwishFwd, prev, nullptr, out);
      if (!op) return fail(why, "the SiLU node");
      ops.push_back(op);
    }

    BackendDesc graph = d_.graph(handle, ops);
    if (!graph) return fail(why, "the operation graph (no engine takes these nodes)");
    std::string step;
    for (const Descriptors::RankedPlan& p : d_.ranked_plans(handle, graph, kHeurModeA, max_candidates, &step)) {
      candidates_.push_back(p.plan);
      ranks_.push_back(p.rank);
      workspace_ = std::max(workspace_, p.workspace);  // enough for every candidate
    }
    if (candidates_.empty()) return fail(why, step.c_str());
    plan_ = candidates_[0];
    if (candidates_.size() == 1) candidates_.clear();
    has_bias_ = c.bias;
    has_residual_ = c.residual;
    return true;
  }

  Status run(Handle handle, const void* x, const void* w, const void* bias, const void* residual, void* out,
             void* workspace, size_t /*workspace_bytes*/) override {
    int64_t uids[5] = {kUidX, kUidW, kUidOut};
    void* ptrs[5] = {const_cast<void*>(x), const_cast<void*>(w), out};
    int count = 3;
    if (has_bias_) {
      uids[count] = kUidBias;
      ptrs[count++] = const_cast<void*>(bias);
    }
    if (has_residual_) {
      uids[count] = kUidResidual;
      ptrs[count++] = const_cast<void*>(residual);
    }
    return d_.execute(handle, plan_, count, uids, ptrs, workspace);
  }

 private:
  static bool fail(std::string* why, const char* what) {
    *why = std::string("cuDNN's graph API refused ") + what;
    return false;
  }

  Descriptors d_;
  BackendDesc plan_ = nullptr;                // the plan run() executes
  std::vector<BackendDesc> candidates_;       // finalized plans tune() chooses among (empty once chosen)
  std::vector<int> ranks_;                    // their heuristic ranks
  int64_t workspace_ = 0;
  bool has_bias_ = false, has_residual_ = false;
};

}  // namespace

std::unique_ptr<ConvPlan> make_graph_plan(const Api& api, Handle handle, const DnnConv2d& c, int candidates,
                                          std::string* why) {
  auto plan = std::make_unique<GraphPlan>(api);
  if (!plan->prepare(handle, c, candidates, why)) return nullptr;
  return plan;
}

}  // namespace rbee::gpu::cudnn
