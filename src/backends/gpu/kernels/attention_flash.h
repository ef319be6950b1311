// Tensor-core flash attention over dense [B, H, T, D] operands (kernels/attention_flash.cu): the unmasked
// attention of Stable Diffusion's transformers (self-attention over latent pixels, cross-attention over 77 text
// tokens), on the same key-tile loop as the paged LLM attention (flash_tiles.cuh).
#pragma once

#include "rbee/backend/op_kinds.h"
#include "rbee/core/tensor.h"

namespace rbee::gpu {

class GpuDevice;

// out [B, Hq, Tq, D] (unit last stride, other strides any) = softmax(q k^T * scale) v for q [B, Hq, Tq, D],
// k [B, Hkv, Tk, D], v [B, Hkv, Tk, D] as GpuKernels::attention takes them (Attention in rbee/backend/op_table.def):
// s = scale q.k in f32, online softmax in f32, the probabilities rounded to the operand type before P.V, P.V summed in f32, the
// quotient rounded once. Head sizes up to 160 (tiles of 48, 64, 80, 128 or 160: rows padded with zeros).
// Returns false, having launched nothing, when this path does not apply: dtype not F16/BF16, a mask (causal,
// window, softcap), Dv != D, D not a multiple of 8 or above 160, fewer than 16 queries, strides or addresses not
// 16-byte aligned, too little shared memory, or RBEE_ATTN_FLASH=0 (the cuBLAS path of attention_gemm.cu, for A/B).
bool attention_flash(GpuDevice& dev, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& params,
                     Tensor& out);

}  // namespace rbee::gpu
