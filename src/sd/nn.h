// Layers shared by the SD models, composed from rbee::ops (so they run on whichever device holds the tensors).
// Activation dtype (act_dtype): F32 on the CPU, whatever the weights' dtype; on GPUs the weights' dtype (F16 or
// BF16 with --f16: activations, convolution weights, biases and norm parameters in 16 bits, every kernel summing
// in f32). Layers take inputs of either dtype: an F32 input to a 16-bit linear goes through qmatmul, parameters
// of another dtype than the input are cast on the fly (the text encoder keeps F32 activations on every device).
#pragma once

#include <span>
#include <string>

#include "rbee/core/tensor.h"
#include "rbee/sd/weights.h"

namespace rbee::sd::nn {

// The dtype of activations (and of conv weights, biases, norm parameters) for models loaded from `wt`.
DType act_dtype(const Weights& wt);

struct Linear {
  Tensor w, b;  // w [out, in] (weights dtype), b [out] (act_dtype) or undefined
  int64_t in = 0, out = 0;
  static Linear load(const Weights& wt, const std::string& name, int64_t in, int64_t out, bool bias = true);
  // One projection whose outputs are those of `parts` side by side (weights concatenated along out; all with the
  // same `in`, bias all or none): x -> [q | k | v] in one GEMM. Undefined (w undefined) when the weights are not
  // F32 / F16 / BF16 or the parts differ in dtype or bias.
  static Linear fuse(std::initializer_list<const Linear*> parts);
  static Linear fuse(std::span<const Linear* const> parts);
  // x [..., in] -> [..., out] (+ residual [..., out] when defined). 16-bit x and w (GPUs): one fused linear op, bias
  // and residual added to the f32 sums before the single rounding; otherwise qmatmul (F32 activations) and adds.
  Tensor operator()(const Tensor& x, const Tensor& residual = {}) const;
};

// Whether the SD UNet on `device` runs its activations channels last (NHWC): RBEE_SD_CHANNELS_LAST=1 / =0 forces
// it on / off; unset, on for devices that report a vendor convolution library (DeviceInfo extra "convolution
// library": cuDNN, whose tensor-core kernels read NHWC natively; 1x1 convolutions become linear layers) and off
// elsewhere: the CPU's convolutions are written for NCHW, and without the library (ROCm, the emulator) a k x k NHWC
// convolution runs between permuted copies.
bool channels_last_for(const Device& device);

struct Conv2d {
  Tensor w, b;  // w [out, in, k, k] (channels first) or [out, k, k, in] (channels_last), b [out], both act_dtype
  int64_t in = 0, out = 0;
  int k = 1, stride = 1, pad = 0;
  bool channels_last = false;
  static Conv2d load(const Weights& wt, const std::string& name, int64_t in, int64_t out, int k, int stride = 1,
                     int pad = -1);
  // Permutes w to [out, k, k, in] once; from then on x, residual and the result are NHWC.
  void to_channels_last();
  // x [N, in, H, W] -> [N, out, Ho, Wo] (channels_last: [N, H, W, in] -> [N, Ho, Wo, out]) in w's dtype (x is cast
  // to it first when it differs): one conv2d_fused(_nhwc) with the bias, plus `residual` (the output's shape) when
  // defined, plus `shift` [N, out] (a per-image addition such as a time embedding) when defined, all summed before
  // the one rounding.
  Tensor operator()(const Tensor& x, const Tensor& residual = Tensor(), const Tensor& shift = Tensor()) const;
};

struct Norm {  // LayerNorm over the last axis, or GroupNorm over NCHW channels (NHWC when channels_last)
  Tensor w, b;  // [channels], act_dtype
  int groups = 0;  // 0: layer norm
  float eps = 1e-5f;
  bool channels_last = false;  // group norm of [N, H, W, C] maps
  static Norm layer(const Weights& wt, const std::string& name, int64_t dim, float eps);
  static Norm group(const Weights& wt, const std::string& name, int64_t channels, int groups, float eps);
  Tensor operator()(const Tensor& x) const;
  // silu(norm(x)); one group_norm_silu pass for group norms. shift [N, channels] (group norms): silu(norm(x + shift)),
  // the sum formed inside group_norm_nhwc when channels_last (never stored), else by an add first.
  Tensor silu(const Tensor& x, const Tensor& shift = Tensor()) const;
};

// Multi-head attention on [B, T, C] queries and [B, S, C'] keys/values already projected to C: heads of C / heads.
Tensor mha(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, bool causal);
// Concatenation along `axis` (a new tensor; copies through views).
Tensor concat(const Tensor& a, const Tensor& b, int axis);
// x [N, C, H, W] -> [N, C, H + bottom, W + right] with zeros appended (asymmetric padding before a conv);
// channels_last: x [N, H, W, C] -> [N, H + bottom, W + right, C].
Tensor pad_bottom_right(const Tensor& x, int64_t bottom, int64_t right, bool channels_last = false);
// Nearest upsampling of x [N, H, W, C] to [N, out_h, out_w, C] (source index floor(dst * in / out), as
// upsample_nearest2d): an exact 2x is a broadcast view copied once; other sizes go through upsample_nearest2d on the
// channels-first transpose.
Tensor upsample_nearest_nhwc(const Tensor& x, int64_t out_h, int64_t out_w);
// The layout changes at the edges of a channels-last model: [N, C, H, W] <-> [N, H, W, C], contiguous copies.
Tensor to_nhwc(const Tensor& x);
Tensor to_nchw(const Tensor& x);
// x * sigmoid(1.702 x) (CLIP's quick_gelu)
Tensor quick_gelu(const Tensor& x);
// GEGLU of a feed-forward projection h [..., 2F] = [hidden | gate]: hidden * gelu(gate) (erf form), [..., F]. One
// pass (ops::geglu); RBEE_SD_GEGLU_FUSED=0: gelu then mul over the two halves (for A/B).
Tensor geglu(const Tensor& h);

}  // namespace rbee::sd::nn
