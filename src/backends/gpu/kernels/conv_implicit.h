// 16-bit convolutions as implicit GEMMs with a multi-stage asynchronous-copy pipeline (kernels/conv_implicit.cu):
// the first path of conv2d_fused (contract: Conv2dFused in rbee/backend/op_table.def) for F16 / BF16 where it
// applies. RBEE_CONV_IMPLICIT=0 turns it off (conv.cu's im2col + Blas path, or conv_igemm.cu, then runs),
// =1 takes it for every shape it supports, unset / other: the shapes where it measured faster (conv_implicit.cu:
// 3x3 convolutions of at most 128 channels over at least 2^18 positions, the SD VAE decoder's last level).
#pragma once

#include "rbee/backend/op_kinds.h"
#include "rbee/core/tensor.h"

namespace rbee::gpu {

class GpuDevice;

// out = act(conv2d(x, w) + bias + residual) for F16 / BF16 with groups 1, no dilation and Cin % 8 == 0, summed in
// f32 on the matrix tiles and rounded once. Returns false, having launched nothing, when this path does not apply
// or is not chosen for the shape (then the caller's other paths run).
bool conv2d_implicit(GpuDevice& dev, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor* residual,
                     const Conv2dParams& p, bool silu, Tensor& out);

}  // namespace rbee::gpu
