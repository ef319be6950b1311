// Front-ends of the convolution family: conv1d/2d, conv_transpose1d/2d, im2col, avg/max pool2d, upsample.
//
// Shapes and output sizes follow PyTorch (torch.nn.functional), NCHW / NCL:
//   conv:            out = floor((in + 2 pad - dilation (k - 1) - 1) / stride) + 1
//   transposed conv: out = (in - 1) stride - 2 pad + dilation (k - 1) + output_padding + 1
//   pool:            out = floor((in + 2 pad - k) / stride) + 1          (no ceil_mode, no dilation)
// Every size and parameter is checked here so the kernels can assume the preconditions of the op table (op_table.def).
#include "ops/op_checks.h"
#include "rbee/ops.h"

namespace rbee::ops {

using detail::check_defined;
using detail::check_dtype_of_x;
using detail::fused_residual;
using detail::check_supported;
using detail::common_device;

namespace {

void check_at_least(std::string_view op, std::string_view field, int64_t value, int64_t min) {
  RBEE_CHECK(value >= min, "{}: {} must be >= {}, got {}", op, field, min, value);
}

// One spatial axis of a convolution: the parameters and the names the caller knows them by.
struct Axis {
  std::string_view name;  // "height", "width", "length"
  int stride, pad, dilation, output_pad;
  std::string_view stride_field, pad_field, dilation_field, output_pad_field;
};

void check_axis_params(std::string_view op, const Axis& a, bool transposed) {
  check_at_least(op, a.stride_field, a.stride, 1);
  check_at_least(op, a.dilation_field, a.dilation, 1);
  check_at_least(op, a.pad_field, a.pad, 0);
  if (!transposed) {
    RBEE_CHECK(a.output_pad == 0, "{}: {} is {} but output padding only applies to transposed convolutions", op,
               a.output_pad_field, a.output_pad);
    return;
  }
  check_at_least(op, a.output_pad_field, a.output_pad, 0);
  RBEE_CHECK(a.output_pad < a.stride || a.output_pad < a.dilation,
             "{}: {} is {} but must be smaller than the stride ({}) or the dilation ({})", op, a.output_pad_field,
             a.output_pad, a.stride, a.dilation);
}

int64_t conv_out_len(std::string_view op, const Axis& a, int64_t in, int64_t k) {
  const int64_t extent = (int64_t)a.dilation * (k - 1) + 1;
  const int64_t padded = in + 2 * (int64_t)a.pad;
  RBEE_CHECK(extent <= padded,
             "{}: the kernel's {} extent {} (size {}, dilation {}) is larger than the padded input {} ({} + 2 * {})",
             op, a.name, extent, k, a.dilation, padded, in, a.pad);
  return (padded - extent) / a.stride + 1;
}

int64_t conv_transpose_out_len(std::string_view op, const Axis& a, int64_t in, int64_t k) {
  const int64_t out =
      (in - 1) * a.stride - 2 * (int64_t)a.pad + (int64_t)a.dilation * (k - 1) + a.output_pad + 1;
  RBEE_CHECK(out >= 1,
             "{}: output {} would be {} (input {}, kernel {}, stride {}, padding {}, dilation {}, output padding {})",
             op, a.name, out, in, k, a.stride, a.pad, a.dilation, a.output_pad);
  return out;
}

Axis axis_h(const Conv2dParams& p) {
  return {"height", p.stride_h, p.pad_h, p.dilation_h, p.output_pad_h, "stride_h", "pad_h", "dilation_h",
          "output_pad_h"};
}
Axis axis_w(const Conv2dParams& p) {
  return {"width", p.stride_w, p.pad_w, p.dilation_w, p.output_pad_w, "stride_w", "pad_w", "dilation_w",
          "output_pad_w"};
}
Axis axis_l(const Conv1dParams& p) {
  return {"length", p.stride, p.padding, p.dilation, p.output_padding, "stride", "padding", "dilation",
          "output_padding"};
}

// Checks x, w and groups of a (transposed) convolution with `spatial` spatial axes; returns their device.
// conv: w [Cout, Cin / groups, k...]; transposed: w [Cin, Cout / groups, k...].
Device& check_conv_tensors(std::string_view op, OpKind kind, const Tensor& x, const Tensor& w, int spatial,
                           int groups, bool transposed) {
  check_defined(op, "x", x);
  check_defined(op, "w", w);
  Device& device = common_device(op, {&x, &w});
  const std::string_view x_layout = spatial == 2 ? "[N, Cin, H, W]" : "[N, Cin, L]";
  const std::string_view w_layout = transposed ? (spatial == 2 ? "[Cin, Cout/groups, KH, KW]" : "[Cin, Cout/groups, K]")
                                               : (spatial == 2 ? "[Cout, Cin/groups, KH, KW]" : "[Cout, Cin/groups, K]");
  RBEE_CHECK(x.rank() == spatial + 2, "{}: x must be {}-D {}, got shape {}", op, spatial + 2, x_layout,
             x.shape().to_string());
  RBEE_CHECK(w.rank() == spatial + 2, "{}: w must be {}-D {}, got shape {}", op, spatial + 2, w_layout,
             w.shape().to_string());
  RBEE_CHECK(x.dtype() == w.dtype(), "{}: x is {} but w is {}", op, dtype_name(x.dtype()), dtype_name(w.dtype()));
  check_supported(op, device, kind, {x.dtype(), w.dtype(), x.dtype()});
  for (int d = 1; d < x.rank(); ++d) {
    RBEE_CHECK(x.dim(d) >= 1, "{}: x has an empty channel or spatial dimension (shape {})", op, x.shape().to_string());
  }
  for (int d = 0; d < w.rank(); ++d) {
    RBEE_CHECK(w.dim(d) >= 1, "{}: w has an empty dimension (shape {})", op, w.shape().to_string());
  }
  check_at_least(op, "groups", groups, 1);
  const int64_t cin = x.dim(1);
  RBEE_CHECK(cin % groups == 0, "{}: x has {} input channels, not divisible by groups = {}", op, cin, groups);
  if (transposed) {
    RBEE_CHECK(w.dim(0) == cin, "{}: w.dim(0) is {} but x has {} input channels (w is {})", op, w.dim(0), cin,
               w_layout);
  } else {
    RBEE_CHECK(w.dim(0) % groups == 0, "{}: w has {} output channels (dim 0), not divisible by groups = {}", op,
               w.dim(0), groups);
    RBEE_CHECK(w.dim(1) == cin / groups,
               "{}: w.dim(1) is {} but x has {} input channels / {} groups = {} per group (w is {})", op, w.dim(1),
               cin, groups, cin / groups, w_layout);
  }
  return device;
}

// x of an image op (im2col, pooling, upsampling): defined, [N, C, H, W] with C, H, W >= 1, a dtype `kind` takes
// on x's device.
void check_image(std::string_view op, OpKind kind, const Tensor& x) {
  check_defined(op, "x", x);
  RBEE_CHECK(x.rank() == 4, "{}: x must be 4-D [N, C, H, W], got shape {}", op, x.shape().to_string());
  check_supported(op, x.device(), kind, {x.dtype(), x.dtype()});
  for (int d = 1; d < 4; ++d) {
    RBEE_CHECK(x.dim(d) >= 1, "{}: x has an empty channel or spatial dimension (shape {})", op, x.shape().to_string());
  }
}

// Establishes the kernels' precondition (contiguous inputs) and runs `launch` unless the output is empty.
template <class Launch>
Tensor run_contiguous(Tensor out, const Tensor& x, const Tensor* w, Launch&& launch) {
  if (out.numel() == 0) return out;
  const Tensor xc = x.contiguous();
  const Tensor wc = w ? w->contiguous() : Tensor();
  launch(xc, wc, out);
  return out;
}

// The fused convolutions' bias: undefined, [Cout] or [N, Cout] in x's dtype; returned contiguous (undefined stays so).
Tensor fused_bias(std::string_view op, const Tensor& bias, const Tensor& x, int64_t n, int64_t cout) {
  if (!bias.defined()) return Tensor();
  check_dtype_of_x(op, "bias", bias, x);
  const bool per_channel = bias.rank() == 1 && bias.dim(0) == cout;
  const bool per_image = bias.rank() == 2 && bias.dim(0) == n && bias.dim(1) == cout;
  RBEE_CHECK(per_channel || per_image, "{}: bias must be [Cout] = [{}] or [N, Cout] = [{}, {}], got shape {}", op, cout,
             n, cout, bias.shape().to_string());
  return bias.contiguous();
}

}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& w, const Conv1dParams& p) {
  constexpr std::string_view op = "conv1d";
  Device& device = check_conv_tensors(op, OpKind::Conv1d, x, w, 1, p.groups, false);
  const Axis al = axis_l(p);
  check_axis_params(op, al, false);
  const int64_t lo = conv_out_len(op, al, x.dim(2), w.dim(2));
  return run_contiguous(Tensor::empty({x.dim(0), w.dim(0), lo}, x.dtype(), device), x, &w,
                        [&](const Tensor& xc, const Tensor& wc, Tensor& out) { device.kernels().conv1d(xc, wc, p, out); });
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  constexpr std::string_view op = "conv2d";
  Device& device = check_conv_tensors(op, OpKind::Conv2d, x, w, 2, p.groups, false);
  const Axis ah = axis_h(p), aw = axis_w(p);
  check_axis_params(op, ah, false);
  check_axis_params(op, aw, false);
  const int64_t ho = conv_out_len(op, ah, x.dim(2), w.dim(2));
  const int64_t wo = conv_out_len(op, aw, x.dim(3), w.dim(3));
  return run_contiguous(Tensor::empty({x.dim(0), w.dim(0), ho, wo}, x.dtype(), device), x, &w,
                        [&](const Tensor& xc, const Tensor& wc, Tensor& out) { device.kernels().conv2d(xc, wc, p, out); });
}

Tensor conv2d_fused(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                    const Conv2dParams& p, bool silu) {
  constexpr std::string_view op = "conv2d_fused";
  Device& device = check_conv_tensors(op, OpKind::Conv2dFused, x, w, 2, p.groups, false);
  common_device(op, {&x, &bias, &residual});
  const Axis ah = axis_h(p), aw = axis_w(p);
  check_axis_params(op, ah, false);
  check_axis_params(op, aw, false);
  const int64_t n = x.dim(0), cout = w.dim(0);
  const Shape out_shape{n, cout, conv_out_len(op, ah, x.dim(2), w.dim(2)), conv_out_len(op, aw, x.dim(3), w.dim(3))};
  const Tensor bc = fused_bias(op, bias, x, n, cout);
  const Tensor rc = fused_residual(op, residual, x, out_shape);
  return run_contiguous(Tensor::empty(out_shape, x.dtype(), device), x, &w,
                        [&](const Tensor& xc, const Tensor& wc, Tensor& out) {
                          device.kernels().conv2d_fused(xc, wc, bc.defined() ? &bc : nullptr,
                                                        rc.defined() ? &rc : nullptr, p, silu, out);
                        });
}

Tensor conv2d_fused_nhwc(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                         const Conv2dParams& p, bool silu) {
  constexpr std::string_view op = "conv2d_fused_nhwc";
  check_defined(op, "x", x);
  check_defined(op, "w", w);
  Device& device = common_device(op, {&x, &w, &bias, &residual});
  RBEE_CHECK(x.rank() == 4, "{}: x must be 4-D [N, H, W, Cin], got shape {}", op, x.shape().to_string());
  RBEE_CHECK(w.rank() == 4, "{}: w must be 4-D [Cout, KH, KW, Cin], got shape {}", op, w.shape().to_string());
  RBEE_CHECK(x.dtype() == w.dtype(), "{}: x is {} but w is {}", op, dtype_name(x.dtype()), dtype_name(w.dtype()));
  check_supported(op, device, OpKind::Conv2dFusedNhwc, {x.dtype(), w.dtype(), x.dtype()});
  for (int d = 1; d < 4; ++d)
    RBEE_CHECK(x.dim(d) >= 1, "{}: x has an empty channel or spatial dimension (shape {})", op, x.shape().to_string());
  for (int d = 0; d < 4; ++d)
    RBEE_CHECK(w.dim(d) >= 1, "{}: w has an empty dimension (shape {})", op, w.shape().to_string());
  RBEE_CHECK(p.groups == 1, "{}: groups must be 1, got {}", op, p.groups);
  RBEE_CHECK(w.dim(3) == x.dim(3), "{}: w.dim(3) is {} but x has {} input channels (w is [Cout, KH, KW, Cin])", op,
             w.dim(3), x.dim(3));
  const Axis ah = axis_h(p), aw = axis_w(p);
  check_axis_params(op, ah, false);
  check_axis_params(op, aw, false);
  const int64_t n = x.dim(0), cout = w.dim(0);
  const Shape out_shape{n, conv_out_len(op, ah, x.dim(1), w.dim(1)), conv_out_len(op, aw, x.dim(2), w.dim(2)), cout};
  const Tensor bc = fused_bias(op, bias, x, n, cout);
  const Tensor rc = fused_residual(op, residual, x, out_shape);
  return run_contiguous(Tensor::empty(out_shape, x.dtype(), device), x, &w,
                        [&](const Tensor& xc, const Tensor& wc, Tensor& out) {
                          device.kernels().conv2d_fused_nhwc(xc, wc, bc.defined() ? &bc : nullptr,
                                                             rc.defined() ? &rc : nullptr, p, silu, out);
                        });
}

Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Conv1dParams& p) {
  constexpr std::string_view op = "conv_transpose1d";
  Device& device = check_conv_tensors(op, OpKind::ConvTranspose1d, x, w, 1, p.groups, true);
  const Axis al = axis_l(p);
  check_axis_params(op, al, true);
  const int64_t lo = conv_transpose_out_len(op, al, x.dim(2), w.dim(2));
  return run_contiguous(Tensor::empty({x.dim(0), w.dim(1) * p.groups, lo}, x.dtype(), device), x, &w,
                        [&](const Tensor& xc, const Tensor& wc, Tensor& out) {
                          device.kernels().conv_transpose1d(xc, wc, p, out);
                        });
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  constexpr std::string_view op = "conv_transpose2d";
  Device& device = check_conv_tensors(op, OpKind::ConvTranspose2d, x, w, 2, p.groups, true);
  const Axis ah = axis_h(p), aw = axis_w(p);
  check_axis_params(op, ah, true);
  check_axis_params(op, aw, true);
  const int64_t ho = conv_transpose_out_len(op, ah, x.dim(2), w.dim(2));
  const int64_t wo = conv_transpose_out_len(op, aw, x.dim(3), w.dim(3));
  return run_contiguous(Tensor::empty({x.dim(0), w.dim(1) * p.groups, ho, wo}, x.dtype(), device), x, &w,
                        [&](const Tensor& xc, const Tensor& wc, Tensor& out) {
                          device.kernels().conv_transpose2d(xc, wc, p, out);
                        });
}

Tensor im2col(const Tensor& x, int kernel_h, int kernel_w, const Conv2dParams& p) {
  constexpr std::string_view op = "im2col";
  check_image(op, OpKind::Im2col, x);
  check_at_least(op, "kernel_h", kernel_h, 1);
  check_at_least(op, "kernel_w", kernel_w, 1);
  RBEE_CHECK(p.groups == 1, "{}: groups must be 1 (columns cover all channels), got {}", op, p.groups);
  const Axis ah = axis_h(p), aw = axis_w(p);
  check_axis_params(op, ah, false);
  check_axis_params(op, aw, false);
  const int64_t ho = conv_out_len(op, ah, x.dim(2), kernel_h);
  const int64_t wo = conv_out_len(op, aw, x.dim(3), kernel_w);
  Device& device = x.device();
  return run_contiguous(Tensor::empty({x.dim(0), ho * wo, x.dim(1) * kernel_h * kernel_w}, x.dtype(), device), x,
                        nullptr, [&](const Tensor& xc, const Tensor&, Tensor& out) {
                          device.kernels().im2col(xc, kernel_h, kernel_w, p, out);
                        });
}

namespace {

Tensor pool2d(std::string_view op, PoolOp kind, const Tensor& x, const Pool2dParams& p) {
  check_image(op, OpKind::Pool2d, x);
  check_at_least(op, "kernel_h", p.kernel_h, 1);
  check_at_least(op, "kernel_w", p.kernel_w, 1);
  check_at_least(op, "stride_h", p.stride_h, 1);
  check_at_least(op, "stride_w", p.stride_w, 1);
  check_at_least(op, "pad_h", p.pad_h, 0);
  check_at_least(op, "pad_w", p.pad_w, 0);
  // PyTorch's rule: a window may not lie mostly in the padding.
  RBEE_CHECK(p.pad_h <= p.kernel_h / 2, "{}: pad_h {} must be at most half of kernel_h {}", op, p.pad_h, p.kernel_h);
  RBEE_CHECK(p.pad_w <= p.kernel_w / 2, "{}: pad_w {} must be at most half of kernel_w {}", op, p.pad_w, p.kernel_w);
  const int64_t padded_h = x.dim(2) + 2 * (int64_t)p.pad_h, padded_w = x.dim(3) + 2 * (int64_t)p.pad_w;
  RBEE_CHECK(p.kernel_h <= padded_h, "{}: kernel_h {} is larger than the padded input height {}", op, p.kernel_h,
             padded_h);
  RBEE_CHECK(p.kernel_w <= padded_w, "{}: kernel_w {} is larger than the padded input width {}", op, p.kernel_w,
             padded_w);
  const int64_t ho = (padded_h - p.kernel_h) / p.stride_h + 1, wo = (padded_w - p.kernel_w) / p.stride_w + 1;
  Device& device = x.device();
  return run_contiguous(Tensor::empty({x.dim(0), x.dim(1), ho, wo}, x.dtype(), device), x, nullptr,
                        [&](const Tensor& xc, const Tensor&, Tensor& out) { device.kernels().pool2d(kind, xc, p, out); });
}

}  // namespace

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) { return pool2d("avg_pool2d", PoolOp::Avg, x, p); }
Tensor max_pool2d(const Tensor& x, const Pool2dParams& p) { return pool2d("max_pool2d", PoolOp::Max, x, p); }

Tensor upsample_nearest2d(const Tensor& x, int64_t out_h, int64_t out_w) {
  constexpr std::string_view op = "upsample_nearest2d";
  check_image(op, OpKind::UpsampleNearest2d, x);
  check_at_least(op, "out_h", out_h, 1);
  check_at_least(op, "out_w", out_w, 1);
  Device& device = x.device();
  return run_contiguous(Tensor::empty({x.dim(0), x.dim(1), out_h, out_w}, x.dtype(), device), x, nullptr,
                        [&](const Tensor& xc, const Tensor&, Tensor& out) {
                          device.kernels().upsample_nearest2d(xc, out);
                        });
}

}  // namespace rbee::ops
