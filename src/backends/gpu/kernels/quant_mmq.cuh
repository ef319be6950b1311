// MMQ: out [M, N] = x^ [M, K] . w [N, K]^T for block-type weights on int8 tensor cores (qmatmul from kMmqMinRows
// rows on: batched decode and prompts). x^ are the activations quantized by quant_activation.cu (int8 levels, a
// scale per 32, level sums per 16); the weights are decoded from their packed blocks by load_item / decode_raw, the
// one decoder of quant_blocks.cuh. A block dot product is then an integer sum, computed exactly by the platform's
// warp-level tile product (mma_i8_*, backends/gpu/platform.h), and scaled in f32 as the matvec (quant_matvec.cuh)
// scales its dot4 sums: same semantics, only f32 rounding differs.
//
// Tiling. A block computes BM activation rows x BN weight rows; its (BM / 16 TM) x (BN / 16 TN) warps own TM x TN
// tiles of 16 x 16 each. K advances in steps of kMmqStepK = 128 elements (4 legacy blocks, half a super-block)
// through two shared-memory stages, one barrier per step:
//   iteration s:  copies of step s + 1's activation levels into the other stage (copy_async_16), loads of step
//                 s + 1's raw weight bytes and activation factors into registers (load_item);
//                 tile products of step s from this stage;
//                 decode of the registers into the other stage (decode_raw: int8 levels in natural element order
//                 and the factors); wait for the copies; barrier.
// so the global-memory latency of a step overlaps the previous step's tensor-core work. Rows past M or N repeat the
// last row and are not stored; legacy elements past K (K a multiple of 32, not of 128) are zero.
//
// Scaling, per 32-element group g of a step, in f32 (exactly the matvec's factors):
//   legacy types (activation scale dx per 32, weight scale dw per 32, min m_w for Q4_1 / Q5_1; dx and dw are f16
//   values): the tile product starts from the bits of 1.5 * 2^23 (mma_i8_k32_bias), so the int32 result read as a
//   float is F = 1.5 * 2^23 + C exactly (|C| < 2^22), and
//     t = fma(dx, F, -1.5 * 2^23 * dx)  = dx * C rounded once (dx * 1.5 * 2^23 is exact: dx has 11 bits)
//     acc = fma(dw, t, acc)  [ + m_w * (dx * S) with S the 32 activation levels' sum ]
//   two FMAs per element and group, no int -> float conversion.
//   256-element types (one Q8_K scale dx per super-block; integer sub-block scales sc, mins mn; f16 d, dmin):
//   isum += sc * C over the step's groups (k16x2 for types with a scale per 16; Q8_K accumulates in the tensor
//   cores), then acc += (dx * d) * isum; the mins' msum = sum_k mn(k) x(k) over the step is one more tile product
//   per group, of the activations with a tile holding each element's mn, accumulated in the tensor cores from the
//   same bias (|msum| < 2^22), then acc += -dx * (dmin * msum) with dmin * msum rounded once as above.
//   The integers are exact: |isum| < 2^31 and |msum| < 2^22 by the level ranges.
//
// Split-K: when the M x N tiles give fewer blocks than the multiprocessors hold (batched decode), the K steps are
// split over gridDim.z blocks per tile (mmq_splits: the fewest splits for the fewest waves x steps per block).
// Each writes its partial tile, then counts itself on the tile's counter (zeroed by the activation quantizer); the
// last one adds the partials in z order (its own read back too), split after split so that the loads of a split are
// in flight together, writes the tile and resets the counter: deterministic, whichever block finishes last, and no
// second kernel.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/quant_blocks.cuh"
#include "backends/gpu/kernels/quant_launch.h"
#include "backends/gpu/kernels/split_k.h"
#include "rbee/core/env.h"

namespace rbee::gpu::quant {

inline constexpr int kMmqStepK = 128;             // K elements per step
inline constexpr int kMmqLd = kMmqStepK + 16;     // shared-memory row stride of the level tiles: 16-byte rows that
                                                  // start 4 banks apart, so fragment loads are conflict-free
inline constexpr int kMmqItems = kMmqStepK / 32;  // weight items per row and step
inline constexpr int64_t kMmqMaxSplits = 16;
// Warps per multiprocessor that __launch_bounds__ plans for (a register cap of 128 per thread for any block size)
// and that the split-K choice counts as resident (RBEE_MMQ_WARPS_PER_SM overrides it there: a measurement knob).
inline constexpr int kMmqWarpsPerSm = 16;
// The bits of 1.5 * 2^23: an int32 sum C with |C| < 2^22 added to them reads as the float 1.5 * 2^23 + C.
inline constexpr int32_t kMmqBias = 0x4B400000;
inline constexpr float kMmqBiasF = 12582912.f;

template <DType T>
struct MmqTraits {
  using B = BlockTraits<T>;
  static constexpr bool kInt = B::kQK == 256;  // integer sub-block scales, one activation scale per step
  static constexpr bool kMin = B::kHasMin;
  // Elements sharing one weight scale (and min).
  static constexpr int kGroup = (T == DType::Q2_K || T == DType::Q3_K || T == DType::Q6_K) ? 16 : 32;
  static constexpr int kGroups = kMmqStepK / kGroup;
  // Shared-memory arrays of a stage (counts of 4-byte values per activation row / weight row).
  static constexpr int kActScales = kInt ? 1 : kMmqItems;         // dx
  static constexpr int kActSums = kMin && !kInt ? kMmqItems : 0;  // dx * S (float)
  static constexpr int kWScales = kInt ? 1 : kMmqItems;           // d_w / d
  static constexpr int kWMins = !kMin ? 0 : kInt ? 1 : kMmqItems;  // m_w / dmin
  static constexpr int kWSubScales = kInt ? kGroups : 0;          // sc
  static constexpr int kWMinTile = kInt && kMin ? kMmqLd : 0;     // bytes per row: mn of each element
};

// Byte offsets of one stage of a block's shared memory (two stages: kBytes); each factor array is [count][BM or BN]
// (row index fastest).
template <DType T, int BM, int BN>
struct MmqLayout {
  using Tr = MmqTraits<T>;
  static constexpr int kAq = 0;                                  // int8 [BM][kMmqLd]
  static constexpr int kWq = kAq + BM * kMmqLd;                  // int8 [BN][kMmqLd]
  static constexpr int kWmn = kWq + BN * kMmqLd;                 // int8 [BN][kMmqLd] (K-quants with mins)
  static constexpr int kAdx = kWmn + Tr::kWMinTile * BN;
  static constexpr int kAsum = kAdx + 4 * Tr::kActScales * BM;
  static constexpr int kWd = kAsum + 4 * Tr::kActSums * BM;
  static constexpr int kWm = kWd + 4 * Tr::kWScales * BN;
  static constexpr int kWsc = kWm + 4 * Tr::kWMins * BN;
  static constexpr int kStage = (kWsc + 4 * Tr::kWSubScales * BN + 127) / 128 * 128;
  static constexpr int kBytes = 2 * kStage;
};

#if defined(__CUDACC__) || defined(__HIPCC__)

// Variant flags of a kernel (Mmq's kFlags; launch_mmq_tile chooses them):
//   kMmqFloatScales (Q4_K / Q5_K only): float group factors d * sc instead of integer sub-block scales (compute()).
//   kMmqAligned16 (Q4_K / Q5_K only): the weight rows start at 16-byte aligned addresses (144- and 176-byte blocks
//                 then have every 16-byte field aligned): load_item's single aligned loads, half the load
//                 instructions and registers of the unaligned form (two loads and a byte shift per field).
inline constexpr int kMmqFloatScales = 1;
inline constexpr int kMmqAligned16 = 2;

template <DType T, int BM, int BN, int TM, int TN, int kFlags = 0>
struct Mmq {
  static constexpr bool kFs = (kFlags & kMmqFloatScales) != 0;
  static constexpr bool kA16 = (kFlags & kMmqAligned16) != 0;
  static_assert(!kFs || T == DType::Q4_K || T == DType::Q5_K, "float group factors: Q4_K / Q5_K");
  static_assert(!kA16 || T == DType::Q4_K || T == DType::Q5_K, "aligned loads: Q4_K / Q5_K");
  using Tr = MmqTraits<T>;
  using B = BlockTraits<T>;
  using L = MmqLayout<T, BM, BN>;
  static constexpr int kWarpsN = BN / (16 * TN);
  static constexpr int kWarps = (BM / (16 * TM)) * kWarpsN;
  static constexpr int kThreads = kWarps * RBEE_DEVICE_WARP_SIZE;
  static constexpr int kMinBlocks = kMmqWarpsPerSm / kWarps > 1 ? kMmqWarpsPerSm / kWarps : 1;
  static_assert(BM % (16 * TM) == 0 && BN % (16 * TN) == 0, "warp tiles must divide the block tile");
  // Per thread and step: 16-byte activation pieces, activation factors, weight items.
  static constexpr int kActPieces = BM * (kMmqStepK / 16), kActPer = (kActPieces + kThreads - 1) / kThreads;
  static constexpr int kFactors = BM * Tr::kActScales, kFactorPer = (kFactors + kThreads - 1) / kThreads;
  static constexpr int kTasks = BN * kMmqItems, kTaskPer = (kTasks + kThreads - 1) / kThreads;

  // What a thread loads of the next step while the current one computes.
  struct Next {
    RawItem<T> w[kTaskPer];
    float dx[kFactorPer];
    int sum[Tr::kActSums > 0 ? kFactorPer : 1];  // legacy types with mins: the 32 levels' sum
  };

  // Step s's activation levels, rows m0 .. m0 + BM, into stage `st` (asynchronous copies).
  static __device__ __forceinline__ void copy_acts(const MmqArgs& a, int64_t m0, int64_t s, unsigned char* st,
                                                   int tid) {
    const int64_t e0 = s * kMmqStepK;
    int8_t* aq = reinterpret_cast<int8_t*>(st + L::kAq);
#pragma unroll
    for (int j = 0; j < kActPer; ++j) {
      const int c = tid + j * kThreads, r = c / (kMmqStepK / 16), p = c % (kMmqStepK / 16);
      if (kActPieces % kThreads == 0 || c < kActPieces) {
        const int64_t e = e0 + 16 * p;  // k is a multiple of 32: a 16-byte piece lies wholly inside or outside
        const bool in = e < a.k;
        copy_async_16(aq + r * kMmqLd + 16 * p, a.x.q + min(m0 + r, a.m - 1) * a.k + (in ? e : 0), in);
      }
    }
  }

  // Issues the loads of step s's weight items (rows n0 .. n0 + BN) and activation factors into `nx`.
  static __device__ __forceinline__ void load_next(const MmqArgs& a, int64_t m0, int64_t n0, int64_t s, Next& nx,
                                                   int tid) {
    const int64_t k32 = a.k / 32, e0 = s * kMmqStepK;
#pragma unroll
    for (int j = 0; j < kTaskPer; ++j) {
      const int t = tid + j * kThreads, r = t / kMmqItems, i = t % kMmqItems;
      if (!(kTasks % kThreads == 0 || t < kTasks)) continue;
      const uint8_t* wrow = a.w + min(n0 + r, a.n - 1) * a.row_bytes;
      if constexpr (B::kQK == 32) {
        const int64_t blk = s * kMmqItems + i;
        if (blk * 32 < a.k) load_item<T>(wrow + blk * B::kTS, 0, nx.w[j]);  // k is a multiple of 32, not of 128
      } else {
        load_item<T, kA16>(wrow + (s / 2) * B::kTS, (int)(s % 2) * kMmqItems + i, nx.w[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < kFactorPer; ++j) {
      const int c = tid + j * kThreads;
      if (!(kFactors % kThreads == 0 || c < kFactors)) continue;
      const int r = c % BM, g = c / BM;
      const int64_t row = min(m0 + r, a.m - 1);
      if constexpr (!Tr::kInt) {
        const int64_t e = e0 + 32 * g;
        nx.dx[j] = e < a.k ? a.x.d[row * k32 + e / 32] : 0.f;
        if constexpr (Tr::kActSums > 0) {
          nx.sum[j] = 0;
          if (e < a.k) {
            const int2 sv = *reinterpret_cast<const int2*>(a.x.s + row * (a.k / 16) + e / 16);
            nx.sum[j] = sv.x + sv.y;
          }
        }
      } else {
        // K is a multiple of 256 for these types: the whole step is inside, under one Q8_K scale.
        nx.dx[j] = a.x.d[row * k32 + e0 / 32];
      }
    }
  }

  // Decodes `nx` (loaded by load_next for step s) into stage `st`.
  static __device__ __forceinline__ void store_next(const MmqArgs& a, int64_t s, const Next& nx, unsigned char* st,
                                                    int tid) {
    int8_t* wq = reinterpret_cast<int8_t*>(st + L::kWq);
    float* wd = reinterpret_cast<float*>(st + L::kWd);
    float* wm = reinterpret_cast<float*>(st + L::kWm);
    int* wsc = reinterpret_cast<int*>(st + L::kWsc);
    int8_t* wmn = reinterpret_cast<int8_t*>(st + L::kWmn);
#pragma unroll
    for (int j = 0; j < kTaskPer; ++j) {
      const int t = tid + j * kThreads, r = t / kMmqItems, i = t % kMmqItems;
      if (!(kTasks % kThreads == 0 || t < kTasks)) continue;
      int8_t* dst = wq + r * kMmqLd;
      if constexpr (B::kQK == 32) {
        if ((s * kMmqItems + i) * 32 >= a.k) {  // a legacy block past K: zero levels and factors
          *reinterpret_cast<uint4*>(dst + 32 * i) = make_uint4(0, 0, 0, 0);
          *reinterpret_cast<uint4*>(dst + 32 * i + 16) = make_uint4(0, 0, 0, 0);
          wd[i * BN + r] = 0.f;
          if constexpr (Tr::kMin) wm[i * BN + r] = 0.f;
          continue;
        }
      }
      Item it;
      decode_raw<T>(nx.w[j], B::kQK == 32 ? 0 : (int)(s % 2) * kMmqItems + i, it);
      // Element offset of the step inside the item's block.
      const int base = B::kQK == 32 ? -32 * i : (int)(s % 2) * kMmqStepK;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        *reinterpret_cast<uint4*>(dst + it.e[h] - base) =
            make_uint4(it.q[4 * h], it.q[4 * h + 1], it.q[4 * h + 2], it.q[4 * h + 3]);
      }
      if constexpr (!Tr::kInt) {
        wd[i * BN + r] = it.a[0];  // legacy: one scale (and min) for both halves
        if constexpr (Tr::kMin) wm[i * BN + r] = it.b[0];
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // items sharing a group write the same factors
          const int g = (it.e[h] - base) / Tr::kGroup;
          if constexpr (kFs) reinterpret_cast<float*>(wsc)[g * BN + r] = it.a[h];  // d * sc, exact in f32
          else wsc[g * BN + r] = it.sc[h];
          if constexpr (Tr::kMin) {
            const uint32_t mn4 = (uint32_t)it.mn[h] * 0x01010101u;  // mn < 64: the half's 16 elements
            *reinterpret_cast<uint4*>(wmn + r * kMmqLd + it.e[h] - base) = make_uint4(mn4, mn4, mn4, mn4);
          }
        }
        if (i == 0) {
          wd[r] = it.d;
          if constexpr (Tr::kMin) wm[r] = it.dmin;
        }
      }
    }
    float* adx = reinterpret_cast<float*>(st + L::kAdx);
#pragma unroll
    for (int j = 0; j < kFactorPer; ++j) {
      const int c = tid + j * kThreads;
      if (!(kFactors % kThreads == 0 || c < kFactors)) continue;
      adx[c] = nx.dx[j];  // [g][BM]: c = g * BM + r
      if constexpr (Tr::kActSums > 0) reinterpret_cast<float*>(st + L::kAsum)[c] = nx.dx[j] * (float)nx.sum[j];
    }
  }

  // The lane's values of a per-row array p[row] for its row slots, and of a per-column array for its column slots
  // (factor arrays of a stage: [group][BM] / [group][BN], row index fastest).
  template <class V>
  static __device__ __forceinline__ void gather_rows(const V* p, const int (&rows)[TM][kMmaI8Rows],
                                                     V (&o)[TM][kMmaI8Rows]) {
#pragma unroll
    for (int tm = 0; tm < TM; ++tm)
#pragma unroll
      for (int r = 0; r < kMmaI8Rows; ++r) o[tm][r] = p[rows[tm][r]];
  }
  template <class V>
  static __device__ __forceinline__ void gather_cols(const V* p, const int (&cols)[TN][kMmaI8Cols],
                                                     V (&o)[TN][kMmaI8Cols]) {
#pragma unroll
    for (int tn = 0; tn < TN; ++tn)
#pragma unroll
      for (int c = 0; c < kMmaI8Cols; ++c) o[tn][c] = p[cols[tn][c]];
  }
  // Fragments of 32-element group g of the warp's TM activation tiles (at) and TN weight tiles (bt).
  static __device__ __forceinline__ void load_frags(const int8_t* at, const int8_t* bt, int g, int lane,
                                                    MmaI8A (&fa)[TM], MmaI8B (&fb)[TN]) {
#pragma unroll
    for (int tm = 0; tm < TM; ++tm) mma_i8_load_a(fa[tm], at + tm * 16 * kMmqLd + 32 * g, kMmqLd, lane);
#pragma unroll
    for (int tn = 0; tn < TN; ++tn) mma_i8_load_b(fb[tn], bt + tn * 16 * kMmqLd + 32 * g, kMmqLd, lane);
  }
  // K-quants with mins: msum = sum_k mn(k) x(k) over the step from the bias, tile by tile (fragments reloaded per
  // tile: the register cap holds acc and one msum tile); acc += -dx * (dmin * msum).
  static __device__ __forceinline__ void add_mins(const unsigned char* st, int wn_, int lane, const int8_t* at,
                                                  const int (&cols)[TN][kMmaI8Cols],
                                                  const float (&dx)[TM][kMmaI8Rows],
                                                  float (&acc)[TM][TN][kMmaI8AccPerLane]) {
    const int8_t* mt = reinterpret_cast<const int8_t*>(st + L::kWmn) + wn_ * TN * 16 * kMmqLd;
    float dw[TN][kMmaI8Cols], dmb[TN][kMmaI8Cols];
    gather_cols(reinterpret_cast<const float*>(st + L::kWm), cols, dw);  // dmin, an f16 value
#pragma unroll
    for (int tn = 0; tn < TN; ++tn)
#pragma unroll
      for (int c = 0; c < kMmaI8Cols; ++c) dmb[tn][c] = -kMmqBiasF * dw[tn][c];
#pragma unroll
    for (int tm = 0; tm < TM; ++tm)
#pragma unroll
      for (int tn = 0; tn < TN; ++tn) {
        MmaI8Acc msum;
#pragma unroll
        for (int g = 0; g < kMmqItems; ++g) {
          MmaI8A fa;
          MmaI8B fm;
          mma_i8_load_a(fa, at + tm * 16 * kMmqLd + 32 * g, kMmqLd, lane);
          mma_i8_load_b(fm, mt + tn * 16 * kMmqLd + 32 * g, kMmqLd, lane);
          if (g == 0) mma_i8_k32_bias(msum, fa, fm, kMmqBias);
          else mma_i8_k32_acc(msum, fa, fm);
        }
#pragma unroll
        for (int e = 0; e < kMmaI8AccPerLane; ++e) {
          const int r = e / kMmaI8Cols, c = e % kMmaI8Cols;
          const float t = fmaf(dw[tn][c], __int_as_float(msum.v[e]), dmb[tn][c]);  // dmin * msum, one rounding
          acc[tm][tn][e] = fmaf(-dx[tm][r], t, acc[tm][tn][e]);
        }
      }
  }

  // The step's tile products of one warp from stage `st`, added to acc. rows / cols: block-relative row of each
  // row slot and column of each column slot of this lane's accumulators.
  static __device__ __forceinline__ void compute(const unsigned char* st, int wm_, int wn_, int lane,
                                                 const int (&rows)[TM][kMmaI8Rows], const int (&cols)[TN][kMmaI8Cols],
                                                 float (&acc)[TM][TN][kMmaI8AccPerLane]) {
    const int8_t* at = reinterpret_cast<const int8_t*>(st + L::kAq) + wm_ * TM * 16 * kMmqLd;
    const int8_t* bt = reinterpret_cast<const int8_t*>(st + L::kWq) + wn_ * TN * 16 * kMmqLd;
    const float* adx = reinterpret_cast<const float*>(st + L::kAdx);
    const float* wd = reinterpret_cast<const float*>(st + L::kWd);
    const int* wsc = reinterpret_cast<const int*>(st + L::kWsc);
    if constexpr (!Tr::kInt) {
      // Legacy types: per group, acc += dw * (dx C) [ + m_w * (dx S) ].
      const float* wm = reinterpret_cast<const float*>(st + L::kWm);
      const float* ads = reinterpret_cast<const float*>(st + L::kAsum);
#pragma unroll
      for (int g = 0; g < kMmqItems; ++g) {
        MmaI8A fa[TM];
        MmaI8B fb[TN];
        load_frags(at, bt, g, lane, fa, fb);
        float dx[TM][kMmaI8Rows], dxb[TM][kMmaI8Rows], ds[TM][kMmaI8Rows], dw[TN][kMmaI8Cols], mw[TN][kMmaI8Cols];
        gather_rows(adx + g * BM, rows, dx);
        gather_cols(wd + g * BN, cols, dw);
        if constexpr (Tr::kMin) {
          gather_rows(ads + g * BM, rows, ds);
          gather_cols(wm + g * BN, cols, mw);
        }
#pragma unroll
        for (int tm = 0; tm < TM; ++tm)
#pragma unroll
          for (int r = 0; r < kMmaI8Rows; ++r) dxb[tm][r] = -kMmqBiasF * dx[tm][r];  // exact: dx is an f16 value
#pragma unroll
        for (int tm = 0; tm < TM; ++tm)
#pragma unroll
          for (int tn = 0; tn < TN; ++tn) {
            MmaI8Acc p;
            mma_i8_k32_bias(p, fa[tm], fb[tn], kMmqBias);
#pragma unroll
            for (int e = 0; e < kMmaI8AccPerLane; ++e) {
              const int r = e / kMmaI8Cols, c = e % kMmaI8Cols;
              const float t = fmaf(dx[tm][r], __int_as_float(p.v[e]), dxb[tm][r]);  // dx * C, one rounding
              float v = fmaf(dw[tn][c], t, acc[tm][tn][e]);
              if constexpr (Tr::kMin) v = fmaf(mw[tn][c], ds[tm][r], v);
              acc[tm][tn][e] = v;
            }
          }
      }
      return;
    } else if constexpr (kFs) {
      // Q4_K / Q5_K with float group factors: per 32-element group g, acc += dx * (d sc_g C_g), with d sc_g C_g from
      // the bias (|C_g| < 2^17; d sc_g = Item::a, exact in f32, stored by store_next, has at most 17 significant
      // bits, so -1.5 * 2^23 * d sc_g is exact: the column factor goes first, the Q8_K scale dx, a full f32, second):
      // the legacy epilogue's two FMAs per element and group instead of an integer isum tile per warp tile (32
      // registers fewer: at the 128-register cap ptxas sm_90 spills 64 bytes a thread instead of 104, 128 x 64).
      float dx[TM][kMmaI8Rows];
      gather_rows(adx, rows, dx);
#pragma unroll
      for (int g = 0; g < kMmqItems; ++g) {
        MmaI8A fa[TM];
        MmaI8B fb[TN];
        load_frags(at, bt, g, lane, fa, fb);
        float ds[TN][kMmaI8Cols], dsb[TN][kMmaI8Cols];
        gather_cols(reinterpret_cast<const float*>(wsc) + g * BN, cols, ds);
#pragma unroll
        for (int tn = 0; tn < TN; ++tn)
#pragma unroll
          for (int c = 0; c < kMmaI8Cols; ++c) dsb[tn][c] = -kMmqBiasF * ds[tn][c];  // exact (above)
#pragma unroll
        for (int tm = 0; tm < TM; ++tm)
#pragma unroll
          for (int tn = 0; tn < TN; ++tn) {
            MmaI8Acc p;
            mma_i8_k32_bias(p, fa[tm], fb[tn], kMmqBias);
#pragma unroll
            for (int e = 0; e < kMmaI8AccPerLane; ++e) {
              const int r = e / kMmaI8Cols, c = e % kMmaI8Cols;
              const float t = fmaf(ds[tn][c], __int_as_float(p.v[e]), dsb[tn][c]);  // d sc C, one rounding
              acc[tm][tn][e] = fmaf(dx[tm][r], t, acc[tm][tn][e]);
            }
          }
      }
      if constexpr (Tr::kMin) add_mins(st, wn_, lane, at, cols, dx, acc);
    } else {
      MmaI8Acc isum[TM][TN];
#pragma unroll
      for (int tm = 0; tm < TM; ++tm)
#pragma unroll
        for (int tn = 0; tn < TN; ++tn)
#pragma unroll
          for (int e = 0; e < kMmaI8AccPerLane; ++e) isum[tm][tn].v[e] = 0;
#pragma unroll
      for (int g = 0; g < kMmqItems; ++g) {
        MmaI8A fa[TM];
        MmaI8B fb[TN];
        load_frags(at, bt, g, lane, fa, fb);
        if constexpr (T == DType::Q8_K) {  // sc = 1: the tensor cores accumulate
#pragma unroll
          for (int tm = 0; tm < TM; ++tm)
#pragma unroll
            for (int tn = 0; tn < TN; ++tn) mma_i8_k32_acc(isum[tm][tn], fa[tm], fb[tn]);
        } else if constexpr (Tr::kGroup == 32) {
          int sc[TN][kMmaI8Cols];
          gather_cols(wsc + g * BN, cols, sc);
#pragma unroll
          for (int tm = 0; tm < TM; ++tm)
#pragma unroll
            for (int tn = 0; tn < TN; ++tn) {
              MmaI8Acc p;
              mma_i8_k32(p, fa[tm], fb[tn]);
#pragma unroll
              for (int e = 0; e < kMmaI8AccPerLane; ++e) isum[tm][tn].v[e] += sc[tn][e % kMmaI8Cols] * p.v[e];
            }
        } else {
          int sc0[TN][kMmaI8Cols], sc1[TN][kMmaI8Cols];
          gather_cols(wsc + (2 * g) * BN, cols, sc0);
          gather_cols(wsc + (2 * g + 1) * BN, cols, sc1);
#pragma unroll
          for (int tm = 0; tm < TM; ++tm)
#pragma unroll
            for (int tn = 0; tn < TN; ++tn) {
              MmaI8Acc p0, p1;
              mma_i8_k16x2(p0, p1, fa[tm], fb[tn]);
#pragma unroll
              for (int e = 0; e < kMmaI8AccPerLane; ++e) {
                isum[tm][tn].v[e] += sc0[tn][e % kMmaI8Cols] * p0.v[e] + sc1[tn][e % kMmaI8Cols] * p1.v[e];
              }
            }
        }
      }
      // acc += (dx * d) * isum
      float dx[TM][kMmaI8Rows], dw[TN][kMmaI8Cols];
      gather_rows(adx, rows, dx);
      gather_cols(wd, cols, dw);
#pragma unroll
      for (int tm = 0; tm < TM; ++tm)
#pragma unroll
        for (int tn = 0; tn < TN; ++tn)
#pragma unroll
          for (int e = 0; e < kMmaI8AccPerLane; ++e) {
            const int r = e / kMmaI8Cols, c = e % kMmaI8Cols;
            acc[tm][tn][e] = fmaf(dx[tm][r] * dw[tn][c], (float)isum[tm][tn].v[e], acc[tm][tn][e]);
          }
      if constexpr (Tr::kMin) add_mins(st, wn_, lane, at, cols, dx, acc);
    }
  }
};

// A thread's accumulators acc[tm][tn][e] (at row m0 + rows[tm][e / kMmaI8Cols], column n0 + cols[tn][e % kMmaI8Cols]
// of the [m, n] result) into dst[row * ld + col], the rows < m and columns < n only.
template <int TM, int TN>
__device__ __forceinline__ void store_mmq_acc(const float (&acc)[TM][TN][kMmaI8AccPerLane],
                                              const int (&rows)[TM][kMmaI8Rows], const int (&cols)[TN][kMmaI8Cols],
                                              int64_t m0, int64_t n0, int64_t m, int64_t n, float* dst, int64_t ld) {
#pragma unroll
  for (int tm = 0; tm < TM; ++tm)
#pragma unroll
    for (int tn = 0; tn < TN; ++tn)
#pragma unroll
      for (int e = 0; e < kMmaI8AccPerLane; ++e) {
        const int64_t row = m0 + rows[tm][e / kMmaI8Cols], col = n0 + cols[tn][e % kMmaI8Cols];
        if (row < m && col < n) dst[row * ld + col] = acc[tm][tn][e];
      }
}

// grid (ceil(N / BN), ceil(M / BM), splits); block Mmq::kThreads; dynamic shared memory MmqLayout::kBytes.
// Split z covers steps [z * steps_per_split, ...); with gridDim.z > 1 it writes partial[z][M][N] and counts itself on
// counters[blockIdx.y * gridDim.x + blockIdx.x] (zero at launch); the last split of a tile writes the tile and sets
// the counter back to zero (so row chunks of one qmatmul can reuse the counters).
// kMmqWarpsPerSm warps per multiprocessor (a register cap of 128 per thread): one block's barriers overlap other
// blocks' tile products.
template <DType T, int BM, int BN, int TM, int TN, int kFlags>
__global__ void __launch_bounds__((Mmq<T, BM, BN, TM, TN, kFlags>::kThreads),
                                  (Mmq<T, BM, BN, TM, TN, kFlags>::kMinBlocks))
    quant_mmq_kernel(MmqArgs a, float* __restrict__ partial, int* __restrict__ counters, int64_t steps_per_split,
                     int serial_reduce) {
  using K = Mmq<T, BM, BN, TM, TN, kFlags>;
  using L = typename K::L;
  extern __shared__ __align__(16) unsigned char mmq_smem[];
  __shared__ int mmq_last;
  constexpr int W = RBEE_DEVICE_WARP_SIZE;
  const int tid = threadIdx.x, lane = tid % W, warp = tid / W;
  const int wm_ = warp / K::kWarpsN, wn_ = warp % K::kWarpsN;
  const int64_t n0 = blockIdx.x * (int64_t)BN, m0 = blockIdx.y * (int64_t)BM;
  const int64_t steps = (a.k + kMmqStepK - 1) / kMmqStepK;
  const int64_t s0 = blockIdx.z * steps_per_split, s1 = min(steps, s0 + steps_per_split);

  int rows[TM][kMmaI8Rows], cols[TN][kMmaI8Cols];
#pragma unroll
  for (int tm = 0; tm < TM; ++tm)
#pragma unroll
    for (int r = 0; r < kMmaI8Rows; ++r) rows[tm][r] = (wm_ * TM + tm) * 16 + mma_i8_row(lane, r);
#pragma unroll
  for (int tn = 0; tn < TN; ++tn)
#pragma unroll
    for (int c = 0; c < kMmaI8Cols; ++c) cols[tn][c] = (wn_ * TN + tn) * 16 + mma_i8_col(lane, c);

  float acc[TM][TN][kMmaI8AccPerLane];
#pragma unroll
  for (int tm = 0; tm < TM; ++tm)
#pragma unroll
    for (int tn = 0; tn < TN; ++tn)
#pragma unroll
      for (int e = 0; e < kMmaI8AccPerLane; ++e) acc[tm][tn][e] = 0.f;

  typename K::Next nx;
  if (s0 < s1) {  // the first step into stage 0
    K::copy_acts(a, m0, s0, mmq_smem, tid);
    copy_async_commit();
    K::load_next(a, m0, n0, s0, nx, tid);
    K::store_next(a, s0, nx, mmq_smem, tid);
    copy_async_wait_all();
    __syncthreads();
  }
  for (int64_t s = s0; s < s1; ++s) {
    unsigned char* cur = mmq_smem + ((s - s0) & 1) * L::kStage;
    unsigned char* nxt = mmq_smem + (((s - s0) & 1) ^ 1) * L::kStage;
    const bool more = s + 1 < s1;  // uniform over the block
    if (more) {
      K::copy_acts(a, m0, s + 1, nxt, tid);
      copy_async_commit();
      K::load_next(a, m0, n0, s + 1, nx, tid);
    }
    K::compute(cur, wm_, wn_, lane, rows, cols, acc);
    if (more) K::store_next(a, s + 1, nx, nxt, tid);
    copy_async_wait_all();
    __syncthreads();
  }

  if (gridDim.z == 1) {
    store_mmq_acc<TM, TN>(acc, rows, cols, m0, n0, a.m, a.n, a.out, a.ldo);
    return;
  }
  // Split K: publish this split's partial tile, count it; the last split of the tile adds them all in z order.
  const int64_t mn = a.m * a.n;
  store_mmq_acc<TM, TN>(acc, rows, cols, m0, n0, a.m, a.n, partial + blockIdx.z * mn, a.n);
  thread_fence();
  __syncthreads();
  if (tid == 0) mmq_last = atomic_add_i32(&counters[blockIdx.y * gridDim.x + blockIdx.x], 1) == (int)gridDim.z - 1;
  __syncthreads();
  if (!mmq_last) return;
  // Every split has counted: the counter is ready for the next launch.
  if (tid == 0) counters[blockIdx.y * gridDim.x + blockIdx.x] = 0;
  thread_fence();
  const volatile float* parts = partial;  // written by other blocks of this launch: not from this SM's L1
  if (serial_reduce) {  // main's order of loads (RBEE_MMQ_PATH=0): one partial after the other per element
#pragma unroll
    for (int tm = 0; tm < TM; ++tm)
#pragma unroll
      for (int tn = 0; tn < TN; ++tn)
#pragma unroll
        for (int e = 0; e < kMmaI8AccPerLane; ++e) {
          const int64_t row = m0 + rows[tm][e / kMmaI8Cols], col = n0 + cols[tn][e % kMmaI8Cols];
          const float mine = acc[tm][tn][e];
          if (row < a.m && col < a.n) {
            float sum = 0.f;
            for (unsigned z = 0; z < gridDim.z; ++z) {
              const float v = z == blockIdx.z ? mine : parts[z * mn + row * a.n + col];
              sum = z == 0 ? v : sum + v;
            }
            a.out[row * a.ldo + col] = sum;
          }
        }
    return;
  }
  // The sums in z order, split after split, this block's own partial read back like the others (so acc holds the
  // sums: no second array of registers): a split's loads of all the thread's elements are independent and in
  // flight together, one memory latency per split instead of one per element and split. The same sums, in the same
  // order, as adding each element's partials one after the other.
  for (unsigned z = 0; z < gridDim.z; ++z) {
#pragma unroll
    for (int tm = 0; tm < TM; ++tm)
#pragma unroll
      for (int tn = 0; tn < TN; ++tn)
#pragma unroll
        for (int e = 0; e < kMmaI8AccPerLane; ++e) {
          // Rows / columns past M / N read the last one's partial (written: the tile holds it) and are not stored.
          const int64_t row = min(m0 + rows[tm][e / kMmaI8Cols], a.m - 1);
          const int64_t col = min(n0 + cols[tn][e % kMmaI8Cols], a.n - 1);
          const float v = parts[z * mn + row * a.n + col];
          acc[tm][tn][e] = z == 0 ? v : acc[tm][tn][e] + v;
        }
  }
  store_mmq_acc<TM, TN>(acc, rows, cols, m0, n0, a.m, a.n, a.out, a.ldo);
}

#endif  // device compilation

// Warps per multiprocessor the split-K choice counts as resident (kMmqWarpsPerSm unless RBEE_MMQ_WARPS_PER_SM says
// otherwise: a measurement knob).
inline int mmq_warps_per_sm() {
  static const int warps = [] {
    return (int)env::integer_or("RBEE_MMQ_WARPS_PER_SM", kMmqWarpsPerSm, 1, 64);
  }();
  return warps;
}

// RBEE_MMQ_PATH (measurements, back to back in one run): 0 main's MMQ as of fdaaf76 (split-K partials added one
// element after the other), 1 session 4's (quicker split-K sum, float group factors for Q4_K / Q5_K), 2 that with
// wider weight tiles from M = 33 on (launch_mmq_typed), 3 this version (the default): 1 plus aligned weight loads
// for Q4_K / Q5_K rows at 16-byte aligned addresses (launch_mmq_tile).
inline int mmq_path() {
  static const int path = [] {
    return (int)env::integer_or("RBEE_MMQ_PATH", 3, 0, 3);
  }();
  return path;
}

// Splits of K for a launch of `tiles` output tiles of `steps` K steps each on `slots` resident blocks
// (split_k_choice: waves times a block's share of K plus its first step, which nothing overlaps; the partial sums
// are not counted). At most kMmqMaxSplits, and never more tiles than counters.
inline int64_t mmq_splits(int64_t tiles, int64_t steps, int64_t slots, bool have_counters) {
  if (!have_counters || tiles > kMmqCounters || steps < 2) return 1;
  return split_k_choice(tiles, steps, slots, kMmqMaxSplits, SplitKCost{});
}

// Launches one tile shape over all of args (rows in chunks that keep gridDim.y in range).
template <DType T, int BM, int BN, int TM, int TN, int kFlags>
void launch_mmq_shape(GpuDevice& device, const MmqArgs& a) {
  constexpr int kWarps = (BM / (16 * TM)) * (BN / (16 * TN));
  constexpr int kSmem = MmqLayout<T, BM, BN>::kBytes;
  const void* kernel = reinterpret_cast<const void*>(&quant_mmq_kernel<T, BM, BN, TM, TN, kFlags>);
  static std::atomic<uint64_t> opted{0};
  opt_in_dynamic_smem(device, kernel, kSmem, opted);
  const int threads = kWarps * device.props().warp_size;
  const int64_t steps = (a.k + kMmqStepK - 1) / kMmqStepK;
  // Blocks resident at once: the warps per multiprocessor __launch_bounds__ plans for (kMinBlocks blocks each; a
  // launch whose shared memory allows fewer gets fewer, which only makes the split choice less than ideal).
  const int64_t slots =
      std::max<int64_t>(1, (int64_t)mmq_warps_per_sm() / kWarps) * (int64_t)device.props().multiprocessors;
  const int64_t nb = (a.n + BN - 1) / BN;
  constexpr int64_t kMaxGridY = 65535;
  for (int64_t r0 = 0; r0 < a.m; r0 += kMaxGridY * BM) {
    MmqArgs c = a;
    c.m = std::min(a.m - r0, kMaxGridY * BM);
    c.x.q += r0 * a.k;
    c.x.d += r0 * (a.k / 32);
    c.x.s += r0 * (a.k / 16);
    c.out += r0 * a.ldo;
    const int64_t mb = (c.m + BM - 1) / BM;
    const int64_t splits = mmq_splits(nb * mb, steps, slots, a.counters != nullptr);
    const int64_t per = (steps + splits - 1) / splits;  // splits * per covers K, every split has steps
    Tensor partial;
    float* pp = nullptr;
    if (splits > 1) {
      partial = Tensor::empty({splits * c.m * c.n}, DType::F32, device);
      pp = static_cast<float*>(partial.data());
    }
    const dim3 grid((unsigned)nb, (unsigned)mb, (unsigned)splits);
    const int serial = mmq_path() == 0 ? 1 : 0;
    quant_mmq_kernel<T, BM, BN, TM, TN, kFlags><<<grid, threads, kSmem, device.stream()>>>(c, pp, a.counters, per,
                                                                                        serial);
    RBEE_GPU_CHECK_LAUNCH();
  }
}

// One tile shape; Q4_K / Q5_K take the float group factors (Mmq's kFs) from the 32-row tile on unless
// RBEE_MMQ_PATH=0 (main's integer form), and aligned loads (kMmqAligned16) where the rows allow unless
// RBEE_MMQ_PATH=1 or 2. ptxas sm_90 (nvcc 13), bytes spilled a thread at the 128-register cap, Q4_K:
//   integer / float factors (session 4): 32 x 64 44 / 16, 64 x 64 40 / 20, 128 x 64 104 / 64, 128 x 128 104 / 40;
//   float factors unaligned / aligned (session 5): 16 x 64 (integer) 4 / 0, 32 x 64 24 / 40, 64 x 64 24 / 12,
//   128 x 64 64 / 48, 128 x 128 48 / 56: the 32-row tile (M 17..32) keeps the unaligned form.
template <DType T, int BM, int BN, int TM, int TN>
void launch_mmq_tile(GpuDevice& device, const MmqArgs& a) {
  if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    const int path = mmq_path();
    constexpr int kFs = BM > 16 ? kMmqFloatScales : 0;
    if constexpr (BM != 32) {
      // Every block of a row at a 16-byte aligned address: the row start and the row stride (K-quant rows are
      // multiples of 144 / 176 bytes, so only a view at an odd offset misses it).
      const bool aligned = reinterpret_cast<uintptr_t>(a.w) % 16 == 0 && a.row_bytes % 16 == 0;
      if (path >= 3 && aligned) {
        launch_mmq_shape<T, BM, BN, TM, TN, kFs | kMmqAligned16>(device, a);
        return;
      }
    }
    if (path != 0) {
      launch_mmq_shape<T, BM, BN, TM, TN, kFs>(device, a);
      return;
    }
  }
  launch_mmq_shape<T, BM, BN, TM, TN, 0>(device, a);
}

// Tile shapes by M: the block's activation rows follow M up to 128 (fewer padded rows for batched decode), with
// 64 weight rows per block; each thread decodes one or two weight items per step. Warps own 16 x 16 (M <= 16),
// 32 x 16 (M <= 64) or 32 x 32 tiles. The 128-row tile takes 80 KiB of shared memory for K-quants with mins
// (two stages): where a block cannot have that much (gfx9's 64 KiB), the 64-row tile serves every M above 32.
// RBEE_MMQ_PATH=2 (a measurement of wider weight tiles): 128 weight rows per block from M = 33 on, 64 x 128 (8 warps)
// up to 64 rows and 128 x 128 (16 warps, one block per multiprocessor) above, where the block's shared memory
// allows: each activation byte read from L2 serves twice the weight rows (the 128 x 64 tile's ncu profile on the
// H100 shows L2 throughput as its top unit, 69-80%).
template <DType T>
void launch_mmq_typed(GpuDevice& device, const MmqArgs& a) {
  const size_t optin = device.props().shared_mem_per_block_optin;
  if (a.m > 32 && mmq_path() == 2) {
    if (a.m <= 64 && (size_t)MmqLayout<T, 64, 128>::kBytes <= optin) {
      launch_mmq_tile<T, 64, 128, 2, 2>(device, a);  // 8 warps
      return;
    }
    if (a.m > 64 && (size_t)MmqLayout<T, 128, 128>::kBytes <= optin) {
      launch_mmq_tile<T, 128, 128, 2, 2>(device, a);  // 16 warps
      return;
    }
  }
  if (a.m <= 16) launch_mmq_tile<T, 16, 64, 1, 1>(device, a);       // 4 warps
  else if (a.m <= 32) launch_mmq_tile<T, 32, 64, 2, 1>(device, a);  // 4 warps
  else if (a.m <= 64 || (size_t)MmqLayout<T, 128, 64>::kBytes > optin) {
    launch_mmq_tile<T, 64, 64, 2, 1>(device, a);  // 8 warps
  } else {
    launch_mmq_tile<T, 128, 64, 2, 2>(device, a);  // 8 warps
  }
}

}  // namespace rbee::gpu::quant
