// Shared SD layers (src/sd/nn.h).
#include "sd/nn.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "rbee/sd/profile.h"
#include "sd/flop_count.h"
#include "rbee/core/env.h"

namespace rbee::sd::nn {

DType act_dtype(const Weights& wt) {
  return wt.device().info().backend == "cpu" ? DType::F32 : wt.dtype();
}

namespace {

// `t` in `dtype` (a cast only when it differs).
Tensor as_dtype(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : ops::cast(t, dtype); }

// A parameter (bias, norm scale) in the activation dtype.
Tensor get_act(const Weights& wt, const std::string& name, const Shape& shape) {
  return act_dtype(wt) == DType::F32 ? wt.get_f32(name, shape) : wt.get(name, shape);
}

}  // namespace

Linear Linear::load(const Weights& wt, const std::string& name, int64_t in, int64_t out, bool bias) {
  Linear l;
  l.in = in;
  l.out = out;
  l.w = wt.get(name + ".weight", {out, in});
  if (bias) l.b = get_act(wt, name + ".bias", {out});
  return l;
}

Linear Linear::fuse(std::initializer_list<const Linear*> parts) {
  return fuse(std::span<const Linear* const>(parts.begin(), parts.size()));
}

Linear Linear::fuse(std::span<const Linear* const> parts) {
  Linear f;
  if (parts.empty()) return f;
  const Linear& first = **parts.begin();
  const DType dt = first.w.dtype();
  if (dt != DType::F32 && dt != DType::F16 && dt != DType::BF16) return f;
  for (const Linear* p : parts) {
    if (p->w.dtype() != dt || p->in != first.in || p->b.defined() != first.b.defined()) return f;
  }
  f.in = first.in;
  for (const Linear* p : parts) f.out += p->out;
  f.w = Tensor::empty({f.out, f.in}, dt, first.w.device());
  if (first.b.defined()) f.b = Tensor::empty({f.out}, first.b.dtype(), first.b.device());
  int64_t row = 0;
  for (const Linear* p : parts) {
    f.w.narrow(0, row, p->out).copy_from(p->w);
    if (f.b.defined()) f.b.narrow(0, row, p->out).copy_from(p->b);
    row += p->out;
  }
  return f;
}

Tensor Linear::operator()(const Tensor& x, const Tensor& residual) const {
  profile::Scope scope("linear", x, w.shape());
  FlopCounter::add(2.0 * (double)(x.numel() / std::max<int64_t>(in, 1)) * (double)in * (double)out);
  // RBEE_SD_LINEAR_FUSED=0: the 16-bit product as a plain matmul with separate adds (A/B comparisons).
  static const bool fused = env::flag_or("RBEE_SD_LINEAR_FUSED", true);
  if (x.dtype() == w.dtype() && x.dtype() != DType::F32 && !fused) {
    const Tensor xc = x.contiguous();
    Shape ys = x.shape();
    ys[ys.rank() - 1] = out;
    Tensor y = ops::matmul(xc.view({xc.numel() / in, in}), w.transpose(0, 1)).view(ys);
    if (b.defined()) y = ops::add(y, as_dtype(b, y.dtype()));
    return residual.defined() ? ops::add(residual, y) : y;
  }
  if (x.dtype() == w.dtype() && x.dtype() != DType::F32) {
    // 16-bit activations and weights: x [..., in] . w^T + b + residual in one op (cuBLASLt's bias epilogue on CUDA).
    return ops::linear(x, w, b.defined() ? as_dtype(b, x.dtype()) : Tensor(),
                       residual.defined() ? as_dtype(residual, x.dtype()) : Tensor());
  }
  Tensor y = ops::qmatmul(as_dtype(x, DType::F32), w);  // F32 activations; w F32, 16-bit or quantized
  if (b.defined()) y = ops::add(y, as_dtype(b, y.dtype()));
  return residual.defined() ? ops::add(residual, y) : y;
}

bool channels_last_for(const Device& device) {
  if (const std::optional<bool> forced = env::flag("RBEE_SD_CHANNELS_LAST")) return *forced;
  for (const auto& [key, value] : device.info().extra)
    if (key == "convolution library") return value.rfind("none", 0) != 0;
  return false;
}

Conv2d Conv2d::load(const Weights& wt, const std::string& name, int64_t in, int64_t out, int k, int stride, int pad) {
  Conv2d c;
  c.in = in;
  c.out = out;
  c.k = k;
  c.stride = stride;
  c.pad = pad < 0 ? k / 2 : pad;
  c.w = get_act(wt, name + ".weight", {out, in, k, k});
  c.b = get_act(wt, name + ".bias", {out});
  return c;
}

void Conv2d::to_channels_last() {
  if (channels_last) return;
  w = w.permute({0, 2, 3, 1}).contiguous();
  channels_last = true;
}

Tensor Conv2d::operator()(const Tensor& x, const Tensor& residual, const Tensor& shift) const {
  Conv2dParams p;
  p.stride_h = p.stride_w = stride;
  p.pad_h = p.pad_w = pad;
  profile::Scope scope("conv2d", x, w.shape());
  const DType dt = w.dtype();
  // A per-image shift joins the bias: [N, out] rows of bias + shift.
  const Tensor bias = shift.defined() ? ops::add(as_dtype(shift, dt).view({shift.dim(0), out}), b.view({1, out})) : b;
  const Tensor r = residual.defined() ? as_dtype(residual, dt) : Tensor();
  Tensor y = channels_last ? ops::conv2d_fused_nhwc(as_dtype(x, dt), w, bias, r, p)
                           : ops::conv2d_fused(as_dtype(x, dt), w, bias, r, p);
  FlopCounter::add(2.0 * (double)y.numel() * (double)(w.numel() / std::max<int64_t>(out, 1)));  // Cin k k per output
  return y;
}

Norm Norm::layer(const Weights& wt, const std::string& name, int64_t dim, float eps) {
  Norm n;
  n.w = get_act(wt, name + ".weight", {dim});
  n.b = get_act(wt, name + ".bias", {dim});
  n.eps = eps;
  return n;
}

Norm Norm::group(const Weights& wt, const std::string& name, int64_t channels, int groups, float eps) {
  RBEE_CHECK(groups > 0 && channels % groups == 0, "sd: group norm '{}{}': {} channels are not divisible by {} groups",
             wt.prefix(), name, channels, groups);
  Norm n = layer(wt, name, channels, eps);
  n.groups = groups;
  return n;
}

Tensor Norm::operator()(const Tensor& x) const {
  profile::Scope scope(groups == 0 ? "layer_norm" : "group_norm", x);
  const Tensor wx = as_dtype(w, x.dtype()), bx = as_dtype(b, x.dtype());
  if (groups == 0) return ops::layer_norm(x, wx, bx, eps);
  if (channels_last) return ops::group_norm_nhwc(x, groups, wx, bx, eps);
  return ops::group_norm(x, groups, wx, bx, eps);
}

Tensor Norm::silu(const Tensor& x, const Tensor& shift) const {
  if (groups == 0) return ops::silu((*this)(x));
  profile::Scope scope("group_norm", x);
  const Tensor s = shift.defined() ? as_dtype(shift, x.dtype()) : Tensor();
  if (channels_last) {
    return ops::group_norm_nhwc(x, groups, as_dtype(w, x.dtype()), as_dtype(b, x.dtype()), eps, true, s);
  }
  if (s.defined()) {
    Shape per_channel = Shape::filled(x.rank(), 1);  // [N, C, 1, ...]
    per_channel[0] = x.dim(0);
    per_channel[1] = x.dim(1);
    return ops::group_norm_silu(ops::add(x, s.view(per_channel)), groups, as_dtype(w, x.dtype()),
                                as_dtype(b, x.dtype()), eps);
  }
  return ops::group_norm_silu(x, groups, as_dtype(w, x.dtype()), as_dtype(b, x.dtype()), eps);
}

namespace {

// RBEE_SD_ATTN_OUT_VIEW=0: attention writes [B, heads, T, d] and a transpose copy makes [B, T, C] (the path before
// session 9, for A/B); unset: attention writes [B, T, C] in place.
bool out_view_enabled() {
  static const bool on = env::flag_or("RBEE_SD_ATTN_OUT_VIEW", true);
  return on;
}

}  // namespace

Tensor mha(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, bool causal) {
  const int64_t B = q.dim(0), T = q.dim(1), C = q.dim(2), S = k.dim(1);
  RBEE_CHECK(C % heads == 0, "sd attention: {} channels are not divisible by {} heads", C, heads);
  const int64_t d = C / heads;
  profile::Scope scope("attention", q, Shape{S, heads});
  FlopCounter::add(4.0 * (double)B * (double)T * (double)S * (double)C);  // Q K^T and P V over every head
  // [B, len, C] with unit channel stride (any row stride: a slice of a fused projection) -> [B, heads, len, d] view.
  auto split = [&](const Tensor& x, int64_t len) {
    const Tensor xs = x.stride(2) == 1 ? x : x.contiguous();
    return xs.as_strided({B, heads, len, d}, {xs.stride(0), d, xs.stride(1), 1}, xs.offset());
  };
  AttentionParams p;
  p.scale = (float)(1.0 / std::sqrt((double)d));
  p.causal = causal;
  if (!out_view_enabled()) {
    const Tensor o = ops::attention(split(q, T), split(k, S), split(v, S), p);
    return o.transpose(1, 2).contiguous().view({B, T, C});
  }
  // The kernels write [B, T, C] directly (its [B, heads, T, d] view), the layout the output projection reads.
  Tensor out = Tensor::empty({B, T, C}, q.dtype(), q.device());
  Tensor heads_view = out.as_strided({B, heads, T, d}, {T * C, d, C, 1}, out.offset());
  ops::attention(split(q, T), split(k, S), split(v, S), p, heads_view);
  return out;
}

Tensor concat(const Tensor& a, const Tensor& b, int axis) {
  Shape s = a.shape();
  s[axis] = a.dim(axis) + b.dim(axis);
  profile::Scope scope("concat", a);
  Tensor out = Tensor::empty(s, a.dtype(), a.device());
  out.narrow(axis, 0, a.dim(axis)).copy_from(a);
  out.narrow(axis, a.dim(axis), b.dim(axis)).copy_from(b);
  return out;
}

Tensor pad_bottom_right(const Tensor& x, int64_t bottom, int64_t right, bool channels_last) {
  const int ah = channels_last ? 1 : 2, aw = ah + 1;  // the row and column axes
  Shape s = x.shape();
  s[ah] += bottom;
  s[aw] += right;
  Tensor out = ops::zeros(s, x.dtype(), x.device());
  out.narrow(ah, 0, x.dim(ah)).narrow(aw, 0, x.dim(aw)).copy_from(x);
  return out;
}

Tensor upsample_nearest_nhwc(const Tensor& x, int64_t out_h, int64_t out_w) {
  const int64_t n = x.dim(0), h = x.dim(1), w = x.dim(2), c = x.dim(3);
  if (out_h == 2 * h && out_w == 2 * w) {
    // out[n, 2y + i, 2x + j, c] = x[n, y, x, c]: [N, H, 1, W, 1, C] broadcast over i and j.
    return x.contiguous().view({n, h, 1, w, 1, c}).expand({n, h, 2, w, 2, c}).contiguous().view({n, out_h, out_w, c});
  }
  return to_nhwc(ops::upsample_nearest2d(to_nchw(x), out_h, out_w));
}

Tensor to_nhwc(const Tensor& x) { return x.permute({0, 2, 3, 1}).contiguous(); }

Tensor to_nchw(const Tensor& x) { return x.permute({0, 3, 1, 2}).contiguous(); }

Tensor quick_gelu(const Tensor& x) { return ops::mul(x, ops::unary(UnaryOp::Sigmoid, ops::affine(x, 1.702, 0.0))); }

Tensor geglu(const Tensor& h) {
  static const bool fused = env::flag_or("RBEE_SD_GEGLU_FUSED", true);
  profile::Scope scope("geglu", h);
  if (fused) return ops::geglu(h);
  const int64_t f = h.dim(-1) / 2;
  const Tensor hidden = h.narrow(h.rank() - 1, 0, f), gate = h.narrow(h.rank() - 1, f, f);
  return ops::mul(hidden, ops::gelu(gate, /*tanh_approximation=*/false));
}

}  // namespace rbee::sd::nn
