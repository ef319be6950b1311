// Shared by the paged attention kernels (paged.cu: scalar, any cache dtype; paged_flash.cuh: tensor cores):
// reading seq_info defensively, finding a block's query tile, the split-K partials (merged by paged.cu).
#pragma once

#include <cmath>
#include <cstdint>

#include "backends/gpu/kernels/common.cuh"

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

namespace {

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
