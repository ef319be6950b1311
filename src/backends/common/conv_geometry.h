// The sizes and parameters of one convolution call (conv1d, conv2d, their transposes, im2col), read off the tensors
// the op front-end prepared: one definition for the CPU backend (backends/cpu/cpu_conv.cpp, cpu_conv_transpose.cpp)
// and the GPU kernels (backends/gpu/kernels/conv.cu), which pass it to kernels by value. 1-D convolutions are 2-D
// ones with a height of 1 (h = kh = ho = 1, no vertical stride, padding or dilation). Host code only.
#pragma once

#include <cstdint>

#include "rbee/backend/op_kinds.h"
#include "rbee/core/tensor.h"

namespace rbee::conv {

// NCHW sizes: x [n, cin, h, w]; out [n, cout, ho, wo]; kernel kh x kw. For a transposed convolution cin/cout
// are still the op's input/output channels (its weight is [cin, cout / groups, kh, kw]).
struct ConvGeometry {
  int64_t n, cin, h, w, cout, kh, kw, ho, wo;
  int64_t sh, sw, ph, pw, dh, dw, groups;
};

// x [N, Cin, H, W], w [*, *, KH, KW], out [N, Cout, Ho, Wo].
inline ConvGeometry geometry_2d(const Tensor& x, const Tensor& w, const Tensor& out, const Conv2dParams& p) {
  return {x.dim(0),   x.dim(1),   x.dim(2),   x.dim(3),   out.dim(1), w.dim(2),   w.dim(3),  out.dim(2),
          out.dim(3), p.stride_h, p.stride_w, p.pad_h,    p.pad_w,    p.dilation_h, p.dilation_w, p.groups};
}

// x [N, Cin, L], w [*, *, K], out [N, Cout, Lout].
inline ConvGeometry geometry_1d(const Tensor& x, const Tensor& w, const Tensor& out, const Conv1dParams& p) {
  return {x.dim(0), x.dim(1), 1, x.dim(2), out.dim(1), 1, w.dim(2), 1, out.dim(2),
          1,        p.stride, 0, p.padding, 1,         p.dilation, p.groups};
}

// im2col of x [N, C, H, W] with a kernel_h x kernel_w window: one group, cout = C, and the output size
// ho = (H + 2 pad_h - dilation_h (kernel_h - 1) - 1) / stride_h + 1 (likewise wo).
inline ConvGeometry geometry_im2col(const Tensor& x, int kernel_h, int kernel_w, const Conv2dParams& p) {
  const int64_t ho = (x.dim(2) + 2 * p.pad_h - (int64_t)p.dilation_h * (kernel_h - 1) - 1) / p.stride_h + 1;
  const int64_t wo = (x.dim(3) + 2 * p.pad_w - (int64_t)p.dilation_w * (kernel_w - 1) - 1) / p.stride_w + 1;
  return {x.dim(0),   x.dim(1),   x.dim(2), x.dim(3), x.dim(1),     kernel_h,     kernel_w, ho, wo,
          p.stride_h, p.stride_w, p.pad_h,  p.pad_w,  p.dilation_h, p.dilation_w, 1};
}

}  // namespace rbee::conv
