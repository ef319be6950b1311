// 16-bit convolutions through the vendor convolution library (dnn.h: cuDNN on CUDA; none on ROCm): the first path of
// conv2d_fused (contract: Conv2dFused in rbee/backend/op_table.def) for F16 / BF16 where it applies.
// RBEE_CONV_CUDNN=0 turns it off (the implicit GEMM / im2col + Blas paths of conv.cu run as before), =1 takes it for
// every shape the library accepts, unset / other: the shapes where it measured faster (conv_dnn.cu: k x k kernels of
// stride 1 over at least 4096 output positions per call). The library's own switches: src/backends/cuda/cudnn_dnn.cu.
#pragma once

#include "rbee/backend/op_kinds.h"
#include "rbee/core/tensor.h"

namespace rbee::gpu {

class GpuDevice;

// out = act(conv2d(x, w) + bias + residual) for F16 / BF16, groups 1, summed in f32 and rounded once by the library
// (SiLU only where the library fuses it: cuDNN's graph API). A [N, Cout] bias the library cannot broadcast is one
// library call per image. Returns
// false, having written nothing, when this path does not apply, is not chosen for the shape, or the library refuses
// it (then the caller's other paths run). Library plans are made only outside a graph capture.
// channels_last: the tensors of conv2d_fused_nhwc (x [N, H, W, Cin], w [Cout, KH, KW, Cin], out [N, Ho, Wo, Cout]).
bool conv2d_dnn(GpuDevice& dev, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor* residual,
                const Conv2dParams& p, bool silu, Tensor& out, bool channels_last = false);

}  // namespace rbee::gpu
