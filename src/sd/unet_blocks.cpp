// UNet / VAE building blocks (src/sd/unet_blocks.h).
#include "sd/unet_blocks.h"

#include <cstdlib>
#include <string_view>

#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "rbee/core/env.h"

namespace rbee::sd::blocks {

Resnet Resnet::load(const Weights& w, int64_t in, int64_t out, int64_t temb, int groups, float eps, bool scale_shift,
                    double output_scale) {
  Resnet r;
  r.scale_shift = scale_shift;
  r.output_scale = output_scale;
  r.norm1 = nn::Norm::group(w, "norm1", in, groups, eps);
  r.conv1 = nn::Conv2d::load(w, "conv1", in, out, 3);
  r.norm2 = nn::Norm::group(w, "norm2", out, groups, eps);
  r.conv2 = nn::Conv2d::load(w, "conv2", out, out, 3);
  if (temb > 0) {
    r.time_proj = nn::Linear::load(w, "time_emb_proj", temb, scale_shift ? 2 * out : out);
    r.has_time = true;
  }
  if (in != out) {
    r.shortcut = nn::Conv2d::load(w, "conv_shortcut", in, out, 1);
    r.has_shortcut = true;
  }
  return r;
}

void Resnet::to_channels_last() {
  for (nn::Conv2d* c : {&conv1, &conv2, &shortcut})
    if (c->w.defined()) c->to_channels_last();
  norm1.channels_last = norm2.channels_last = true;
  channels_last = true;
}

namespace {

// RBEE_SD_SHIFT_IN_NORM=0: a channels-last resnet adds its time embedding in conv1's epilogue as a [N, out] bias (the
// channels-first wiring; the vendor library then runs one call per image) instead of inside norm2 (A/B).
bool shift_in_norm_enabled() {
  static const bool on = env::flag_or("RBEE_SD_SHIFT_IN_NORM", true);
  return on;
}

}  // namespace

Tensor Resnet::operator()(const Tensor& x, const Tensor& temb) const { return with_time(x, time_projection(temb)); }

Tensor Resnet::time_projection(const Tensor& temb) const {
  return has_time ? time_proj(ops::silu(temb)) : Tensor();
}

Tensor Resnet::with_time(const Tensor& x, const Tensor& t) const {
  if (!scale_shift && output_scale == 1.0 && channels_last && has_time && shift_in_norm_enabled()) {
    // Channels last: h = conv1(silu(norm1(x))) with its [out] bias only, so both images share one convolution call,
    // and the time embedding t [N, out] joins h inside norm2 (group_norm_nhwc's shift: norm2 normalizes h + t, the
    // only reader of h); out = skip + conv2(silu(norm2(h + t))).
    const Tensor h = conv1(norm1.silu(x));
    return conv2(norm2.silu(h, t), has_shortcut ? shortcut(x) : x);
  }
  if (!scale_shift && output_scale == 1.0) {
    // The usual wiring with the time embedding and the skip folded into the convolutions' epilogues:
    // h = conv1(silu(norm1(x))) + t; out = skip + conv2(silu(norm2(h))).
    const Tensor h = conv1(norm1.silu(x), Tensor(), has_time ? t : Tensor());
    return conv2(norm2.silu(h), has_shortcut ? shortcut(x) : x);
  }
  Tensor h = conv1(norm1.silu(x));
  if (has_time && scale_shift) {
    // t [N, 2 * out]: scale, then shift
    const int64_t n = t.dim(0), c = t.dim(1) / 2;
    const Shape per_channel = channels_last ? Shape{n, 1, 1, c} : Shape{n, c, 1, 1};
    Tensor scale = t.narrow(1, 0, c).contiguous().view(per_channel);
    Tensor shift = t.narrow(1, c, c).contiguous().view(per_channel);
    h = norm2(h);
    h = ops::add(ops::mul(h, ops::affine(scale, 1.0, 1.0)), shift);
    h = conv2(ops::silu(h));
  } else {
    if (has_time)  // t [N, out]
      h = ops::add(h, channels_last ? t.view({t.dim(0), 1, 1, t.dim(1)}) : t.view({t.dim(0), t.dim(1), 1, 1}));
    h = conv2(norm2.silu(h));
  }
  Tensor out = ops::add(has_shortcut ? shortcut(x) : x, h);
  return output_scale == 1.0 ? out : ops::affine(out, 1.0 / output_scale, 0.0);
}

void TransformerBlock::fuse_projections() {
  static const bool on = env::flag_or("RBEE_SD_QKV_FUSED", true);
  if (!on) return;
  qkv1 = nn::Linear::fuse({&q1, &k1, &v1});
  kv2 = nn::Linear::fuse({&k2, &v2});
  // The parts' weights are not needed any more (their in / out stay: the slices' widths).
  if (qkv1.w.defined()) q1.w = k1.w = v1.w = q1.b = k1.b = v1.b = Tensor();
  if (kv2.w.defined()) k2.w = v2.w = k2.b = v2.b = Tensor();
}

TransformerBlock::CrossKV TransformerBlock::project_context(const Tensor& context) const {
  if (kv2.w.defined()) {
    const Tensor kv = kv2(context);  // [B, S, 2C]: k and v as column slices (mha reads them strided)
    const int64_t c = k2.out;
    return {kv.narrow(2, 0, c), kv.narrow(2, c, c)};
  }
  return {k2(context), v2(context)};
}

Tensor TransformerBlock::operator()(const Tensor& x, const CrossKV& kv) const {
  // The residual adds ride in the output projections (nn::Linear's residual: one rounding on GPUs).
  Tensor h = norm1(x);
  Tensor out;
  if (qkv1.w.defined()) {
    const Tensor qkv = qkv1(h);  // [B, T, 3C]: q, k and v as column slices (mha reads them strided)
    const int64_t c = q1.out;
    out = o1(nn::mha(qkv.narrow(2, 0, c), qkv.narrow(2, c, c), qkv.narrow(2, 2 * c, c), heads, false), x);
  } else {
    out = o1(nn::mha(q1(h), k1(h), v1(h), heads, false), x);
  }
  h = norm2(out);
  out = o2(nn::mha(q2(h), kv.k, kv.v, heads, false), out);
  h = ff_in(norm3(out));  // [hidden | gate]
  return ff_out(nn::geglu(h), out);
}

SpatialTransformer SpatialTransformer::load(const Weights& w, int64_t c, int64_t heads, int64_t cross, int layers,
                                            int groups, bool linear_projection) {
  SpatialTransformer s;
  s.norm = nn::Norm::group(w, "norm", c, groups, 1e-6f);
  s.linear = linear_projection;
  if (linear_projection) {
    s.proj_in_lin = nn::Linear::load(w, "proj_in", c, c);
    s.proj_out_lin = nn::Linear::load(w, "proj_out", c, c);
  } else {
    s.proj_in_conv = nn::Conv2d::load(w, "proj_in", c, c, 1);
    s.proj_out_conv = nn::Conv2d::load(w, "proj_out", c, c, 1);
  }
  for (int i = 0; i < layers; ++i) {
    Weights b = w.sub("transformer_blocks." + std::to_string(i) + ".");
    TransformerBlock t;
    t.heads = heads;
    t.norm1 = nn::Norm::layer(b, "norm1", c, 1e-5f);
    t.norm2 = nn::Norm::layer(b, "norm2", c, 1e-5f);
    t.norm3 = nn::Norm::layer(b, "norm3", c, 1e-5f);
    t.q1 = nn::Linear::load(b, "attn1.to_q", c, c, false);
    t.k1 = nn::Linear::load(b, "attn1.to_k", c, c, false);
    t.v1 = nn::Linear::load(b, "attn1.to_v", c, c, false);
    t.o1 = nn::Linear::load(b, "attn1.to_out.0", c, c);
    t.q2 = nn::Linear::load(b, "attn2.to_q", c, c, false);
    t.k2 = nn::Linear::load(b, "attn2.to_k", cross, c, false);
    t.v2 = nn::Linear::load(b, "attn2.to_v", cross, c, false);
    t.o2 = nn::Linear::load(b, "attn2.to_out.0", c, c);
    t.ff_in = nn::Linear::load(b, "ff.net.0.proj", c, 8 * c);
    t.ff_out = nn::Linear::load(b, "ff.net.2", 4 * c, c);
    t.fuse_projections();
    s.blocks.push_back(std::move(t));
  }
  return s;
}

void SpatialTransformer::to_channels_last() {
  norm.channels_last = true;
  if (!linear) {
    proj_in_conv.to_channels_last();
    proj_out_conv.to_channels_last();
  }
  channels_last = true;
}

void SpatialTransformer::project_context(const Tensor& context, std::vector<Tensor>& keys,
                                         std::vector<Tensor>& values) const {
  for (const TransformerBlock& b : blocks) {
    TransformerBlock::CrossKV kv = b.project_context(context);
    keys.push_back(std::move(kv.k));
    values.push_back(std::move(kv.v));
  }
}

Tensor SpatialTransformer::operator()(const Tensor& x, std::span<const Tensor> keys,
                                      std::span<const Tensor> values) const {
  RBEE_CHECK(keys.size() == blocks.size() && values.size() == blocks.size(),
             "sd transformer: {} keys and {} values for {} blocks", keys.size(), values.size(), blocks.size());
  if (channels_last) {
    const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3);
    Tensor h = norm(x);
    if (!linear) h = proj_in_conv(h);  // a 1x1 convolution of an NHWC map: one linear layer
    h = h.view({N, H * W, C});
    if (linear) h = proj_in_lin(h);
    for (size_t i = 0; i < blocks.size(); ++i) h = blocks[i](h, {keys[i], values[i]});
    if (linear) return proj_out_lin(h, x.contiguous().view({N, H * W, C})).view({N, H, W, C});
    return proj_out_conv(h.view({N, H, W, C}), x);
  }
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  Tensor h = norm(x);
  if (!linear) h = proj_in_conv(h);
  h = h.view({N, C, H * W}).transpose(1, 2).contiguous();  // [N, HW, C]
  if (linear) h = proj_in_lin(h);
  for (size_t i = 0; i < blocks.size(); ++i) h = blocks[i](h, {keys[i], values[i]});
  if (linear) h = proj_out_lin(h);
  h = h.transpose(1, 2).contiguous().view({N, C, H, W});
  if (!linear) return proj_out_conv(h, x);  // the residual in the convolution's epilogue
  return ops::add(h, x);
}

VaeAttention VaeAttention::load(const Weights& w, int64_t c, int groups, float eps) {
  VaeAttention a;
  a.norm = nn::Norm::group(w, "group_norm", c, groups, eps);
  a.q = nn::Linear::load(w, "to_q", c, c);
  a.k = nn::Linear::load(w, "to_k", c, c);
  a.v = nn::Linear::load(w, "to_v", c, c);
  a.o = nn::Linear::load(w, "to_out.0", c, c);
  return a;
}

Tensor VaeAttention::operator()(const Tensor& x) const {
  if (channels_last) {
    const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3);
    const Tensor h = norm(x).view({N, H * W, C});
    return o(nn::mha(q(h), k(h), v(h), 1, false), x.contiguous().view({N, H * W, C})).view({N, H, W, C});
  }
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  Tensor h = norm(x).view({N, C, H * W}).transpose(1, 2).contiguous();
  h = o(nn::mha(q(h), k(h), v(h), 1, false));
  return ops::add(h.transpose(1, 2).contiguous().view({N, C, H, W}), x);
}

Downsample Downsample::load(const Weights& w, int64_t c, int padding) {
  RBEE_CHECK(padding == 0 || padding == 1, "sd: downsample padding {} must be 0 or 1", padding);
  Downsample d;
  d.conv = nn::Conv2d::load(w, "conv", c, c, 3, 2, padding);
  d.asymmetric = padding == 0;
  return d;
}

Tensor Downsample::operator()(const Tensor& x) const {
  return conv(asymmetric ? nn::pad_bottom_right(x, 1, 1, conv.channels_last) : x);
}

Upsample Upsample::load(const Weights& w, int64_t c) {
  Upsample u;
  u.conv = nn::Conv2d::load(w, "conv", c, c, 3);
  return u;
}

Tensor Upsample::operator()(const Tensor& x) const {
  const int ah = conv.channels_last ? 1 : 2;
  return (*this)(x, x.dim(ah) * 2, x.dim(ah + 1) * 2);
}

Tensor Upsample::operator()(const Tensor& x, int64_t out_h, int64_t out_w) const {
  if (conv.channels_last) return conv(nn::upsample_nearest_nhwc(x, out_h, out_w));
  return conv(ops::upsample_nearest2d(x, out_h, out_w));
}

}  // namespace rbee::sd::blocks
