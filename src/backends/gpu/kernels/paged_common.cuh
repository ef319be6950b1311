// Shared by the paged attention kernels (paged.cu: scalar, any cache dtype; paged_flash.cuh: tensor cores):
// reading seq_info defensively, finding a block's query tile, the split-K partials (merged by paged.cu).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/paged_flash.h"
#include "rbee/backend/op_kinds.h"

namespace rbee::gpu {

// What the kernels need to read seq_info: contents are device data, never validated, so every value is clamped.
struct PagedSeqs {
  const int32_t* seq_info;  // [n_seq, 3] (q_start, q_len, ctx)
  int n_seq;
  int nq;        // rows of q
  int capacity;  // positions a block table can address: max_blocks * block_size
};

// Partial results of split-K: part_acc [n_splits, nq, hq, d] unnormalized sums, part_ml [n_splits, nq, hq, 2]
// (running max in natural-log units, sum of exp(s - max)). Every split writes every (token, head) of its
// sequences, (-inf, 0) when it saw no key.
struct PagedMergeParams {
  PagedSeqs seqs;
  int hq, d, n_splits;
  const float* part_acc;
  const float* part_ml;
  float* out;  // [nq, hq, d]
};

// The launch parameters both paged attention kernels read (paged.cu's scalar kernel extends them as PagedParams,
// paged_flash.cuh's tensor-core kernel as FlashParams), filled by fill_paged_launch: the call's tensors and sizes,
// and the tiling of query rows into blocks. Each kernel reads the caches through pointers of its element type.
struct PagedLaunch {
  PagedSeqs seqs;
  const float* q;  // [nq, hq, d], strides q_s0, q_s1 (elements), innermost contiguous
  int64_t q_s0, q_s1;
  const void* k_cache;    // [num_blocks, block_size, hkv, d] of the cache dtype
  const void* v_cache;
  const int32_t* tables;  // [n_seq, max_blocks]
  int max_blocks, num_blocks, block_size;
  int hq, hkv;
  float scale, softcap;
  int window;
  int group;          // hq / hkv: query heads per kv head
  int head_chunk;     // query heads of one group a block takes: min(group, the kernel's rows)
  int n_head_chunks;  // ceil(group / head_chunk)
  int tile_tokens;    // tokens per query tile: tile_tokens * head_chunk <= the kernel's rows
  int split_len, n_splits;  // the key range of one split; set by the caller
  int key_align;  // > 1: a sliding window's first key rounded down to a multiple of it (the kernel's key tile), so
                  // key tiles sit at the same positions for every query tile (batch-invariant mode); 0: not rounded
  float* out;       // [nq, hq, d] when n_splits == 1
  float* part_acc;  // [n_splits, nq, hq, d]
  float* part_ml;   // [n_splits, nq, hq, 2]: running max, running sum
};

// Fills p's inputs from the paged_attention call and tiles its query rows for a kernel whose blocks hold `rows`
// query rows; returns the number of query tiles to launch (at most one per token, and sum over sequences of
// ceil(q_len / tile_tokens) <= nq / tile_tokens + n_seq). Any tile_tokens >= 1 is correct; it is as many tokens as
// fit, but no more than the sequences have on average (decode: 1), since a block works on every row of its tile.
inline int64_t fill_paged_launch(PagedLaunch& p, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                 const Tensor& seq_info, const Tensor& block_tables, const AttentionParams& params,
                                 int rows) {
  const int nq = (int)q.dim(0), n_seq = (int)seq_info.dim(0);
  p.max_blocks = (int)block_tables.dim(1);
  p.seqs = PagedSeqs{static_cast<const int32_t*>(seq_info.data()), n_seq, nq, p.max_blocks * (int)k_cache.dim(1)};
  p.q = static_cast<const float*>(q.data());
  p.q_s0 = q.stride(0);
  p.q_s1 = q.stride(1);
  p.k_cache = k_cache.data();
  p.v_cache = v_cache.data();
  p.tables = static_cast<const int32_t*>(block_tables.data());
  p.num_blocks = (int)k_cache.dim(0);
  p.block_size = (int)k_cache.dim(1);
  p.hq = (int)q.dim(1);
  p.hkv = (int)k_cache.dim(2);
  p.scale = params.scale;
  p.softcap = params.softcap;
  p.window = params.window;
  p.group = p.hq / p.hkv;
  p.head_chunk = std::min(p.group, rows);
  p.n_head_chunks = (p.group + p.head_chunk - 1) / p.head_chunk;
  p.tile_tokens = std::max(1, std::min(rows / p.head_chunk, (nq + n_seq - 1) / n_seq));
  p.key_align = 0;
  return std::min<int64_t>(nq, (nq + p.tile_tokens - 1) / p.tile_tokens + n_seq);
}

// Partial results of a split launch (PagedMergeParams), kept alive until the merge is enqueued.
struct PagedPartials {
  Tensor acc, ml;
};

// The split of a launch's key range over blocks, for every paged attention kernel (paged.cu's merge combines the
// partials): [0, max_ctx) in p.n_splits pieces of p.split_len keys, each a whole number of `granule` keys (what one
// block iteration visits). No split when `single` (batch-invariant mode) or when max_ctx <= min_ctx (such a range is
// read by one block in less time than the merge's launch takes); otherwise enough splits that base_blocks (the
// launch's blocks without a split) times n_splits reaches target_blocks, at most one split per granule and 65535.
// Sets p.split_len, p.n_splits and p.out (out [nq, hq, d]); with n_splits > 1 allocates the partials
// [n_splits, nq, hq, d] and [n_splits, nq, hq, 2] from dev and points p.part_acc / p.part_ml at them.
inline void plan_paged_splits(PagedLaunch& p, Device& dev, int64_t max_ctx, int64_t granule, int64_t base_blocks,
                              int64_t target_blocks, int64_t min_ctx, bool single, Tensor& out,
                              PagedPartials& partials) {
  const int64_t keys = std::max<int64_t>(max_ctx, 1), blocks = std::max<int64_t>(base_blocks, 1);
  const int64_t want = keys <= min_ctx ? 1 : (target_blocks + blocks - 1) / blocks;
  const int64_t n_splits = single ? 1 : std::clamp<int64_t>(want, 1, std::min<int64_t>((keys + granule - 1) / granule, 65535));
  p.split_len = (int)(((keys + n_splits - 1) / n_splits + granule - 1) / granule * granule);
  p.n_splits = (int)((keys + p.split_len - 1) / p.split_len);
  p.out = static_cast<float*>(out.data());
  p.part_acc = p.part_ml = nullptr;
  if (p.n_splits > 1) {
    const int64_t nq = out.dim(0), hq = out.dim(1), d = out.dim(2);
    partials.acc = Tensor::empty({p.n_splits, nq, hq, d}, DType::F32, dev);
    partials.ml = Tensor::empty({p.n_splits, nq, hq, 2}, DType::F32, dev);
    p.part_acc = static_cast<float*>(partials.acc.data());
    p.part_ml = static_cast<float*>(partials.ml.data());
  }
}

// The merge of a split launch's partials into p.out (paged.cu); nothing when p.n_splits == 1.
inline void merge_paged_splits(GpuDevice& dev, const PagedLaunch& p, int d) {
  if (p.n_splits > 1) launch_paged_merge(dev, PagedMergeParams{p.seqs, p.hq, d, p.n_splits, p.part_acc, p.part_ml, p.out});
}

namespace {

// The first key a query tile whose first token sits at pos0 visits in split `split` (its window's start, rounded
// down to p.key_align when set, or the split's start).
__device__ inline int tile_key_lo(const PagedLaunch& p, int pos0, int split) {
  int lo = p.window > 0 ? pos0 - p.window + 1 : 0;
  if (p.key_align > 1 && lo > 0) lo -= lo % p.key_align;
  return max(lo, split * p.split_len);
}

// Sequence i clamped into range: q rows [q_start, q_start + q_len) of [0, nq), ctx <= capacity and
// q_len <= ctx (so every query position ctx - q_len + t is >= 0).
__device__ inline void read_seq(const PagedSeqs& s, int i, int& q_start, int& q_len, int& ctx) {
  const int* e = s.seq_info + 3 * (int64_t)i;
  q_start = min(max(e[0], 0), s.nq);
  q_len = min(max(e[1], 0), s.nq - q_start);
  ctx = min(max(e[2], 0), s.capacity);
  q_len = min(q_len, ctx);
}

// Query tiles are numbered sequence by sequence, ceil(q_len / tile_tokens) per sequence. Finds tile `tile`:
// its sequence (or -1 past the last tile), the sequence's clamped (q_start, q_len, ctx), and the tile's first
// token within the sequence. The answer is the same for every thread of a block.
__device__ inline int find_tile(const PagedSeqs& s, int tile_tokens, int tile, int& q_start, int& q_len, int& ctx,
                                int& tok0) {
  for (int i = 0; i < s.n_seq; ++i) {
    read_seq(s, i, q_start, q_len, ctx);
    const int tiles = (q_len + tile_tokens - 1) / tile_tokens;
    if (tile < tiles) {
      tok0 = tile * tile_tokens;
      return i;
    }
    tile -= tiles;
  }
  return -1;
}

}  // namespace
}  // namespace rbee::gpu
