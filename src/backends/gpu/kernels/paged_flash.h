// Tensor-core paged attention for 16-bit caches (kernels/paged_flash.cuh; contract: PagedAttention in
// rbee/backend/op_table.def).
#pragma once

#include <cstdint>

#include "rbee/backend/op_kinds.h"
#include "rbee/core/tensor.h"

namespace rbee::gpu {

class GpuDevice;
struct PagedMergeParams;

// paged_attention for F16 / BF16 caches with head size 64, 128 or 256 on the 16-bit matrix tiles of
// backends/gpu/platform.h: prefill tiles (query rows split over warps) when sequences have more than one row
// tile of queries on average, decode tiles (key ranges split over warps) otherwise; split-K with the merge of
// paged.cu when there are too few tiles to fill the GPU. Returns false, having launched nothing, when this path
// does not apply (other dtypes or head sizes, misaligned caches, no configuration fits the device's shared
// memory); then the scalar kernel of paged.cu runs.
bool paged_attention_flash(GpuDevice& dev, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                           const Tensor& seq_info, const Tensor& block_tables, const AttentionParams& params,
                           Tensor& out);

// Key ranges (block table capacity) of at most this many positions are not split over blocks: 256, or
// RBEE_ATTN_SPLIT_MIN_CTX (0: split by the occupancy rule alone). Shared by paged_flash.cu and paged_decode_vec.cu.
int64_t paged_split_min_ctx();

// Combines split-K partials into out (paged.cu; PagedMergeParams in paged_common.cuh).
void launch_paged_merge(GpuDevice& dev, const PagedMergeParams& p);

}  // namespace rbee::gpu
