// Building blocks shared by the UNet and the VAE (diffusers' ResnetBlock2D, Transformer2DModel with
// BasicTransformerBlock, the VAE's single-head spatial attention, Downsample2D, Upsample2D).
// Tensors are NCHW activations, or NHWC after to_channels_last() (the UNet on GPUs: nn::channels_last_for);
// context is [B, S, cross_dim].
#pragma once

#include <span>
#include <string>
#include <vector>

#include "sd/nn.h"

namespace rbee::sd::blocks {

struct Resnet {
  nn::Norm norm1, norm2;
  nn::Conv2d conv1, conv2, shortcut;
  nn::Linear time_proj;  // absent in the VAE (temb_channels 0)
  bool has_shortcut = false, has_time = false;
  // diffusers' time_embedding_norm "scale_shift": time_proj gives [scale | shift] and h = norm2(h) * (1 + scale) +
  // shift; "default" adds the projection before norm2.
  bool scale_shift = false;
  double output_scale = 1.0;  // (x + h) / output_scale_factor
  static Resnet load(const Weights& w, int64_t in, int64_t out, int64_t temb, int groups, float eps,
                     bool scale_shift = false, double output_scale = 1.0);
  bool channels_last = false;
  // Its convolutions and norms switch to NHWC (weights permuted once).
  void to_channels_last();
  // x [N, in, H, W], temb [N, temb] (ignored when has_time is false) -> [N, out, H, W]; NHWC when channels_last.
  // with_time(x, time_projection(temb)).
  Tensor operator()(const Tensor& x, const Tensor& temb) const;
  // time_proj(silu(temb)): [N, out], or [N, 2 out] (scale, then shift) for scale_shift; undefined without has_time.
  Tensor time_projection(const Tensor& temb) const;
  // The block with its time projection t already made (time_projection's result, or the same numbers from a
  // product shared by several resnets: the UNet's fused time projections); t contiguous.
  Tensor with_time(const Tensor& x, const Tensor& t) const;
};

struct TransformerBlock {
  nn::Norm norm1, norm2, norm3;
  nn::Linear q1, k1, v1, o1, q2, k2, v2, o2, ff_in, ff_out;
  // q1 | k1 | v1 and k2 | v2 as single projections (fuse_projections; then the parts' weights are released).
  nn::Linear qkv1, kv2;
  int64_t heads = 1;
  // Builds qkv1 and kv2 unless RBEE_SD_QKV_FUSED=0 (three and two GEMMs, for A/B) or the weights cannot be fused.
  void fuse_projections();
  // The cross-attention's keys and values for one context [B, S, cross]: k, v [B, S, dim] (column slices of kv2's
  // [B, S, 2 dim] output when fused). They depend on the context alone (the prompt), not on x.
  struct CrossKV {
    Tensor k, v;
  };
  CrossKV project_context(const Tensor& context) const;
  // x [B, T, dim] with the keys and values of project_context(context) -> [B, T, dim]
  Tensor operator()(const Tensor& x, const CrossKV& kv) const;
};

// Transformer2DModel with continuous input: group norm, proj_in (1x1 conv or linear), blocks, proj_out, residual.
struct SpatialTransformer {
  nn::Norm norm;
  nn::Conv2d proj_in_conv, proj_out_conv;
  nn::Linear proj_in_lin, proj_out_lin;
  bool linear = false;
  std::vector<TransformerBlock> blocks;
  bool channels_last = false;
  static SpatialTransformer load(const Weights& w, int64_t channels, int64_t heads, int64_t cross_dim, int layers,
                                 int groups, bool linear_projection);
  void to_channels_last();
  // Appends each block's cross-attention keys and values for `context` [N, S, cross] (TransformerBlock::
  // project_context), in block order.
  void project_context(const Tensor& context, std::vector<Tensor>& keys, std::vector<Tensor>& values) const;
  // x [N, C, H, W] with one key and one value tensor per block (project_context) -> [N, C, H, W]. Channels last,
  // x [N, H, W, C] viewed as [N, HW, C] is the transformer blocks' layout: no transposes, and proj_out's residual
  // rides in its epilogue in both variants.
  Tensor operator()(const Tensor& x, std::span<const Tensor> keys, std::span<const Tensor> values) const;
};

// The VAE mid block's attention: one head over all H*W positions, with group norm and a residual.
struct VaeAttention {
  nn::Norm norm;
  nn::Linear q, k, v, o;
  bool channels_last = false;
  static VaeAttention load(const Weights& w, int64_t channels, int groups, float eps);
  void to_channels_last() { norm.channels_last = channels_last = true; }
  // x [N, C, H, W] -> [N, C, H, W]. Channels last, x [N, H, W, C] viewed as [N, HW, C] is the projections' layout
  // (no transposes) and the residual rides in the output projection's epilogue.
  Tensor operator()(const Tensor& x) const;
};

// 3x3 conv with stride 2; pad 1, or diffusers' padding 0 = pad one row/column at the bottom/right.
struct Downsample {
  nn::Conv2d conv;
  bool asymmetric = false;
  static Downsample load(const Weights& w, int64_t channels, int padding);
  void to_channels_last() { conv.to_channels_last(); }
  Tensor operator()(const Tensor& x) const;
};

// nearest x2 upsampling then a 3x3 conv.
struct Upsample {
  nn::Conv2d conv;
  static Upsample load(const Weights& w, int64_t channels);
  void to_channels_last() { conv.to_channels_last(); }
  // x [N, C, H, W] (or [N, H, W, C] once channels last) -> twice the height and width.
  Tensor operator()(const Tensor& x) const;
  // Nearest upsampling to out_h x out_w (source index floor(dst * in / out), as torch's interpolate with `size`),
  // then the conv: the UNet's up blocks meet skips of odd sides this way.
  Tensor operator()(const Tensor& x, int64_t out_h, int64_t out_w) const;
};

}  // namespace rbee::sd::blocks
