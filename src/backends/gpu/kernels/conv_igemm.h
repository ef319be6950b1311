// 16-bit convolutions as implicit GEMMs on the matrix tiles of backends/gpu/platform.h (kernels/conv_igemm.cu),
// the fast path of conv2d_fused (contract: Conv2dFused in rbee/backend/op_table.def).
#pragma once

#include "rbee/backend/op_kinds.h"
#include "rbee/core/tensor.h"

namespace rbee::gpu {

class GpuDevice;

// out = act(conv2d(x, w) + bias + residual) for F16 / BF16 with groups 1, no dilation, square 1x1 or 3x3 kernels
// and Cin * KH * KW a multiple of 8, summed in f32 on the matrix tiles and rounded once. Returns false, having
// launched nothing, when this path does not apply (then conv.cu's im2col + GEMM path runs).
bool conv2d_igemm(GpuDevice& dev, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor* residual,
                  const Conv2dParams& p, bool silu, Tensor& out);

}  // namespace rbee::gpu
