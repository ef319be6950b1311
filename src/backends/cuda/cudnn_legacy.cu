// A convolution through cuDNN's legacy fused call, cudnnConvolutionBiasActivationForward:
//   out = identity(1 * conv(x, w) + alpha2 * z + bias),  z = residual (alpha2 = 1) or out itself (alpha2 = 0),
// 16-bit tensors with f32 convolution arithmetic (cuDNN's "pseudo half" and bf16 configurations: sums, bias and z
// are combined in f32 and rounded once to the output type), tensor-core math. With the identity activation cuDNN
// runs this call only with the IMPLICIT_PRECOMP_GEMM algorithm, so there is nothing to search. No SiLU (the call's
// activations do not include it) and one [cout] bias row for every image: cudnn_dnn.cu's caller makes one call per
// image for a [n, cout] bias.
#include "backends/cuda/cudnn_plan.h"

namespace rbee::gpu::cudnn {

namespace {

class LegacyPlan final : public ConvPlan {
 public:
  LegacyPlan(const Api& api, const void* zero_bias) : api_(api), zero_bias_(zero_bias) {}
  ~LegacyPlan() override {
    if (x_) api_.destroy_tensor(x_);
    if (y_) api_.destroy_tensor(y_);
    if (bias_) api_.destroy_tensor(bias_);
    if (w_) api_.destroy_filter(w_);
    if (conv_) api_.destroy_conv(conv_);
    if (act_) api_.destroy_activation(act_);
  }
  const char* api() const override { return "legacy"; }
  size_t workspace() const override { return workspace_; }
  void abandon() override {
    x_ = y_ = bias_ = nullptr;
    w_ = nullptr;
    conv_ = nullptr;
    act_ = nullptr;
  }

  bool prepare(Handle handle, const DnnConv2d& c) {
    auto ok = [](Status s) { return s == kSuccess; };
    const int type = c.dtype == DType::F16 ? kDataHalf : kDataBfloat16;
    const int format = c.channels_last ? kTensorNhwc : kTensorNchw;  // NHWC: x / out NHWC, the filter KRSC
    return ok(api_.create_tensor(&x_)) && ok(api_.create_tensor(&y_)) && ok(api_.create_tensor(&bias_)) &&
           ok(api_.create_filter(&w_)) && ok(api_.create_conv(&conv_)) && ok(api_.create_activation(&act_)) &&
           ok(api_.set_tensor_4d(x_, format, type, c.n, c.cin, c.h, c.w)) &&
           ok(api_.set_tensor_4d(y_, format, type, c.n, c.cout, c.ho, c.wo)) &&
           ok(api_.set_tensor_4d(bias_, kTensorNchw, type, 1, c.cout, 1, 1)) &&
           ok(api_.set_filter_4d(w_, type, format, c.cout, c.cin, c.kh, c.kw)) &&
           ok(api_.set_conv_2d(conv_, c.pad_h, c.pad_w, c.stride_h, c.stride_w, c.dilation_h, c.dilation_w,
                               kCrossCorrelation, kDataFloat)) &&
           ok(api_.set_conv_math(conv_, kTensorOpMath)) &&
           ok(api_.set_activation(act_, kActivationIdentity, kNotPropagateNan, 0.0)) &&
           ok(api_.fwd_workspace_size(handle, x_, w_, conv_, y_, kFwdAlgoImplicitPrecompGemm, &workspace_));
  }

  Status run(Handle handle, const void* x, const void* w, const void* bias, const void* residual, void* out,
             void* workspace, size_t workspace_bytes) override {
    const float one = 1.0f, zero = 0.0f;
    return api_.conv_bias_act_fwd(handle, &one, x_, x, w_, w, conv_, kFwdAlgoImplicitPrecompGemm, workspace,
                                  workspace_bytes, residual ? &one : &zero, y_, residual ? residual : out, bias_,
                                  bias ? bias : zero_bias_, act_, y_, out);
  }

 private:
  const Api& api_;
  const void* zero_bias_;
  TensorDesc x_ = nullptr, y_ = nullptr, bias_ = nullptr;
  FilterDesc w_ = nullptr;
  ConvDesc conv_ = nullptr;
  ActivationDesc act_ = nullptr;
  size_t workspace_ = 0;
};

}  // namespace

std::unique_ptr<ConvPlan> make_legacy_plan(const Api& api, Handle handle, const DnnConv2d& c, const void* zero_bias,
                                           std::string* why) {
  if (c.silu || (c.bias_per_image && c.n > 1)) {
    *why = "the legacy call has no SiLU and one bias row";
    return nullptr;
  }
  auto plan = std::make_unique<LegacyPlan>(api, zero_bias);
  if (!plan->prepare(handle, c)) {
    *why = "descriptors or workspace size refused";
    return nullptr;
  }
  return plan;
}

}  // namespace rbee::gpu::cudnn
