// 16-bit convolutions as one vendor GEMM with the epilogue inside it (blas.h gemm_conv_epilogue: cuBLASLt on CUDA,
// none on ROCm): a path of conv2d_fused (contract: Conv2dFused in rbee/backend/op_table.def) for F16 / BF16, groups
// 1, no SiLU, where the library takes the shape. 1x1 kernels of unit stride read x in place; other kernels read
// im2col columns of all images built first. Against im2col + GEMM into f32 sums + an epilogue kernel it saves the
// f32 sums' round trip, the epilogue launch and, on small maps, the split-K slices (the library splits K itself,
// reducing in f32 in its workspace). RBEE_CONV_FUSED_GEMM=0 turns it off (the paths before it), =1x1 takes 1x1
// kernels only, unset / other: every shape it takes.
#pragma once

#include "rbee/backend/op_kinds.h"
#include "rbee/core/tensor.h"

namespace rbee::gpu {

class GpuDevice;

// out = conv2d(x, w) + bias + residual for F16 / BF16, groups 1, silu false, summed in f32 and rounded once by the
// library. Shapes: x [N, Cin, H, W], w [Cout, Cin, KH, KW], bias [Cout] or [N, Cout], residual / out
// [N, Cout, Ho, Wo], all contiguous. One library call over all images, or one per image where the library refuses
// the batched form. Returns false, having written nothing to out, when this path does not apply or the library
// refuses the shape (then the caller's other paths run); inside a graph capture only shapes planned before.
bool conv2d_fused_gemm(GpuDevice& dev, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor* residual,
                       const Conv2dParams& p, bool silu, Tensor& out);

}  // namespace rbee::gpu
