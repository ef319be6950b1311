// The sizes and parameters of one CPU convolution call, read off the tensors the front-end prepared.
// 1-D convolutions are 2-D ones with a height of 1 (h = kh = ho = 1, no vertical stride, padding or dilation).
#pragma once

#include <cstdint>

#include "rbee/backend/op_kinds.h"
#include "rbee/core/tensor.h"

namespace rbee::cpu::conv {

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

}  // namespace rbee::cpu::conv
