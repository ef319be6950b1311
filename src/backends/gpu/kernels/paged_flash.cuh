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
// as zeros), double-buffered: tile t + 1 is in flight while tile t is computed. Per warp and tile: S = Q K^T on the
// matrix tiles (Q from shared memory, staged once), scale / softcap / causal + window masks per accumulator element
// (its row and column come from mma_acc_row / mma_acc_col), the row max through mma_rows_max, P = exp(S - max) written
// to the warp's shared P tile rounded to the cache type (mma_store), O = O * correction + P V on the matrix tiles.
// Split-K: blocks of split z see keys [z split_len, (z + 1) split_len) and write partial (max, sum, O) for
// paged_merge_kernel. Grid sizes and shared memory depend only on shapes (never on seq_info / block tables), so a
// decode step is capturable in a graph and replays with new contents.
#pragma once

#include <cstdint>

#include "backends/gpu/kernels/paged_common.cuh"

namespace rbee::gpu {

// The shared launch parameters (paged_common.cuh); the caches hold 16-bit elements [num_blocks, block_size, hkv, D].
struct FlashParams : PagedLaunch {};

namespace {

template <int D_, int WR_, int WK_, int MT_, int BN_>
struct FlashCfg {
  static constexpr int D = D_;                  // head size
  static constexpr int WR = WR_, WK = WK_;      // warps along rows x along keys
  static constexpr int MT = MT_;                // 16-row tiles per warp
  static constexpr int BN = BN_;                // keys per staged tile
  static constexpr int kWarps = WR * WK;
  static constexpr int kRows = 16 * MT * WR;    // query rows per block
  static constexpr int kWarpKeys = BN / WK;     // keys per warp per tile
  static constexpr int kNT = kWarpKeys / 16;    // 16-key tiles per warp per tile
  static constexpr int kDT = D / 16;            // 16-dim tiles
  static constexpr int kLd = D + 8;             // row stride of Q / K / V in shared memory (16-bit elements)
  static constexpr int kPld = kWarpKeys + 8;    // row stride of a warp's P tile
  static_assert(D % 16 == 0 && kWarpKeys % 16 == 0 && kNT >= 1, "tile shape");
  // Shared memory, bytes (every region a multiple of 16).
  static constexpr int kQBytes = kRows * kLd * 2;
  static constexpr int kKvStageBytes = BN * kLd * 2;  // one K (or V) stage
  static constexpr int kPBytes = kWarps * 16 * MT * kPld * 2;
  static constexpr int kMergeBytes = WK > 1 ? kWarps * 16 * MT * (D + 2) * 4 : 0;  // reuses the K / V stages
  static constexpr int kKvOff = kQBytes;
  static constexpr int kPOff = kKvOff + 4 * kKvStageBytes;
  static constexpr int kSmemBytes = kPOff + kPBytes;
  static_assert(kMergeBytes <= 4 * kKvStageBytes, "merge scratch must fit the K / V stages");
};


constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <MmaElem E>
__device__ __forceinline__ uint16_t round_to_elem(float f) {
  if constexpr (E == MmaElem::BF16) return float_to_bf16(f);
  else return float_to_f16(f);
}

template <class Cfg, MmaElem E>
__global__ void __launch_bounds__(Cfg::kWarps* RBEE_DEVICE_WARP_SIZE) paged_flash_kernel(FlashParams p) {
  constexpr int W = RBEE_DEVICE_WARP_SIZE, kThreads = Cfg::kWarps * W;
  constexpr int D = Cfg::D, BN = Cfg::BN, MT = Cfg::MT, NT = Cfg::kNT, DT = Cfg::kDT, WK = Cfg::WK;
  constexpr int kLd = Cfg::kLd, kPld = Cfg::kPld, R = kMmaRowsPerLane, A = kMmaAccPerLane;
  extern __shared__ float4 smem_raw[];
  char* smem = reinterpret_cast<char*>(smem_raw);
  uint16_t* q_tile = reinterpret_cast<uint16_t*>(smem);
  uint16_t* kv = reinterpret_cast<uint16_t*>(smem + Cfg::kKvOff);  // K stage 0, K stage 1, V stage 0, V stage 1
  const int tid = threadIdx.x, warp = tid / W;
  const int wr = warp / WK, wk = warp % WK;
  uint16_t* p_tile = reinterpret_cast<uint16_t*>(smem + Cfg::kPOff) + warp * 16 * MT * kPld;

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

  // ---- per-warp state: O accumulators, running max (log2 units) and this lane's part of the sum, per slot ----
  MmaAcc o[MT][DT];
  float m[MT][R], l[MT][R];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) mma_zero(o[mt][dt]);
#pragma unroll
    for (int s = 0; s < R; ++s) {
      m[mt][s] = -INFINITY;
      l[mt][s] = 0.f;
    }
  }
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

  if (n_tiles > 0) stage(key_lo, 0);
  for (int t = 0; t < n_tiles; ++t) {
    const int st = t & 1, k0 = key_lo + t * BN;
    copy_async_wait_all();
    __syncthreads();  // stage st (and, the first time, Q) visible to every warp
    // Tile t + 1 lands while tile t is computed (its stage was consumed before the barrier ending tile t - 1).
    if (t + 1 < n_tiles) stage(k0 + BN, st ^ 1);
    const uint16_t* kt = kv + st * BN * kLd + wk * Cfg::kWarpKeys * kLd;
    const uint16_t* vt = kv + (2 + st) * BN * kLd + wk * Cfg::kWarpKeys * kLd;

    // S = Q K^T for the warp's rows x keys.
    MmaAcc sc[MT][NT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mma_zero(sc[mt][nt]);
    }
#pragma unroll
    for (int kk = 0; kk < DT; ++kk) {
      MmaA qa[MT];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) mma_load_a(qa[mt], q_tile + (row0 + 16 * mt) * kLd + 16 * kk, kLd);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        MmaB kb;
        mma_load_b_nk(kb, kt + 16 * nt * kLd + 16 * kk, kLd);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma<E>(sc[mt][nt], qa[mt], kb);
      }
    }

    // Scale, softcap, masks; the tile's row maxima.
    const int key0 = k0 + wk * Cfg::kWarpKeys;
    float tmax[MT][R];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int s = 0; s < R; ++s) tmax[mt][s] = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int i = 0; i < A; ++i) {
          const int slot = mma_acc_slot(i), key = key0 + 16 * nt + mma_acc_col(i);
          float s = sc[mt][nt].v[i] * qk_mul;
          if (capped) s = cap_mul * tanhf(s);
          s = key >= row_lo[mt][slot] && key < row_hi[mt][slot] ? s : -INFINITY;
          sc[mt][nt].v[i] = s;
          tmax[mt][slot] = fmaxf(tmax[mt][slot], s);
        }
      }
      mma_rows_max(tmax[mt]);
    }
    // Online softmax: new maxima, corrections, P (f32 into the sums, rounded into the P tile).
    float corr[MT][R];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int s = 0; s < R; ++s) {
        const float mn = fmaxf(m[mt][s], tmax[mt][s]);
        corr[mt][s] = mn == -INFINITY ? 1.f : exp2f(m[mt][s] - mn);
        m[mt][s] = mn;
        l[mt][s] *= corr[mt][s];
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int i = 0; i < A; ++i) {
          const int s = mma_acc_slot(i);
          const float e = m[mt][s] == -INFINITY ? 0.f : exp2f(sc[mt][nt].v[i] - m[mt][s]);
          sc[mt][nt].v[i] = e;
          l[mt][s] += e;
        }
        mma_store<E>(sc[mt][nt], p_tile + 16 * mt * kPld + 16 * nt, kPld);
      }
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
#pragma unroll
        for (int i = 0; i < A; ++i) o[mt][dt].v[i] *= corr[mt][mma_acc_slot(i)];
      }
    }
    warp_sync();  // the warp's P tile written by all its lanes
    // O += P V.
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      MmaA pa[MT];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) mma_load_a(pa[mt], p_tile + 16 * mt * kPld + 16 * nt, kPld);
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        MmaB vb;
        mma_load_b_kn(vb, vt + 16 * nt * kLd + 16 * dt, kLd);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma<E>(o[mt][dt], pa[mt], vb);
      }
    }
    __syncthreads();  // stage st and the P tiles consumed before they are refilled
  }

#pragma unroll
  for (int mt = 0; mt < MT; ++mt) mma_rows_sum(l[mt]);
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
