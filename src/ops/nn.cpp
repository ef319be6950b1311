// Front-ends of the neural-network ops: norms, rope (and its frequency tables), attention, swiglu,
// add_rms_norm. Each checks its arguments, establishes the kernel preconditions of rbee/backend/op_table.def
// (contiguous rows, a contiguous last axis, resolved rotary_dim) and allocates the output.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "ops/op_checks.h"
#include "rbee/ops.h"

namespace rbee::ops {

using detail::check_defined;
using detail::check_same_dtype;
using detail::check_supported;
using detail::common_device;

namespace {

void check_eps(std::string_view op, float eps) {
  RBEE_CHECK(std::isfinite(eps) && eps >= 0, "{}: eps must be finite and >= 0, got {}", op, eps);
}

// An optional per-feature parameter (weight or bias): undefined, or [n] with x's dtype on x's device.
// Returns a pointer to its contiguous form (kept in `storage`) or null.
const Tensor* feature_param(std::string_view op, std::string_view arg, const Tensor& t, const Tensor& x, int64_t n,
                            Tensor& storage) {
  if (!t.defined()) return nullptr;
  RBEE_CHECK(t.rank() == 1 && t.dim(0) == n, "{}: '{}' must have shape [{}], got {}", op, arg, n,
             t.shape().to_string());
  RBEE_CHECK(t.dtype() == x.dtype(), "{}: '{}' is {} but x is {}", op, arg, dtype_name(t.dtype()),
             dtype_name(x.dtype()));
  storage = t.contiguous();
  return &storage;
}

// The last axis made contiguous (a copy only when it is not); other strides are kept.
Tensor last_axis_contiguous(const Tensor& t) { return t.stride(-1) == 1 || t.dim(-1) <= 1 ? t : t.contiguous(); }

// x [..., N, H, D] as [N', H, D] (N' = product of the leading dims), without a copy when the leading dims
// collapse into one stride and the last axis is contiguous.
Tensor as_tokens_heads_dim(const Tensor& x) {
  const int rank = x.rank();
  int64_t tokens = 1;
  for (int d = 0; d <= rank - 3; ++d) tokens *= x.dim(d);
  const Shape shape{tokens, x.dim(-2), x.dim(-1)};
  // Leading dims of size 1 do not constrain the merge; the others must nest exactly.
  bool mergeable = x.stride(-1) == 1 || x.dim(-1) <= 1;
  int64_t token_stride = 0;
  int inner = -1;  // the innermost leading dim of size > 1 seen so far
  for (int d = rank - 3; d >= 0; --d) {
    if (x.dim(d) == 1) continue;
    if (inner < 0) token_stride = x.stride(d);
    else if (x.stride(d) != x.stride(inner) * x.dim(inner)) mergeable = false;
    inner = d;
  }
  if (!mergeable) return x.contiguous().view(shape);
  return x.as_strided(shape, Strides{token_stride, x.stride(-2), 1}, x.offset());
}

}  // namespace

// ------------------------------------------------------------------------------------------------- norms
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  check_defined("rms_norm", "x", x);
  Device& device = common_device("rms_norm", {&x, &weight});
  RBEE_CHECK(x.rank() >= 1, "rms_norm: x must have at least one dimension");
  check_eps("rms_norm", eps);
  check_supported("rms_norm", device, OpKind::RmsNorm, {x.dtype(), x.dtype()});
  Tensor w_storage;
  const Tensor* w = feature_param("rms_norm", "weight", weight, x, x.dim(-1), w_storage);
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), device);
  device.kernels().rms_norm(xc, w, eps, out);
  return out;
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  check_defined("layer_norm", "x", x);
  Device& device = common_device("layer_norm", {&x, &weight, &bias});
  RBEE_CHECK(x.rank() >= 1, "layer_norm: x must have at least one dimension");
  check_eps("layer_norm", eps);
  check_supported("layer_norm", device, OpKind::LayerNorm, {x.dtype(), x.dtype()});
  Tensor w_storage, b_storage;
  const Tensor* w = feature_param("layer_norm", "weight", weight, x, x.dim(-1), w_storage);
  const Tensor* b = feature_param("layer_norm", "bias", bias, x, x.dim(-1), b_storage);
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), device);
  device.kernels().layer_norm(xc, w, b, eps, out);
  return out;
}

namespace {

// group_norm and group_norm_silu (op names the op in messages).
Tensor group_norm_op(const char* op, bool silu, const Tensor& x, int groups, const Tensor& weight, const Tensor& bias,
                     float eps) {
  check_defined(op, "x", x);
  Device& device = common_device(op, {&x, &weight, &bias});
  RBEE_CHECK(x.rank() >= 2, "{}: x must be [N, C, ...], got shape {}", op, x.shape().to_string());
  const int64_t channels = x.dim(1);
  RBEE_CHECK(groups >= 1, "{}: groups must be >= 1, got {}", op, groups);
  RBEE_CHECK(channels % groups == 0, "{}: {} channels do not split into {} groups", op, channels, groups);
  check_eps(op, eps);
  check_supported(op, device, silu ? OpKind::GroupNormSilu : OpKind::GroupNorm, {x.dtype(), x.dtype()});
  Tensor w_storage, b_storage;
  const Tensor* w = feature_param(op, "weight", weight, x, channels, w_storage);
  const Tensor* b = feature_param(op, "bias", bias, x, channels, b_storage);
  int64_t spatial = 1;
  for (int d = 2; d < x.rank(); ++d) spatial *= x.dim(d);
  const Shape flat{x.dim(0), channels, spatial};
  const Tensor xc = x.contiguous().view(flat);
  Tensor out = Tensor::empty(flat, x.dtype(), device);
  if (silu) device.kernels().group_norm_silu(xc, groups, w, b, eps, out);
  else device.kernels().group_norm(xc, groups, w, b, eps, out);
  return out.view(x.shape());
}

}  // namespace

Tensor group_norm(const Tensor& x, int groups, const Tensor& weight, const Tensor& bias, float eps) {
  return group_norm_op("group_norm", false, x, groups, weight, bias, eps);
}

Tensor group_norm_silu(const Tensor& x, int groups, const Tensor& weight, const Tensor& bias, float eps) {
  return group_norm_op("group_norm_silu", true, x, groups, weight, bias, eps);
}

Tensor group_norm_nhwc(const Tensor& x, int groups, const Tensor& weight, const Tensor& bias, float eps, bool silu,
                       const Tensor& shift) {
  constexpr const char* op = "group_norm_nhwc";
  check_defined(op, "x", x);
  Device& device = common_device(op, {&x, &weight, &bias, &shift});
  RBEE_CHECK(x.rank() >= 2, "{}: x must be [N, ..., C], got shape {}", op, x.shape().to_string());
  const int64_t channels = x.dim(-1);
  RBEE_CHECK(groups >= 1, "{}: groups must be >= 1, got {}", op, groups);
  RBEE_CHECK(channels % groups == 0, "{}: {} channels do not split into {} groups", op, channels, groups);
  check_eps(op, eps);
  check_supported(op, device, OpKind::GroupNormNhwc, {x.dtype(), x.dtype()});
  Tensor w_storage, b_storage;
  const Tensor* w = feature_param(op, "weight", weight, x, channels, w_storage);
  const Tensor* b = feature_param(op, "bias", bias, x, channels, b_storage);
  Tensor s_storage;
  if (shift.defined()) {
    RBEE_CHECK(shift.rank() == 2 && shift.dim(0) == x.dim(0) && shift.dim(1) == channels,
               "{}: 'shift' must have shape [{}, {}], got {}", op, x.dim(0), channels, shift.shape().to_string());
    RBEE_CHECK(shift.dtype() == x.dtype(), "{}: 'shift' is {} but x is {}", op, dtype_name(shift.dtype()),
               dtype_name(x.dtype()));
    s_storage = shift.contiguous();
  }
  int64_t spatial = 1;
  for (int d = 1; d + 1 < x.rank(); ++d) spatial *= x.dim(d);
  const Shape flat{x.dim(0), spatial, channels};
  const Tensor xc = x.contiguous().view(flat);
  Tensor out = Tensor::empty(flat, x.dtype(), device);
  const Tensor* s = shift.defined() ? &s_storage : nullptr;
  if (out.numel() > 0) device.kernels().group_norm_nhwc(xc, groups, w, b, s, eps, silu, out);
  return out.view(x.shape());
}

// --------------------------------------------------------------------------------------------------- rope
std::vector<float> rope_inv_freq(int rotary_dim, float theta_base, const RopeScaling& scaling) {
  using Kind = RopeScaling::Kind;
  RBEE_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0, "rope_inv_freq: rotary_dim must be even and > 0, got {}",
             rotary_dim);
  RBEE_CHECK(std::isfinite(theta_base) && theta_base > 1.0f, "rope_inv_freq: theta_base must be > 1, got {}",
             theta_base);
  if (scaling.kind != Kind::None) {
    RBEE_CHECK(std::isfinite(scaling.factor) && scaling.factor > 0, "rope_inv_freq: scaling factor must be > 0, got {}",
               scaling.factor);
  }
  if (scaling.kind == Kind::Llama3 || scaling.kind == Kind::Yarn) {
    RBEE_CHECK(scaling.original_max_position > 0, "rope_inv_freq: original_max_position must be > 0, got {}",
               scaling.original_max_position);
  }
  if (scaling.kind == Kind::Llama3) {
    RBEE_CHECK(scaling.low_freq_factor > 0 && scaling.high_freq_factor > scaling.low_freq_factor,
               "rope_inv_freq: llama3 needs 0 < low_freq_factor < high_freq_factor, got {} and {}",
               scaling.low_freq_factor, scaling.high_freq_factor);
  }
  if (scaling.kind == Kind::Yarn) {
    RBEE_CHECK(scaling.beta_slow > 0 && scaling.beta_fast > scaling.beta_slow,
               "rope_inv_freq: yarn needs 0 < beta_slow < beta_fast, got beta_slow {} and beta_fast {}",
               scaling.beta_slow, scaling.beta_fast);
  }

  const double dim = rotary_dim, theta = theta_base, factor = scaling.factor;
  const double two_pi = 2 * std::numbers::pi;
  const double context = scaling.original_max_position;
  // YaRN: the rotary dims whose wavelength completes beta_fast (resp. beta_slow) turns over the original
  // context bound the ramp; pairs below it keep their frequency, pairs above it are interpolated (/ factor).
  double ramp_lo = 0, ramp_hi = 1;
  if (scaling.kind == Kind::Yarn) {
    auto dim_for_turns = [&](double turns) { return dim * std::log(context / (turns * two_pi)) / (2 * std::log(theta)); };
    ramp_lo = std::max(std::floor(dim_for_turns(scaling.beta_fast)), 0.0);
    ramp_hi = std::min(std::ceil(dim_for_turns(scaling.beta_slow)), dim - 1);
    if (ramp_lo == ramp_hi) ramp_hi += 0.001;  // keeps the ramp defined, as the reference implementation does
  }

  std::vector<float> out((size_t)rotary_dim / 2);
  for (int i = 0; i < rotary_dim / 2; ++i) {
    const double base = std::pow(theta, -2.0 * i / dim);
    double f = base;
    switch (scaling.kind) {
      case Kind::None: break;
      case Kind::Linear: f = base / factor; break;
      case Kind::Llama3: {
        // Llama 3.1: wavelengths shorter than context / high_freq_factor keep their frequency, longer than
        // context / low_freq_factor are divided by factor, and the band between blends the two linearly in
        // context / wavelength.
        const double wavelength = two_pi / base;
        if (wavelength < context / scaling.high_freq_factor) {
          f = base;
        } else if (wavelength > context / scaling.low_freq_factor) {
          f = base / factor;
        } else {
          const double smooth = (context / wavelength - scaling.low_freq_factor) /
                                (scaling.high_freq_factor - scaling.low_freq_factor);
          f = (1 - smooth) * base / factor + smooth * base;
        }
        break;
      }
      case Kind::Yarn: {
        const double ramp = std::clamp((i - ramp_lo) / (ramp_hi - ramp_lo), 0.0, 1.0);
        f = base * (1 - ramp) + base / factor * ramp;
        break;
      }
    }
    out[(size_t)i] = (float)f;
  }
  return out;
}

Tensor rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, const RopeParams& params) {
  check_defined("rope", "x", x);
  check_defined("rope", "positions", positions);
  check_defined("rope", "inv_freq", inv_freq);
  Device& device = common_device("rope", {&x, &positions, &inv_freq});
  RBEE_CHECK(x.rank() >= 3, "rope: x must be [..., N, H, D], got shape {}", x.shape().to_string());
  check_supported("rope", device, OpKind::Rope, {x.dtype(), x.dtype()});
  const int64_t dim = x.dim(-1);
  const int64_t rotary_dim = params.rotary_dim == 0 ? dim : params.rotary_dim;
  RBEE_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= dim,
             "rope: rotary_dim must be even, > 0 and <= head dim {}, got {}", dim, rotary_dim);
  RBEE_CHECK(std::isfinite(params.mscale), "rope: mscale must be finite, got {}", params.mscale);
  RBEE_CHECK(std::isfinite(params.freq_ratio) && params.freq_ratio >= 0.f && params.freq_ratio <= 1.f,
             "rope: freq_ratio must be in [0, 1] (0: use inv_freq), got {}", params.freq_ratio);
  RBEE_CHECK(positions.dtype() == DType::I32, "rope: positions must be i32, got {}", dtype_name(positions.dtype()));
  RBEE_CHECK(inv_freq.dtype() == DType::F32, "rope: inv_freq must be f32, got {}", dtype_name(inv_freq.dtype()));
  RBEE_CHECK(inv_freq.rank() == 1 && inv_freq.dim(0) == rotary_dim / 2,
             "rope: inv_freq must have shape [{}] (rotary_dim / 2), got {}", rotary_dim / 2,
             inv_freq.shape().to_string());
  int64_t tokens = 1;
  for (int d = 0; d < x.rank() - 2; ++d) tokens *= x.dim(d);
  Shape leading = x.shape();
  leading.erase(leading.rank() - 1);
  leading.erase(leading.rank() - 1);
  RBEE_CHECK((positions.rank() == 1 && positions.dim(0) == tokens) || positions.shape() == leading,
             "rope: positions must be [{}] or {} (one per token), got shape {}", tokens, leading.to_string(),
             positions.shape().to_string());

  RopeParams resolved = params;
  resolved.rotary_dim = (int)rotary_dim;
  const Tensor x3 = as_tokens_heads_dim(x);
  const Tensor pos = positions.contiguous();
  const Tensor freq = inv_freq.contiguous();
  Tensor out = Tensor::empty(x3.shape(), x.dtype(), device);
  device.kernels().rope(x3, pos, freq, resolved, out);
  return out.view(x.shape());
}

// ---------------------------------------------------------------------------------------------- attention
namespace {

// Validates attention's inputs (op_table.def Attention) and returns their common device.
Device& check_attention_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& params) {
  check_defined("attention", "q", q);
  check_defined("attention", "k", k);
  check_defined("attention", "v", v);
  Device& device = common_device("attention", {&q, &k, &v});
  RBEE_CHECK(q.rank() == 4, "attention: q must be [B, Hq, Tq, D], got shape {}", q.shape().to_string());
  RBEE_CHECK(k.rank() == 4, "attention: k must be [B, Hkv, Tk, D], got shape {}", k.shape().to_string());
  RBEE_CHECK(v.rank() == 4, "attention: v must be [B, Hkv, Tk, Dv], got shape {}", v.shape().to_string());
  check_same_dtype("attention", {{"q", &q}, {"k", &k}, {"v", &v}});
  check_supported("attention", device, OpKind::Attention, {q.dtype(), k.dtype(), v.dtype(), q.dtype()});
  RBEE_CHECK(k.dim(0) == q.dim(0) && v.dim(0) == q.dim(0), "attention: batch sizes differ (q {}, k {}, v {})",
             q.dim(0), k.dim(0), v.dim(0));
  RBEE_CHECK(v.dim(1) == k.dim(1), "attention: k has {} heads but v has {}", k.dim(1), v.dim(1));
  RBEE_CHECK(v.dim(2) == k.dim(2), "attention: k has {} positions but v has {}", k.dim(2), v.dim(2));
  RBEE_CHECK(k.dim(3) == q.dim(3), "attention: q head dim {} differs from k head dim {}", q.dim(3), k.dim(3));
  RBEE_CHECK(k.dim(1) >= 1 && q.dim(1) % k.dim(1) == 0,
             "attention: query heads ({}) must be a multiple of kv heads ({})", q.dim(1), k.dim(1));
  RBEE_CHECK(std::isfinite(params.scale), "attention: scale must be finite, got {}", params.scale);
  RBEE_CHECK(params.window >= 0, "attention: window must be >= 0, got {}", params.window);
  RBEE_CHECK(std::isfinite(params.softcap) && params.softcap >= 0, "attention: softcap must be finite and >= 0, got {}",
             params.softcap);
  return device;
}

// Whether no two elements of t share an address: walking the axes from the smallest stride up, each stride is at
// least the extent the axes before it cover (axes of size 1 do not count).
bool elements_distinct(const Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> axes;  // (stride, size)
  for (int a = 0; a < t.rank(); ++a) {
    if (t.dim(a) > 1) axes.emplace_back(t.stride(a), t.dim(a));
  }
  std::sort(axes.begin(), axes.end());
  int64_t covered = 1;
  for (const auto& [stride, size] : axes) {
    if (stride < covered) return false;
    covered = stride * size;
  }
  return true;
}

}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& params) {
  Device& device = check_attention_inputs(q, k, v, params);
  Tensor out = Tensor::empty({q.dim(0), q.dim(1), q.dim(2), v.dim(3)}, q.dtype(), device);
  device.kernels().attention(last_axis_contiguous(q), last_axis_contiguous(k), last_axis_contiguous(v), params, out);
  return out;
}

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& params, Tensor& out) {
  Device& device = check_attention_inputs(q, k, v, params);
  check_defined("attention", "out", out);
  const Shape want{q.dim(0), q.dim(1), q.dim(2), v.dim(3)};
  RBEE_CHECK(out.shape() == want, "attention: out must be {}, got {}", want.to_string(), out.shape().to_string());
  RBEE_CHECK(out.dtype() == q.dtype(), "attention: out is {} but q is {}", dtype_name(out.dtype()),
             dtype_name(q.dtype()));
  RBEE_CHECK(&out.device() == &device, "attention: out is on {} but q on {}", out.device().id(), device.id());
  RBEE_CHECK(out.stride(3) == 1, "attention: out's last axis must be contiguous, got strides {}",
             out.strides().to_string());
  for (int a = 0; a < 4; ++a) {
    RBEE_CHECK(out.stride(a) >= 0, "attention: out's strides must be non-negative, got {}", out.strides().to_string());
  }
  RBEE_CHECK(elements_distinct(out), "attention: out's elements overlap (strides {})", out.strides().to_string());
  for (const Tensor* in : {&q, &k, &v}) {
    RBEE_CHECK(in->buffer() != out.buffer(), "attention: out shares a buffer with an input");
  }
  if (out.numel() == 0) return;
  device.kernels().attention(last_axis_contiguous(q), last_axis_contiguous(k), last_axis_contiguous(v), params, out);
}

// ------------------------------------------------------------------------------------ swiglu, add_rms_norm
Tensor swiglu(const Tensor& gate, const Tensor& up) {
  check_defined("swiglu", "gate", gate);
  check_defined("swiglu", "up", up);
  Device& device = common_device("swiglu", {&gate, &up});
  check_same_dtype("swiglu", {{"gate", &gate}, {"up", &up}});
  RBEE_CHECK(gate.shape() == up.shape(), "swiglu: gate shape {} differs from up shape {}", gate.shape().to_string(),
             up.shape().to_string());
  check_supported("swiglu", device, OpKind::Swiglu, {gate.dtype(), up.dtype(), gate.dtype()});
  const Tensor g = gate.contiguous(), u = up.contiguous();
  Tensor out = Tensor::empty(gate.shape(), gate.dtype(), device);
  device.kernels().swiglu(g, u, out);
  return out;
}

Tensor geglu(const Tensor& x) {
  check_defined("geglu", "x", x);
  Device& device = x.device();
  RBEE_CHECK(x.rank() >= 1 && x.dim(-1) % 2 == 0, "geglu: x {} must have an even last dimension ([..., 2F])",
             x.shape().to_string());
  check_supported("geglu", device, OpKind::Geglu, {x.dtype(), x.dtype()});
  const int64_t f = x.dim(-1) / 2, rows = f == 0 ? 0 : x.numel() / (2 * f);
  Shape shape = x.shape();
  shape[shape.rank() - 1] = f;
  Tensor out = Tensor::empty(shape, x.dtype(), device);
  if (out.numel() == 0) return out;
  const Tensor xc = x.contiguous().view({rows, 2 * f});
  Tensor o2 = out.view({rows, f});
  device.kernels().geglu(xc, o2);
  return out;
}

std::pair<Tensor, Tensor> add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps) {
  check_defined("add_rms_norm", "x", x);
  check_defined("add_rms_norm", "residual", residual);
  check_defined("add_rms_norm", "weight", weight);
  Device& device = common_device("add_rms_norm", {&x, &residual, &weight});
  RBEE_CHECK(x.rank() >= 1, "add_rms_norm: x must have at least one dimension");
  check_same_dtype("add_rms_norm", {{"x", &x}, {"residual", &residual}});
  RBEE_CHECK(x.shape() == residual.shape(), "add_rms_norm: x shape {} differs from residual shape {}",
             x.shape().to_string(), residual.shape().to_string());
  check_eps("add_rms_norm", eps);
  check_supported("add_rms_norm", device, OpKind::AddRmsNorm, {x.dtype(), x.dtype()});
  Tensor w_storage;
  const Tensor* w = feature_param("add_rms_norm", "weight", weight, x, x.dim(-1), w_storage);
  const Tensor xc = x.contiguous(), rc = residual.contiguous();
  Tensor sum = Tensor::empty(x.shape(), x.dtype(), device);
  Tensor norm = Tensor::empty(x.shape(), x.dtype(), device);
  device.kernels().add_rms_norm(xc, rc, *w, eps, sum, norm);
  return {sum, norm};
}

}  // namespace rbee::ops
