// Unmasked 16-bit attention through the vendor library (dnn.h: cuDNN's fused flash attention on CUDA; none on ROCm
// or in the emulator): the first path of GpuKernels::attention (contract: Attention in rbee/backend/op_table.def).
// RBEE_ATTN_CUDNN=0 turns it off (rbee's flash kernel and the BLAS path of attention.cu run as before); unset or =1
// it takes every shape the library accepts (it measured faster on all of SD's: attention_dnn.cu).
#pragma once

#include "rbee/backend/op_kinds.h"
#include "rbee/core/tensor.h"

namespace rbee::gpu {

class GpuDevice;

// out = softmax(q k^T * scale) v for F16 / BF16 q [B, H, Tq, D], k and v [B, H, Tk, D] (as many kv heads as query
// heads) and out [B, H, Tq, D], every operand with a unit last stride and any other strides (q, k, v read in place
// from fused projections, out written as [B, Tq, H * D] when the caller's view says so). Returns false, having
// written nothing, when this path does not apply (a mask, grouped heads, Dv != D, D not a multiple of 8 or above
// 256, no library, RBEE_ATTN_CUDNN=0) or the library refuses it; library plans are made only outside a
// graph capture, and a shape first seen while capturing is left to rbee's kernels.
bool attention_dnn(GpuDevice& dev, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& params,
                   Tensor& out);

}  // namespace rbee::gpu
