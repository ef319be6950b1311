// Attention for long unmasked sequences on the vendor BLAS (kernels/attention_gemm.cu).
#pragma once

#include "rbee/backend/op_kinds.h"
#include "rbee/core/tensor.h"

namespace rbee::gpu {

class GpuDevice;

// out [B, Hq, Tq, Dv] (unit last stride, other strides any) = softmax(q k^T * scale) v for q [B, Hq, Tq, D],
// k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv] as GpuKernels::attention takes them. Returns false, having written nothing or a part of out,
// when this path does not apply (then the flash kernel computes every output): inputs not F16/BF16, a mask
// (causal, window, softcap), short sequences, rows without unit stride, or a Blas without gemm_scaled.
bool attention_gemm(GpuDevice& dev, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& params,
                    Tensor& out);

}  // namespace rbee::gpu
