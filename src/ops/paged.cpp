// Front-ends of the paged KV cache ops. Index tensors are validated here when they live in host memory
// (the runtime builds them on the host); device backends clamp defensively.
#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "ops/op_checks.h"
#include "rbee/ops.h"
#include "rbee/backend/paged_rows.h"
#include "rbee/core/env.h"

namespace rbee::ops {

using detail::check_defined;
using detail::check_supported;
using detail::common_device;

namespace {
void check_cache_pair(const char* op, const Tensor& k_cache, const Tensor& v_cache) {
  RBEE_CHECK(k_cache.rank() == 4, "{}: k_cache must be [num_blocks, block_size, Hkv, D], got {}", op,
             k_cache.shape().to_string());
  RBEE_CHECK(v_cache.shape() == k_cache.shape(), "{}: v_cache {} differs from k_cache {}", op,
             v_cache.shape().to_string(), k_cache.shape().to_string());
  RBEE_CHECK(v_cache.dtype() == k_cache.dtype(), "{}: v_cache is {} but k_cache is {}", op,
             dtype_name(v_cache.dtype()), dtype_name(k_cache.dtype()));
  RBEE_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "{}: caches must be contiguous", op);
}
}  // namespace

void kv_cache_write(const Tensor& k, const Tensor& v, const Tensor& slots, const Tensor& k_cache,
                    const Tensor& v_cache) {
  const char* op = "kv_cache_write";
  for (const auto* t : {&k, &v, &slots, &k_cache, &v_cache}) check_defined(op, "tensor", *t);
  Device& device = common_device(op, {&k, &v, &slots, &k_cache, &v_cache});
  check_cache_pair(op, k_cache, v_cache);
  RBEE_CHECK(k.rank() == 3 && v.shape() == k.shape(), "{}: k and v must both be [N, Hkv, D], got {} and {}", op,
             k.shape().to_string(), v.shape().to_string());
  RBEE_CHECK(k.dim(1) == k_cache.dim(2) && k.dim(2) == k_cache.dim(3), "{}: rows {} do not fit cache {}", op,
             k.shape().to_string(), k_cache.shape().to_string());
  RBEE_CHECK(k.stride(2) == 1 && v.stride(2) == 1, "{}: k and v need a contiguous last axis", op);
  RBEE_CHECK(slots.dtype() == DType::I32 && slots.rank() == 1 && slots.dim(0) == k.dim(0) && slots.is_contiguous(),
             "{}: slots must be contiguous i32 [{}], got {}", op, k.dim(0), slots.to_string());
  check_supported(op, device, OpKind::KvCacheWrite, {k.dtype(), k_cache.dtype()});
  RBEE_CHECK(v.dtype() == k.dtype(), "{}: v is {} but k is {}", op, dtype_name(v.dtype()), dtype_name(k.dtype()));
  if (device.host_accessible()) {
    const int64_t capacity = k_cache.dim(0) * k_cache.dim(1);
    const int32_t* s = static_cast<const int32_t*>(slots.data());
    for (int64_t i = 0; i < slots.dim(0); ++i) {
      RBEE_CHECK(s[i] >= 0 && s[i] < capacity, "{}: slot {} at position {} is outside the cache's {} slots", op,
                 s[i], i, capacity);
    }
  }
  Tensor kc = k_cache, vc = v_cache;
  device.kernels().kv_cache_write(k, v, slots, kc, vc);
}

Tensor paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& seq_info,
                       const Tensor& block_tables, const AttentionParams& params) {
  return paged_attention(q, k_cache, v_cache, seq_info, block_tables, params, PagedRows::kMayHaveGaps);
}

Tensor paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& seq_info,
                       const Tensor& block_tables, const AttentionParams& params, PagedRows rows) {
  const char* op = "paged_attention";
  for (const auto* t : {&q, &k_cache, &v_cache, &seq_info, &block_tables}) check_defined(op, "tensor", *t);
  Device& device = common_device(op, {&q, &k_cache, &v_cache, &seq_info, &block_tables});
  check_cache_pair(op, k_cache, v_cache);
  RBEE_CHECK(q.rank() == 3 && q.stride(2) == 1, "{}: q must be [Nq, Hq, D] with a contiguous last axis, got {}", op,
             q.to_string());
  const int64_t hq = q.dim(1), hkv = k_cache.dim(2), d = k_cache.dim(3), block_size = k_cache.dim(1);
  RBEE_CHECK(q.dim(2) == d, "{}: q head size {} differs from the cache's {}", op, q.dim(2), d);
  RBEE_CHECK(hkv > 0 && hq % hkv == 0, "{}: {} query heads are not a multiple of {} kv heads", op, hq, hkv);
  RBEE_CHECK(seq_info.dtype() == DType::I32 && seq_info.rank() == 2 && seq_info.dim(1) == 3 &&
                 seq_info.is_contiguous(),
             "{}: seq_info must be contiguous i32 [B, 3], got {}", op, seq_info.to_string());
  RBEE_CHECK(block_tables.dtype() == DType::I32 && block_tables.rank() == 2 &&
                 block_tables.dim(0) == seq_info.dim(0) && block_tables.is_contiguous(),
             "{}: block_tables must be contiguous i32 [{}, max_blocks], got {}", op, seq_info.dim(0),
             block_tables.to_string());
  RBEE_CHECK(params.window >= 0 && params.softcap >= 0, "{}: window and softcap must be >= 0", op);
  check_supported(op, device, OpKind::PagedAttention, {q.dtype(), k_cache.dtype()});
  if (device.host_accessible()) {
    const int32_t* info = static_cast<const int32_t*>(seq_info.data());
    const int32_t* tables = static_cast<const int32_t*>(block_tables.data());
    const int64_t max_blocks = block_tables.dim(1);
    std::vector<char> covered(rows == PagedRows::kAllInSequences ? (size_t)q.dim(0) : 0, 0);
    for (int64_t b = 0; b < seq_info.dim(0); ++b) {
      const int64_t start = info[b * 3], len = info[b * 3 + 1], ctx = info[b * 3 + 2];
      RBEE_CHECK(start >= 0 && len >= 0 && start + len <= q.dim(0), "{}: sequence {} takes q rows [{}, {}) of {}",
                 op, b, start, start + len, q.dim(0));
      RBEE_CHECK(len <= ctx && ctx <= max_blocks * block_size,
                 "{}: sequence {} has {} new tokens and context {} (table holds {} positions)", op, b, len, ctx,
                 max_blocks * block_size);
      for (int64_t j = 0; j < (ctx + block_size - 1) / block_size; ++j) {
        const int32_t blk = tables[b * max_blocks + j];
        RBEE_CHECK(blk >= 0 && blk < k_cache.dim(0), "{}: sequence {} block {} is {}, outside [0, {})", op, b, j, blk,
                   k_cache.dim(0));
      }
      if (!covered.empty()) std::fill(covered.begin() + start, covered.begin() + start + len, 1);
    }
    for (size_t r = 0; r < covered.size(); ++r) {
      RBEE_CHECK(covered[r], "{}: q row {} belongs to no sequence, but the caller said every row does "
                 "(PagedRows::kAllInSequences)", op, r);
    }
  }
  // Rows of no sequence are zero unless the caller promised there are none (the kernels write every row of every
  // sequence, and leave the others untouched: op_table.def).
  static const bool always_fill = env::flag_or("RBEE_ATTN_ZERO_FILL", false);
  Tensor out = rows == PagedRows::kAllInSequences && !always_fill ? Tensor::empty({q.dim(0), hq, d}, DType::F32, device)
                                                                  : zeros({q.dim(0), hq, d}, DType::F32, device);
  device.kernels().paged_attention(q, k_cache, v_cache, seq_info, block_tables, params, out);
  return out;
}

}  // namespace rbee::ops
