// Host side of the tensor-core paged attention (kernels in paged_flash.cuh): which configuration, how many
// splits of the key range, the launch and the split merge. Every choice depends on shapes only (and on
// batch-invariant mode, which fixes them for every launch).
#include "backends/gpu/kernels/paged_flash.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "backends/common/batch_invariant.h"
#include "backends/gpu/kernels/paged_flash_configs.cuh"
#include "rbee/core/env.h"

namespace rbee::gpu {

FlashShape flash_shape(FlashConfig config, int d) {
  FlashShape s{0, 0, 0, 0};
  visit_flash_config(config, d, [&](auto cfg_tag) {
    using Cfg = decltype(cfg_tag);
    s = FlashShape{Cfg::kRows, Cfg::BN, Cfg::kWarps, Cfg::kSmemBytes};
  });
  return s;
}

// Key ranges up to this many positions take one split (RBEE_ATTN_SPLIT_MIN_CTX=N overrides; 0: split every
// range by the occupancy rule alone, as before).
int64_t paged_split_min_ctx() {
  static const int64_t v = env::integer_or("RBEE_ATTN_SPLIT_MIN_CTX", 256, 0);
  return v;
}

bool paged_attention_flash(GpuDevice& dev, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                           const Tensor& seq_info, const Tensor& block_tables, const AttentionParams& params,
                           Tensor& out) {
  const DType dtype = k_cache.dtype();
  const int d = (int)k_cache.dim(3);
  if ((dtype != DType::F16 && dtype != DType::BF16) || (d != 64 && d != 128 && d != 256)) return false;
  if ((reinterpret_cast<uintptr_t>(k_cache.data()) | reinterpret_cast<uintptr_t>(v_cache.data())) % 16 != 0) {
    return false;
  }
  // RBEE_PAGED_FLASH=0 keeps 16-bit caches on the scalar kernel (A/B comparisons, bisecting).
  if (!env::flag_or("RBEE_PAGED_FLASH", true)) return false;

  const int nq = (int)q.dim(0), hq = (int)q.dim(1);
  const int n_seq = (int)seq_info.dim(0), max_blocks = (int)block_tables.dim(1);
  const int block_size = (int)k_cache.dim(1), hkv = (int)k_cache.dim(2);
  const int group = hq / hkv;
  // Query rows of a sequence on average: one 16-row tile or less is a decode shape.
  const int64_t rows_per_seq = (int64_t)((nq + n_seq - 1) / n_seq) * group;
  const size_t smem_limit = std::max(dev.props().shared_mem_per_block_optin, dev.props().shared_mem_per_block);
  FlashConfig config{};
  FlashShape shape{};
  bool found = false;
  const FlashConfig prefill_order[] = {rows_per_seq > 64 ? FlashConfig::kPrefillWide : FlashConfig::kPrefill,
                                       FlashConfig::kPrefill};
  const FlashConfig decode_order[] = {FlashConfig::kDecodeWide, FlashConfig::kDecode};
  // Batch-invariant mode: the decode configurations for every launch (the choice then depends on d and the
  // device only), no split of the key range, window starts aligned to the key tiles.
  const bool invariant = batch_invariant();
  for (const FlashConfig c : rows_per_seq <= 16 || invariant ? decode_order : prefill_order) {
    const FlashShape s = flash_shape(c, d);
    if (s.rows > 0 && (size_t)s.smem_bytes <= smem_limit) {
      config = c;
      shape = s;
      found = true;
      break;
    }
  }
  if (!found) return false;

  FlashParams p{};
  const int64_t tiles = fill_paged_launch(p, q, k_cache, v_cache, seq_info, block_tables, params, shape.rows);
  RBEE_CHECK_CODE(tiles <= INT32_MAX && (int64_t)hkv * p.n_head_chunks <= 65535, ErrorCode::Unsupported,
                  "paged_attention: launch too large ({} tiles, {} kv heads)", tiles, hkv);

  // Splits of the key range (capacity max_blocks * block_size: a shape): decode shapes aim at two blocks per
  // multiprocessor, prefill at one wave (the merge costs a pass over [n_splits, nq, hq, d] floats and a launch).
  // A key range of at most paged_split_min_ctx() positions is not split: a block reads it in a few tiles, less time
  // than the merge's launch (a decode step's first table-width bucket, 256 positions, e.g. every step of tg128).
  const bool split_decode = rows_per_seq <= 16;
  if (invariant) p.key_align = shape.bn;
  PagedPartials partials;
  plan_paged_splits(p, dev, (int64_t)max_blocks * block_size, shape.bn, tiles * hkv * p.n_head_chunks,
                    (split_decode ? 2 : 1) * (int64_t)dev.props().multiprocessors, paged_split_min_ctx(), invariant, out,
                    partials);

  const unsigned gx = (unsigned)tiles, gy = (unsigned)(hkv * p.n_head_chunks), gz = (unsigned)p.n_splits;
  if (dtype == DType::F16) launch_paged_flash_f16(dev, config, d, p, gx, gy, gz);
  else launch_paged_flash_bf16(dev, config, d, p, gx, gy, gz);
  merge_paged_splits(dev, p, d);
  return true;
}

}  // namespace rbee::gpu
