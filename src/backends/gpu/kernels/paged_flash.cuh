// Paged flash attention on 16-bit matrix tiles (the mma_* contract of backends/gpu/platform.h), for F16 / BF16 caches.
// Semantics (PagedAttention in rbee/backend/op_table.def): q rounded to the cache type, s = scale * (q . k) in f32
// (then softcap, masks), online softmax in f32, the probabilities rounded to the cache type before P.V, the denominator
// the f32 sum of the unrounded probabilities, P.V accumulated in f32.
//
// A thread block owns `kRows` query rows = tile_tokens consecutive tokens of one sequence x head_chunk query heads of
// one kv head (GQA: row r is token r / head_chunk, head r % head_chunk), and one split of the key range. Its kWarps =
// WR x WK warps: warp (wr, wk) owns rows [16 MT wr, 16 MT (wr + 1)) and, of every key tile of BN positions, keys [BN/WK
// wk, BN/WK (wk + 1)).  - prefill shapes: WK = 1, the warps split the rows (16 MT each) and read every staged key;  -
// decode shapes (one token per sequence, or a few): WR = 1, all warps share 16 rows and split each key tile,    then
// merge their (max, sum, O) through shared memory. Key tiles: K and V rows of BN positions staged in shared memory
// through copy_async_16 (16-byte copies, block-table lookup per row, clamped; positions past the block's last key read
// as zeros), double-buffered: tile t + 1 is in flight while tile t is computed. The key-tile loop is flash_tiles.cuh's
// (shared with the dense attention of attention_flash.cu). Per warp and tile: S = Q K^T on the
// matrix tiles (Q from shared memory, staged once), scale / softcap / causal + window masks per accumulator element
// (its row and column come from mma_acc_row / mma_acc_col), the row max through mma_rows_max, P = exp(S - max) written
// to the warp's shared P tile rounded to the cache type (mma_store), O = O * correction + P V on the matrix tiles.
// Split-K: blocks of split z see keys [z split_len, (z + 1) split_len) and write partial (max, sum, O) for
// paged_merge_kernel. Grid sizes and shared memory depend only on shapes (never on seq_info / block tables), so a
// decode step is capturable in a graph and replays with new contents.
#pragma once

#include <cstdint>

#include "backends/gpu/kernels/flash_tiles.cuh"
#include "backends/gpu/kernels/paged_common.cuh"

namespace rbee::gpu {

// The shared launch parameters (paged_common.cuh); the caches hold 16-bit elements [num_blocks, block_size, hkv, D].
struct FlashParams : PagedLaunch {};

namespace {

template <class Cfg, MmaElem E>
__global__ void __launch_bounds__(Cfg::kWarps* RBEE_DEVICE_WARP_SIZE) paged_flash_kernel(FlashParams p) {
  constexpr int W = RBEE_DEVICE_WARP_SIZE, kThreads = Cfg::kWarps * W;
  constexpr int D = Cfg::D, BN = Cfg::BN, MT = Cfg::MT, DT = Cfg::kDT, WK = Cfg::WK;
  constexpr int kLd = Cfg::kLd, R = kMmaRowsPerLane, A = kMmaAccPerLane;
  extern __shared__ float4 smem_raw[];
  char* smem = reinterpret_cast<char*>(smem_raw);
  uint16_t* q_tile = reinterpret_cast<uint16_t*>(smem);
  uint16_t* kv = reinterpret_cast<uint16_t*>(smem + Cfg::kKvOff);  // K stage 0, K stage 1, V stage 0, V stage 1
  const int tid = threadIdx.x, warp = tid / W;
  const int wr = warp / WK;

  // ---- the block's tile (uniform over the block) ----
  int q_start = 0, q_len = 0, ctx = 0, tok0 = 0;
  const int seq = find_tile(p.seqs, p.tile_tokens, blockIdx.x, q_start, q_len, ctx, tok0);
  if (seq < 0) return;
  const int hc = p.head_chunk;
  const int ntok = min(p.tile_tokens, q_len - tok0);
  const int pos0 = ctx - q_len + tok0;  // position of the tile's first token
  const int g = blockIdx.y / p.n_head_chunks;
  const int h0 = g * p.group + (int)(blockIdx.y % p.n_head_chunks) * hc;
  const int nheads = min(hc, (g + 1) * p.group - h0);
  const int split = blockIdx.z;
  const int key_lo = tile_key_lo(p, pos0, split);
  const int key_hi = min(pos0 + ntok, (split + 1) * p.split_len);  // exclusive; <= ctx
  const int n_tiles = key_lo < key_hi ? (key_hi - key_lo + BN - 1) / BN : 0;
  auto row_valid = [&](int r) { return r / hc < ntok && r % hc < nheads; };
  const int32_t* table = p.tables + (int64_t)seq * p.max_blocks;

  // ---- Q rows rounded to the cache type (zeros for rows outside the tile) ----
  for (int e = tid; e < Cfg::kRows * (D / 8); e += kThreads) {
    const int r = e / (D / 8), c = e % (D / 8) * 8;
    uint16_t v[8];
    if (row_valid(r)) {
      const float* src = p.q + (int64_t)(q_start + tok0 + r / hc) * p.q_s0 + (int64_t)(h0 + r % hc) * p.q_s1 + c;
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = round_to_elem<E>(src[i]);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = 0;
    }
    uint4 packed;
    packed.x = v[0] | (uint32_t)v[1] << 16;
    packed.y = v[2] | (uint32_t)v[3] << 16;
    packed.z = v[4] | (uint32_t)v[5] << 16;
    packed.w = v[6] | (uint32_t)v[7] << 16;
    *reinterpret_cast<uint4*>(q_tile + r * kLd + c) = packed;
  }

  // K and V rows of positions k0 .. k0 + BN - 1 into stage st; positions >= key_hi become zeros.
  auto stage = [&](int k0, int st) {
    uint16_t* kd = kv + st * BN * kLd;
    uint16_t* vd = kv + (2 + st) * BN * kLd;
    for (int e = tid; e < BN * (D / 8); e += kThreads) {
      const int j = e / (D / 8), c = e % (D / 8) * 8, pos = k0 + j;
      const bool in = pos < key_hi;
      const int blk = in ? min(max(table[pos / p.block_size], 0), p.num_blocks - 1) : 0;
      const int64_t row = ((int64_t)blk * p.block_size + (in ? pos % p.block_size : 0)) * p.hkv + g;
      copy_async_16(kd + j * kLd + c, static_cast<const uint16_t*>(p.k_cache) + row * D + c, in);
      copy_async_16(vd + j * kLd + c, static_cast<const uint16_t*>(p.v_cache) + row * D + c, in);
    }
    copy_async_commit();
  };

  // ---- per-warp state and the key-tile loop (flash_tiles.cuh) ----
  FlashRowState<Cfg> fs;
  fs.init();
  auto& o = fs.o;
  auto& m = fs.m;
  auto& l = fs.l;
  const int row0 = wr * 16 * MT;  // the warp's first row in the block
  // Per row slot of this lane: the keys [lo, hi) its row sees (causal, window, split; empty outside the tile),
  // so the mask is two compares per score.
  int row_lo[MT][R], row_hi[MT][R];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int s = 0; s < R; ++s) {
      const int r = row0 + 16 * mt + mma_slot_row(s);
      const int qpos = pos0 + r / hc;
      const bool valid = row_valid(r);
      row_lo[mt][s] = valid && p.window > 0 ? max(key_lo, qpos - p.window + 1) : key_lo;
      row_hi[mt][s] = valid ? min(qpos + 1, key_hi) : key_lo;
    }
  }
  // Scores in log2 units: s * log2(e), with s = scale q.k or softcap tanh(scale q.k / softcap).
  const bool capped = p.softcap > 0.f;
  const float qk_mul = capped ? p.scale / p.softcap : p.scale * kLog2e;
  const float cap_mul = p.softcap * kLog2e;
  flash_key_tiles<Cfg, E>(smem, n_tiles, key_lo, row_lo, row_hi, qk_mul, capped, cap_mul, stage, fs);

  const int64_t split_base = (int64_t)split * p.seqs.nq * p.hq;
  // Row r of the block -> (token index in q, head).
  auto out_row = [&](int r) { return (int64_t)(q_start + tok0 + r / hc) * p.hq + (h0 + r % hc); };

  if constexpr (WK == 1) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int i = 0; i < A; ++i) {
        const int r = row0 + 16 * mt + mma_acc_row(i);
        if (!row_valid(r)) continue;
        const int64_t orow = out_row(r);
        const float sum = l[mt][mma_acc_slot(i)];
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
          const int64_t o_idx = orow * D + 16 * dt + mma_acc_col(i);
          if (p.n_splits == 1) p.out[o_idx] = sum > 0.f ? o[mt][dt].v[i] / sum : 0.f;
          else p.part_acc[split_base * D + o_idx] = o[mt][dt].v[i];
        }
        if (p.n_splits > 1 && mma_acc_col(i) == 0) {
          float* ml = p.part_ml + (split_base + orow) * 2;
          ml[0] = m[mt][mma_acc_slot(i)] * kLn2;
          ml[1] = sum;
        }
      }
    }
  } else {
    // Merge the WK key groups of each row group through shared memory (the K / V stages are free: the loop
    // ended with a barrier, or never touched them). Per warp: O [16 MT][D], then max and sum [16 MT] each.
    float* red = reinterpret_cast<float*>(smem + Cfg::kKvOff);
    constexpr int kWarpFloats = 16 * MT * (D + 2);
    float* mine = red + warp * kWarpFloats;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int i = 0; i < A; ++i) {
        const int rr = 16 * mt + mma_acc_row(i);
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) mine[rr * D + 16 * dt + mma_acc_col(i)] = o[mt][dt].v[i];
        if (mma_acc_col(i) == 0) {
          mine[16 * MT * D + rr] = m[mt][mma_acc_slot(i)];
          mine[16 * MT * D + 16 * MT + rr] = l[mt][mma_acc_slot(i)];
        }
      }
    }
    __syncthreads();
    for (int e = tid; e < Cfg::kRows * D; e += kThreads) {
      const int r = e / D, col = e % D;
      if (!row_valid(r)) continue;
      const int rg = r / (16 * MT), rr = r % (16 * MT);
      const float* grp = red + rg * WK * kWarpFloats;  // warps rg * WK .. rg * WK + WK - 1
      float mx = -INFINITY;
#pragma unroll
      for (int k = 0; k < WK; ++k) mx = fmaxf(mx, grp[k * kWarpFloats + 16 * MT * D + rr]);
      float sum = 0.f, acc = 0.f;
      if (mx != -INFINITY) {
#pragma unroll
        for (int k = 0; k < WK; ++k) {
          const float* w = grp + k * kWarpFloats;
          const float mk = w[16 * MT * D + rr];
          if (mk == -INFINITY) continue;
          const float f = exp2f(mk - mx);
          sum += f * w[16 * MT * D + 16 * MT + rr];
          acc += f * w[rr * D + col];
        }
      }
      const int64_t orow = out_row(r);
      if (p.n_splits == 1) {
        p.out[orow * D + col] = sum > 0.f ? acc / sum : 0.f;
      } else {
        p.part_acc[(split_base + orow) * D + col] = acc;
        if (col == 0) {
          float* ml = p.part_ml + (split_base + orow) * 2;
          ml[0] = mx * kLn2;
          ml[1] = sum;
        }
      }
    }
  }
}

}  // namespace
}  // namespace rbee::gpu
