// 16-bit convolutions as implicit GEMMs on the matrix tiles of backends/gpu/platform.h (kernels/conv_igemm.cu), the
// path of conv2d_fused (contract: Conv2dFused in rbee/backend/op_table.def) where the vendor Blas has no
// mixed-precision product (rocBLAS, no Blas), or first with RBEE_CONV_IGEMM=1. On an H100 it reached only 40-70 TFLOP/s
// on SD's convolutions (docs/perf-notes/sd-speed.md).
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
