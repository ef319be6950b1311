// Paged attention for decode steps with small GQA groups on the vector units (kernels/paged_decode_vec.cu;
// contract: PagedAttention in rbee/backend/op_table.def).
#pragma once

#include "rbee/backend/op_kinds.h"
#include "rbee/core/tensor.h"

namespace rbee::gpu {

class GpuDevice;

// paged_attention for F16 / BF16 caches with head size 64, 128 or 256, at most 4 query heads per kv head, and at
// most one query row per sequence on average (nq <= number of sequences: a decode step), 16-byte aligned caches.
// One block per (query token, kv head, split of the key range) reads that kv head's K and V rows once with 16-byte
// loads; splits (and paged.cu's merge) only past paged_split_min_ctx() positions. Returns false, having launched
// nothing, when it does not apply, in batch-invariant mode or with RBEE_ATTN_DECODE_VEC=0 (then the tensor-core
// or scalar kernels run).
bool paged_attention_decode_vec(GpuDevice& dev, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                const Tensor& seq_info, const Tensor& block_tables, const AttentionParams& params,
                                Tensor& out);

}  // namespace rbee::gpu
