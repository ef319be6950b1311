// The front-end ops::paged_attention with the caller's word on its query rows (rbee/ops.h has the plain form,
// which zero-fills rows of no sequence).
#pragma once

#include "rbee/ops.h"

namespace rbee::ops {

// kAllInSequences: the sequences' q ranges cover every row of q (an LLM step's batch: each row is a token of one
// of its sequences), so the result is not zero-filled before the kernel writes it (one launch less per layer on
// GPUs; RBEE_ATTN_ZERO_FILL=1 fills anyway, for A/B runs). Checked when seq_info is in host memory; with device
// seq_info a row outside every sequence would hold unspecified values. kMayHaveGaps: the plain form's contract.
enum class PagedRows { kMayHaveGaps, kAllInSequences };
Tensor paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& seq_info,
                       const Tensor& block_tables, const AttentionParams& params, PagedRows rows);

}  // namespace rbee::ops
