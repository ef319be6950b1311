// MMQ: out [M, N] = x^ [M, K] . w [N, K]^T for block-type weights on int8 tensor cores (qmatmul from kMmqMinRows
// rows on: batched decode and prompts). x^ are the activations quantized by quant_activation.cu (int8 levels, a
// scale per 32, level sums per 16); the weights are decoded from their packed blocks by decode_item, the one
// decoder of quant_blocks.cuh. A block dot product is then an integer sum, computed exactly by the platform's
// warp-level tile product (mma_i8_k32 / mma_i8_k16x2, backends/gpu/platform.h), and scaled in f32 as the matvec
// (quant_matvec.cuh) scales its dot4 sums: same semantics, only f32 rounding differs.
//
// Tiling. A block computes BM activation rows x BN weight rows; its (BM / 16 TM) x (BN / 16 TN) warps own TM x TN
// tiles of 16 x 16 each. K advances in steps of kMmqStepK = 128 elements (4 legacy blocks, half a super-block):
//  1. the block copies the step's activation levels ([BM][128] int8) and factors to shared memory and decodes the
//     BN x 4 weight items of the step into int8 levels in natural element order ([BN][128]) with their factors
//     (rows past M or N repeat the last row and are not stored; elements past K are zero);
//  2. barrier; per group of 32 elements each warp loads its A and B fragments once and runs its TM x TN tile
//     products, then scales the int32 sums:
//       legacy types (activation scale dx per 32, weight scale d_w per 32 and min m_w for Q4_1 / Q5_1):
//         acc += (dx * d_w) * C  [+ m_w * (dx * S)],   S = the 32 activation levels' sum
//       256-element types (one activation scale per step; integer sub-block scales sc, mins mn; one d, dmin):
//         isum += sc * C (k16x2 for types with a scale per 16); the mins' sum_k mn(k) x(k) is a tile product too,
//         of the activations with a tile holding each element's mn, accumulated in the tensor cores (msum);
//         at the end of the step acc += dx * (d * isum - dmin * msum)  (integers exact: < 2^31 by the level ranges)
//  3. barrier.
// Shared memory stays under 48 KiB per block (no opt-in on CUDA, fits gfx9's 64 KiB LDS); several blocks per
// multiprocessor overlap one block's loads with another's tensor-core work.
//
// Split-K: when the M x N tiles give fewer than 8 warps per multiprocessor (batched decode), the K steps are split
// over gridDim.z (<= 16, for up to 16 warps per multiprocessor) blocks writing partial sums, which a second kernel
// adds in a fixed order (deterministic; the partials of a few rows mostly stay in L2).
#pragma once

#include <algorithm>

#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/quant_blocks.cuh"
#include "backends/gpu/kernels/quant_launch.h"

namespace rbee::gpu::quant {

inline constexpr int kMmqStepK = 128;            // K elements per step
inline constexpr int kMmqLd = kMmqStepK + 16;    // shared-memory row stride of the level tiles: 16-byte rows that
                                                 // start 4 banks apart, so fragment loads are conflict-free
inline constexpr int kMmqItems = kMmqStepK / 32;  // weight items per row and step
inline constexpr int64_t kMmqMaxSplits = 16;
// Warps per multiprocessor that the grid should supply (split-K below that) and that the register cap of
// __launch_bounds__ allows (128 registers per thread for any block size).
inline constexpr int kMmqWarpsPerSm = 16;

template <DType T>
struct MmqTraits {
  using B = BlockTraits<T>;
  static constexpr bool kInt = B::kQK == 256;  // integer sub-block scales, one activation scale per step
  static constexpr bool kMin = B::kHasMin;
  // Elements sharing one weight scale (and min).
  static constexpr int kGroup = (T == DType::Q2_K || T == DType::Q3_K || T == DType::Q6_K) ? 16 : 32;
  static constexpr int kGroups = kMmqStepK / kGroup;
  // Shared-memory arrays (counts of 4-byte values per activation row / weight row).
  static constexpr int kActScales = kInt ? 1 : kMmqItems;         // dx
  static constexpr int kActSums = kMin && !kInt ? kMmqItems : 0;  // dx * S (float)
  static constexpr int kWScales = kInt ? 1 : kMmqItems;           // d_w / d
  static constexpr int kWMins = !kMin ? 0 : kInt ? 1 : kMmqItems;  // m_w / -dmin
  static constexpr int kWSubScales = kInt ? kGroups : 0;          // sc
  static constexpr int kWMinTile = kInt && kMin ? kMmqLd : 0;     // bytes per row: mn of each element
};

// Byte offsets of a block's shared memory; each array is [count][BM or BN] (row index fastest).
template <DType T, int BM, int BN>
struct MmqLayout {
  using Tr = MmqTraits<T>;
  static constexpr int kAq = 0;
  static constexpr int kWq = kAq + BM * kMmqLd;
  static constexpr int kAdx = kWq + BN * kMmqLd;
  static constexpr int kAsum = kAdx + 4 * Tr::kActScales * BM;
  static constexpr int kWd = kAsum + 4 * Tr::kActSums * BM;
  static constexpr int kWm = kWd + 4 * Tr::kWScales * BN;
  static constexpr int kWsc = kWm + 4 * Tr::kWMins * BN;
  static constexpr int kWmn = kWsc + 4 * Tr::kWSubScales * BN;  // int8 [BN][kMmqLd]
  static constexpr int kBytes = kWmn + Tr::kWMinTile * BN;
  static_assert(kBytes <= 48 * 1024, "MMQ tiles must fit 48 KiB of shared memory");
};

#if defined(__CUDACC__) || defined(__HIPCC__)

template <DType T, int BM, int BN, int TM, int TN>
struct Mmq {
  using Tr = MmqTraits<T>;
  using B = BlockTraits<T>;
  using L = MmqLayout<T, BM, BN>;
  static constexpr int kWarpsN = BN / (16 * TN);
  static constexpr int kWarps = (BM / (16 * TM)) * kWarpsN;
  static constexpr int kThreads = kWarps * RBEE_DEVICE_WARP_SIZE;
  static constexpr int kMinBlocks = kMmqWarpsPerSm / kWarps > 1 ? kMmqWarpsPerSm / kWarps : 1;
  static_assert(BM % (16 * TM) == 0 && BN % (16 * TN) == 0, "warp tiles must divide the block tile");

  // Step s's activation rows m0 .. m0 + BM into shared memory.
  static __device__ __forceinline__ void load_acts(const MmqArgs& a, int64_t m0, int64_t s, unsigned char* sm,
                                                   int tid) {
    const int64_t k = a.k, k32 = k / 32, k16 = k / 16, e0 = s * kMmqStepK;
    int8_t* aq = reinterpret_cast<int8_t*>(sm + L::kAq);
    // All loads first, then all stores: no shared-memory store between them, so they are in flight together.
    constexpr int kPieces = BM * (kMmqStepK / 16), kPer = (kPieces + kThreads - 1) / kThreads;
    uint4 v[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int c = tid + j * kThreads, r = c / (kMmqStepK / 16), p = c % (kMmqStepK / 16);
      const int64_t e = e0 + 16 * p;  // k is a multiple of 32: a 16-byte piece lies wholly inside or outside
      v[j] = make_uint4(0, 0, 0, 0);
      if ((kPieces % kThreads == 0 || c < kPieces) && e < k) {
        v[j] = *reinterpret_cast<const uint4*>(a.x.q + min(m0 + r, a.m - 1) * k + e);
      }
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int c = tid + j * kThreads, r = c / (kMmqStepK / 16), p = c % (kMmqStepK / 16);
      if (kPieces % kThreads == 0 || c < kPieces) *reinterpret_cast<uint4*>(aq + r * kMmqLd + 16 * p) = v[j];
    }
    float* adx = reinterpret_cast<float*>(sm + L::kAdx);
    if constexpr (!Tr::kInt) {
      for (int c = tid; c < BM * kMmqItems; c += kThreads) {
        const int r = c % BM, g = c / BM;
        const int64_t row = min(m0 + r, a.m - 1);
        const int64_t e = e0 + 32 * g;
        const bool in = e < k;
        const float dx = in ? a.x.d[row * k32 + e / 32] : 0.f;
        adx[g * BM + r] = dx;
        if constexpr (Tr::kMin) {
          float ds = 0.f;
          if (in) {
            const int2 sv = *reinterpret_cast<const int2*>(a.x.s + row * k16 + e / 16);
            ds = dx * (float)(sv.x + sv.y);
          }
          reinterpret_cast<float*>(sm + L::kAsum)[g * BM + r] = ds;
        }
      }
    } else {
      // K is a multiple of 256 for these types: the whole step is inside, under one Q8_K scale.
      for (int r = tid; r < BM; r += kThreads) adx[r] = a.x.d[min(m0 + r, a.m - 1) * k32 + e0 / 32];
    }
  }

  // Step s's weight rows n0 .. n0 + BN, decoded into shared memory.
  static __device__ __forceinline__ void load_weights(const MmqArgs& a, int64_t n0, int64_t s, unsigned char* sm,
                                                      int tid) {
    int8_t* wq = reinterpret_cast<int8_t*>(sm + L::kWq);
    float* wd = reinterpret_cast<float*>(sm + L::kWd);
    float* wm = reinterpret_cast<float*>(sm + L::kWm);
    int* wsc = reinterpret_cast<int*>(sm + L::kWsc);
    int8_t* wmn = reinterpret_cast<int8_t*>(sm + L::kWmn);
    // Consecutive threads take consecutive items of a row. All of a thread's items are decoded (their loads in
    // flight together) before any is stored.
    constexpr int kTasks = BN * kMmqItems, kPer = (kTasks + kThreads - 1) / kThreads;
    Item items[kPer];
    bool inside[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int t = tid + j * kThreads, r = t / kMmqItems, i = t % kMmqItems;
      const uint8_t* wrow = a.w + min(n0 + r, a.n - 1) * a.row_bytes;
      inside[j] = kTasks % kThreads == 0 || t < kTasks;
      if constexpr (B::kQK == 32) {
        const int64_t blk = s * kMmqItems + i;
        inside[j] = inside[j] && blk * 32 < a.k;  // k is a multiple of 32, not of 128
        if (inside[j]) decode_item<T>(wrow + blk * B::kTS, 0, items[j]);
      } else {
        if (inside[j]) decode_item<T>(wrow + (s / 2) * B::kTS, (int)(s % 2) * kMmqItems + i, items[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int t = tid + j * kThreads, r = t / kMmqItems, i = t % kMmqItems;
      if (!(kTasks % kThreads == 0 || t < kTasks)) continue;
      int8_t* dst = wq + r * kMmqLd;
      if (!inside[j]) {  // a legacy block past K: zero levels and factors
        *reinterpret_cast<uint4*>(dst + 32 * i) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(dst + 32 * i + 16) = make_uint4(0, 0, 0, 0);
        wd[i * BN + r] = 0.f;
        if constexpr (Tr::kMin) wm[i * BN + r] = 0.f;
        continue;
      }
      const Item& it = items[j];
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
          wsc[g * BN + r] = it.sc[h];
          if constexpr (Tr::kMin) {
            const uint32_t mn4 = (uint32_t)it.mn[h] * 0x01010101u;  // mn < 64: the half's 16 elements
            *reinterpret_cast<uint4*>(wmn + r * kMmqLd + it.e[h] - base) = make_uint4(mn4, mn4, mn4, mn4);
          }
        }
        if (i == 0) {
          wd[r] = it.d;
          if constexpr (Tr::kMin) wm[r] = -it.dmin;
        }
      }
    }
  }

  // The step's tile products of one warp, added to acc. rows / cols: block-relative row of each row slot and
  // column of each column slot of this lane's accumulators.
  static __device__ __forceinline__ void compute(const unsigned char* sm, int wm_, int wn_, int lane,
                                                 const int (&rows)[TM][kMmaI8Rows], const int (&cols)[TN][kMmaI8Cols],
                                                 float (&acc)[TM][TN][kMmaI8AccPerLane]) {
    const int8_t* at = reinterpret_cast<const int8_t*>(sm + L::kAq) + wm_ * TM * 16 * kMmqLd;
    const int8_t* bt = reinterpret_cast<const int8_t*>(sm + L::kWq) + wn_ * TN * 16 * kMmqLd;
    const float* adx = reinterpret_cast<const float*>(sm + L::kAdx);
    const float* wd = reinterpret_cast<const float*>(sm + L::kWd);
    const float* wm = reinterpret_cast<const float*>(sm + L::kWm);
    const int* wsc = reinterpret_cast<const int*>(sm + L::kWsc);
    int isum[TM][TN][kMmaI8AccPerLane];
    if constexpr (Tr::kInt) {
#pragma unroll
      for (int tm = 0; tm < TM; ++tm)
#pragma unroll
        for (int tn = 0; tn < TN; ++tn)
#pragma unroll
          for (int e = 0; e < kMmaI8AccPerLane; ++e) isum[tm][tn][e] = 0;
    }
#pragma unroll
    for (int g = 0; g < kMmqItems; ++g) {
      MmaI8A fa[TM];
      MmaI8B fb[TN];
#pragma unroll
      for (int tm = 0; tm < TM; ++tm) mma_i8_load_a(fa[tm], at + tm * 16 * kMmqLd + 32 * g, kMmqLd, lane);
#pragma unroll
      for (int tn = 0; tn < TN; ++tn) mma_i8_load_b(fb[tn], bt + tn * 16 * kMmqLd + 32 * g, kMmqLd, lane);
      if constexpr (!Tr::kInt) {
        const float* ads = reinterpret_cast<const float*>(sm + L::kAsum);
        float dx[TM][kMmaI8Rows], ds[TM][kMmaI8Rows], dw[TN][kMmaI8Cols], mw[TN][kMmaI8Cols];
#pragma unroll
        for (int tm = 0; tm < TM; ++tm)
#pragma unroll
          for (int r = 0; r < kMmaI8Rows; ++r) {
            dx[tm][r] = adx[g * BM + rows[tm][r]];
            if constexpr (Tr::kMin) ds[tm][r] = ads[g * BM + rows[tm][r]];
          }
#pragma unroll
        for (int tn = 0; tn < TN; ++tn)
#pragma unroll
          for (int c = 0; c < kMmaI8Cols; ++c) {
            dw[tn][c] = wd[g * BN + cols[tn][c]];
            if constexpr (Tr::kMin) mw[tn][c] = wm[g * BN + cols[tn][c]];
          }
#pragma unroll
        for (int tm = 0; tm < TM; ++tm)
#pragma unroll
          for (int tn = 0; tn < TN; ++tn) {
            MmaI8Acc p;
            mma_i8_k32(p, fa[tm], fb[tn]);
#pragma unroll
            for (int r = 0; r < kMmaI8Rows; ++r)
#pragma unroll
              for (int c = 0; c < kMmaI8Cols; ++c) {
                const int e = r * kMmaI8Cols + c;
                float v = fmaf(dx[tm][r] * dw[tn][c], (float)p.v[e], acc[tm][tn][e]);
                if constexpr (Tr::kMin) v = fmaf(mw[tn][c], ds[tm][r], v);
                acc[tm][tn][e] = v;
              }
          }
      } else if constexpr (Tr::kGroup == 32) {
        int sc[TN][kMmaI8Cols];
#pragma unroll
        for (int tn = 0; tn < TN; ++tn)
#pragma unroll
          for (int c = 0; c < kMmaI8Cols; ++c) sc[tn][c] = wsc[g * BN + cols[tn][c]];
#pragma unroll
        for (int tm = 0; tm < TM; ++tm)
#pragma unroll
          for (int tn = 0; tn < TN; ++tn) {
            MmaI8Acc p;
            mma_i8_k32(p, fa[tm], fb[tn]);
#pragma unroll
            for (int e = 0; e < kMmaI8AccPerLane; ++e) isum[tm][tn][e] += sc[tn][e % kMmaI8Cols] * p.v[e];
          }
      } else {
        int sc0[TN][kMmaI8Cols], sc1[TN][kMmaI8Cols];
#pragma unroll
        for (int tn = 0; tn < TN; ++tn)
#pragma unroll
          for (int c = 0; c < kMmaI8Cols; ++c) {
            sc0[tn][c] = wsc[(2 * g) * BN + cols[tn][c]];
            sc1[tn][c] = wsc[(2 * g + 1) * BN + cols[tn][c]];
          }
#pragma unroll
        for (int tm = 0; tm < TM; ++tm)
#pragma unroll
          for (int tn = 0; tn < TN; ++tn) {
            MmaI8Acc p0, p1;
            mma_i8_k16x2(p0, p1, fa[tm], fb[tn]);
#pragma unroll
            for (int e = 0; e < kMmaI8AccPerLane; ++e) {
              isum[tm][tn][e] += sc0[tn][e % kMmaI8Cols] * p0.v[e] + sc1[tn][e % kMmaI8Cols] * p1.v[e];
            }
          }
      }
    }
    if constexpr (Tr::kInt) {
      // acc += dx * (d * isum - dmin * msum)
      float dx[TM][kMmaI8Rows], dw[TN][kMmaI8Cols];
#pragma unroll
      for (int tm = 0; tm < TM; ++tm)
#pragma unroll
        for (int r = 0; r < kMmaI8Rows; ++r) dx[tm][r] = adx[rows[tm][r]];
#pragma unroll
      for (int tn = 0; tn < TN; ++tn)
#pragma unroll
        for (int c = 0; c < kMmaI8Cols; ++c) dw[tn][c] = wd[cols[tn][c]];
#pragma unroll
      for (int tm = 0; tm < TM; ++tm)
#pragma unroll
        for (int tn = 0; tn < TN; ++tn)
#pragma unroll
          for (int e = 0; e < kMmaI8AccPerLane; ++e) {
            const int r = e / kMmaI8Cols, c = e % kMmaI8Cols;
            acc[tm][tn][e] = fmaf(dx[tm][r] * dw[tn][c], (float)isum[tm][tn][e], acc[tm][tn][e]);
          }
      if constexpr (Tr::kMin) {
        // msum = sum_k mn(k) x(k), accumulated in the tensor cores tile by tile once isum is folded in (fragments
        // reloaded per tile: the register cap of 128 holds acc and one msum tile).
        const int8_t* mt = reinterpret_cast<const int8_t*>(sm + L::kWmn) + wn_ * TN * 16 * kMmqLd;
#pragma unroll
        for (int tn = 0; tn < TN; ++tn)
#pragma unroll
          for (int c = 0; c < kMmaI8Cols; ++c) dw[tn][c] = wm[cols[tn][c]];  // -dmin
#pragma unroll
        for (int tm = 0; tm < TM; ++tm)
#pragma unroll
          for (int tn = 0; tn < TN; ++tn) {
            MmaI8Acc msum;
#pragma unroll
            for (int e = 0; e < kMmaI8AccPerLane; ++e) msum.v[e] = 0;
#pragma unroll
            for (int g = 0; g < kMmqItems; ++g) {
              MmaI8A fa;
              MmaI8B fm;
              mma_i8_load_a(fa, at + tm * 16 * kMmqLd + 32 * g, kMmqLd, lane);
              mma_i8_load_b(fm, mt + tn * 16 * kMmqLd + 32 * g, kMmqLd, lane);
              mma_i8_k32_acc(msum, fa, fm);
            }
#pragma unroll
            for (int e = 0; e < kMmaI8AccPerLane; ++e) {
              const int r = e / kMmaI8Cols, c = e % kMmaI8Cols;
              acc[tm][tn][e] = fmaf(dx[tm][r] * dw[tn][c], (float)msum.v[e], acc[tm][tn][e]);
            }
          }
      }
    }
  }
};

// grid (ceil(N / BN), ceil(M / BM), splits); block Mmq::kThreads; dynamic shared memory MmqLayout::kBytes.
// Split z covers steps [z * steps_per_split, ...) and writes partial[z][M][N] when gridDim.z > 1.
// kMmqWarpsPerSm warps per multiprocessor (a register cap of 128 per thread): one block's loads and barriers
// overlap other blocks' tile products.
template <DType T, int BM, int BN, int TM, int TN>
__global__ void __launch_bounds__((Mmq<T, BM, BN, TM, TN>::kThreads), (Mmq<T, BM, BN, TM, TN>::kMinBlocks))
    quant_mmq_kernel(MmqArgs a, float* __restrict__ partial, int64_t steps_per_split) {
  using K = Mmq<T, BM, BN, TM, TN>;
  extern __shared__ __align__(16) unsigned char mmq_smem[];
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

  for (int64_t s = s0; s < s1; ++s) {
    K::load_acts(a, m0, s, mmq_smem, tid);
    K::load_weights(a, n0, s, mmq_smem, tid);
    __syncthreads();
    K::compute(mmq_smem, wm_, wn_, lane, rows, cols, acc);
    __syncthreads();
  }

  float* dst = a.out;
  int64_t ldo = a.ldo;
  if (gridDim.z > 1) {
    dst = partial + blockIdx.z * a.m * a.n;
    ldo = a.n;
  }
#pragma unroll
  for (int tm = 0; tm < TM; ++tm)
#pragma unroll
    for (int tn = 0; tn < TN; ++tn)
#pragma unroll
      for (int e = 0; e < kMmaI8AccPerLane; ++e) {
        const int64_t row = m0 + rows[tm][e / kMmaI8Cols], col = n0 + cols[tn][e % kMmaI8Cols];
        if (row < a.m && col < a.n) dst[row * ldo + col] = acc[tm][tn][e];
      }
}

#endif  // device compilation

// Launches one tile shape over all of args (rows in chunks that keep gridDim.y in range).
template <DType T, int BM, int BN, int TM, int TN>
void launch_mmq_shape(GpuDevice& device, const MmqArgs& a) {
  constexpr int kWarps = (BM / (16 * TM)) * (BN / (16 * TN));
  constexpr int kSmem = MmqLayout<T, BM, BN>::kBytes;
  const int threads = kWarps * device.props().warp_size;
  const int64_t steps = (a.k + kMmqStepK - 1) / kMmqStepK;
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
    // Split K when the tiles alone give fewer than half of kMmqWarpsPerSm warps per multiprocessor (batched
    // decode), up to kMmqWarpsPerSm (prompts, e.g. 512 x 4096 in 8-warp tiles, stay whole).
    const int64_t want = kMmqWarpsPerSm * device.props().multiprocessors / kWarps;
    int64_t splits = 1;
    if (2 * nb * mb < want) splits = std::min({(want + nb * mb - 1) / (nb * mb), steps, kMmqMaxSplits});
    const int64_t per = (steps + splits - 1) / splits;
    splits = (steps + per - 1) / per;
    Tensor partial;
    float* pp = nullptr;
    if (splits > 1) {
      partial = Tensor::empty({splits * c.m * c.n}, DType::F32, device);
      pp = static_cast<float*>(partial.data());
    }
    const dim3 grid((unsigned)nb, (unsigned)mb, (unsigned)splits);
    quant_mmq_kernel<T, BM, BN, TM, TN><<<grid, threads, kSmem, device.stream()>>>(c, pp, per);
    RBEE_GPU_CHECK_LAUNCH();
    if (splits > 1) launch_mmq_reduce(device, pp, (int)splits, c.m, c.n, c.out, c.ldo);
  }
}

// Tile shapes by M: the block's activation rows follow M up to 128 (fewer padded rows for batched decode), with
// 64 weight rows per block; warps own 16 x 32 (M <= 32) or 32 x 32 tiles.
template <DType T>
void launch_mmq_typed(GpuDevice& device, const MmqArgs& a) {
  if (a.m <= 16) launch_mmq_shape<T, 16, 64, 1, 2>(device, a);        // 2 warps
  else if (a.m <= 32) launch_mmq_shape<T, 32, 64, 1, 2>(device, a);   // 4 warps
  else if (a.m <= 64) launch_mmq_shape<T, 64, 64, 2, 2>(device, a);   // 4 warps
  else launch_mmq_shape<T, 128, 64, 2, 2>(device, a);                 // 8 warps
}

}  // namespace rbee::gpu::quant
