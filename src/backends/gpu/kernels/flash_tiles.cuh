// The tensor-core flash-attention core shared by the paged attention kernel (paged_flash.cuh: LLM caches behind
// block tables) and the dense attention kernel (attention_flash.cu: [B, H, T, D] operands, Stable Diffusion's
// self- and cross-attention). One kernel family, two callers: each caller stages its own Q rows and key tiles
// and writes its own outputs; the key-tile loop below (S = Q K^T on the 16-bit matrix tiles of
// backends/gpu/platform.h, masks, online softmax in f32, P rounded to the operand type, O = O * corr + P V) is
// the same code for both.
//
// A thread block owns Cfg::kRows query rows and kWarps = WR x WK warps: warp (wr, wk) owns rows
// [16 MT wr, 16 MT (wr + 1)) and, of every key tile of BN positions, keys [BN/WK wk, BN/WK (wk + 1)).
// Shared memory (FlashCfg's offsets): Q [kRows][kLd], then K stage 0, K stage 1, V stage 0, V stage 1 (each
// [BN][kLd]), then one P tile [16 MT][kPld] per warp. Elements are 16-bit (uint16_t bit patterns).
// FAST (the default): P goes from the score accumulators to the A fragments of P V through mma_acc_to_a (in
// registers where kMmaAccToARegisters, CUDA: then no P tiles are allocated), and Q fragments are loaded once and
// kept in registers across key tiles when MT x kDT <= 8 (kQInRegs: 32 registers on CUDA). FAST false: P through the
// P tiles (store, warp_sync, load) and Q fragments reloaded for every key tile (the session-5 loop, for A/B).
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>

#include "backends/gpu/gpu_device.h"
#include "backends/gpu/kernels/common.cuh"

namespace rbee::gpu {
namespace {

template <int D_, int WR_, int WK_, int MT_, int BN_, bool FAST_ = true>
struct FlashCfg {
  static constexpr int D = D_;                  // head size (of the tiles: a caller may pad its rows with zeros)
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
  static constexpr bool kFast = FAST_;
  static constexpr bool kQInRegs = FAST_ && MT * (D / 16) <= 8;
  static constexpr bool kPInRegs = FAST_ && kMmaAccToARegisters;  // no P tiles
  static_assert(D % 16 == 0 && kWarpKeys % 16 == 0 && kNT >= 1, "tile shape");
  // Shared memory, bytes (every region a multiple of 16).
  static constexpr int kQBytes = kRows * kLd * 2;
  static constexpr int kKvStageBytes = BN * kLd * 2;  // one K (or V) stage
  static constexpr int kPBytes = kPInRegs ? 0 : kWarps * 16 * MT * kPld * 2;
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

// A warp's running state over its 16 MT rows: O accumulators, running max (log2 units) and this lane's part of
// the sum of exp, per row slot of the accumulator layout.
template <class Cfg>
struct FlashRowState {
  MmaAcc o[Cfg::MT][Cfg::kDT];
  float m[Cfg::MT][kMmaRowsPerLane], l[Cfg::MT][kMmaRowsPerLane];

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int mt = 0; mt < Cfg::MT; ++mt) {
#pragma unroll
      for (int dt = 0; dt < Cfg::kDT; ++dt) mma_zero(o[mt][dt]);
#pragma unroll
      for (int s = 0; s < kMmaRowsPerLane; ++s) {
        m[mt][s] = -INFINITY;
        l[mt][s] = 0.f;
      }
    }
  }
};

// The key-tile loop of one block. Before it, the caller has issued (not necessarily completed) the copies of its
// Q rows into the Q region; `stage(k0, st)` issues the copies of K and V rows k0 .. k0 + BN - 1 into stage st
// (positions past the block's keys as zeros) and commits them. Tile t covers keys key_lo + t BN ...; row slot s
// of tile mt of this lane sees keys [row_lo[mt][s], row_hi[mt][s]) (an empty range for rows outside the block's
// work). Scores in log2 units: s * log2(e) with s = scale q.k (qk_mul = scale log2 e), or with a softcap
// cap_mul tanh(q.k qk_mul) (qk_mul = scale / softcap, cap_mul = softcap log2 e). Ends with a block barrier after
// the last tile (the K / V stages and P tiles free again).
template <class Cfg, MmaElem E, class Stage>
__device__ __forceinline__ void flash_key_tiles(char* smem, int n_tiles, int key_lo,
                                                const int (&row_lo)[Cfg::MT][kMmaRowsPerLane],
                                                const int (&row_hi)[Cfg::MT][kMmaRowsPerLane], float qk_mul,
                                                bool capped, float cap_mul, Stage&& stage, FlashRowState<Cfg>& st) {
  constexpr int W = RBEE_DEVICE_WARP_SIZE;
  constexpr int BN = Cfg::BN, MT = Cfg::MT, NT = Cfg::kNT, DT = Cfg::kDT;
  constexpr int kLd = Cfg::kLd, kPld = Cfg::kPld, R = kMmaRowsPerLane, A = kMmaAccPerLane;
  const uint16_t* q_tile = reinterpret_cast<const uint16_t*>(smem);
  const uint16_t* kv = reinterpret_cast<const uint16_t*>(smem + Cfg::kKvOff);
  const int warp = threadIdx.x / W;
  const int wr = warp / Cfg::WK, wk = warp % Cfg::WK;
  uint16_t* p_tile = reinterpret_cast<uint16_t*>(smem + Cfg::kPOff) + warp * 16 * MT * kPld;
  const int row0 = wr * 16 * MT;  // the warp's first row in the block
  constexpr bool kQRegs = Cfg::kQInRegs;
  [[maybe_unused]] MmaA qf[kQRegs ? MT : 1][kQRegs ? DT : 1] = {};  // Q fragments kept across key tiles

  if (n_tiles > 0) stage(key_lo, 0);
  for (int t = 0; t < n_tiles; ++t) {
    const int sg = t & 1, k0 = key_lo + t * BN;
    copy_async_wait_all();
    __syncthreads();  // stage sg (and, the first time, Q) visible to every warp
    // Tile t + 1 lands while tile t is computed (its stage was consumed before the barrier ending tile t - 1).
    if (t + 1 < n_tiles) stage(k0 + BN, sg ^ 1);
    const uint16_t* kt = kv + sg * BN * kLd + wk * Cfg::kWarpKeys * kLd;
    const uint16_t* vt = kv + (2 + sg) * BN * kLd + wk * Cfg::kWarpKeys * kLd;
    if constexpr (kQRegs) {
      if (t == 0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int kk = 0; kk < DT; ++kk) mma_load_a(qf[mt][kk], q_tile + (row0 + 16 * mt) * kLd + 16 * kk, kLd);
        }
      }
    }

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
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (kQRegs) qa[mt] = qf[kQRegs ? mt : 0][kQRegs ? kk : 0];
        else mma_load_a(qa[mt], q_tile + (row0 + 16 * mt) * kLd + 16 * kk, kLd);
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        MmaB kb;
        mma_load_b_nk(kb, kt + 16 * nt * kLd + 16 * kk, kLd);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma<E>(sc[mt][nt], qa[mt], kb);
      }
    }

    // Scale, softcap, masks; the tile's row maxima. FAST: a lane whose rows all see every key of the warp's part of
    // the tile (no causal edge, window edge or tile past the keys; most tiles of long rows) skips the mask tests.
    const int key0 = k0 + wk * Cfg::kWarpKeys;
    bool full = Cfg::kFast && !capped;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int s = 0; s < R; ++s) full = full && row_lo[mt][s] <= key0 && key0 + Cfg::kWarpKeys <= row_hi[mt][s];
    }
    float tmax[MT][R];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int s = 0; s < R; ++s) tmax[mt][s] = -INFINITY;
      if (full) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
          for (int i = 0; i < A; ++i) {
            const float s = sc[mt][nt].v[i] * qk_mul;
            sc[mt][nt].v[i] = s;
            tmax[mt][mma_acc_slot(i)] = fmaxf(tmax[mt][mma_acc_slot(i)], s);
          }
        }
      } else {
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
      }
      mma_rows_max(tmax[mt]);
    }
    // Online softmax: new maxima, corrections, P (f32 into the sums, rounded into the A fragments of P V).
    float corr[MT][R];
    [[maybe_unused]] MmaA pa[Cfg::kFast ? MT : 1][Cfg::kFast ? NT : 1];  // P as A fragments (FAST)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int s = 0; s < R; ++s) {
        const float mn = fmaxf(st.m[mt][s], tmax[mt][s]);
        corr[mt][s] = mn == -INFINITY ? 1.f : exp2f(st.m[mt][s] - mn);
        st.m[mt][s] = mn;
        st.l[mt][s] *= corr[mt][s];
      }
      // FAST: a row whose maximum is still -inf has only -inf scores, and exp2(-inf - 0) = 0: one subtraction and
      // exp2 per score, no test (the same values as the test below).
      float msub[R];
#pragma unroll
      for (int s = 0; s < R; ++s) msub[s] = st.m[mt][s] == -INFINITY ? 0.f : st.m[mt][s];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int i = 0; i < A; ++i) {
          const int s = mma_acc_slot(i);
          float e;
          if constexpr (Cfg::kFast) e = exp2f(sc[mt][nt].v[i] - msub[s]);
          else e = st.m[mt][s] == -INFINITY ? 0.f : exp2f(sc[mt][nt].v[i] - st.m[mt][s]);
          sc[mt][nt].v[i] = e;
          st.l[mt][s] += e;
        }
        if constexpr (Cfg::kFast) {
          mma_acc_to_a<E>(pa[Cfg::kFast ? mt : 0][Cfg::kFast ? nt : 0], sc[mt][nt], p_tile + 16 * mt * kPld + 16 * nt,
                          kPld);
        } else {
          mma_store<E>(sc[mt][nt], p_tile + 16 * mt * kPld + 16 * nt, kPld);
        }
      }
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
#pragma unroll
        for (int i = 0; i < A; ++i) st.o[mt][dt].v[i] *= corr[mt][mma_acc_slot(i)];
      }
    }
    if constexpr (!Cfg::kFast) warp_sync();  // the warp's P tile written by all its lanes
    // O += P V.
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      MmaA pc[MT];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (Cfg::kFast) pc[mt] = pa[Cfg::kFast ? mt : 0][Cfg::kFast ? nt : 0];
        else mma_load_a(pc[mt], p_tile + 16 * mt * kPld + 16 * nt, kPld);
      }
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        MmaB vb;
        mma_load_b_kn(vb, vt + 16 * nt * kLd + 16 * dt, kLd);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma<E>(st.o[mt][dt], pc[mt], vb);
      }
    }
    __syncthreads();  // stage sg and the P tiles consumed before they are refilled
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) mma_rows_sum(st.l[mt]);
}

// Launches Kernel<<<grid, threads, smem>>>(args...) on dev's stream, opting in to smem bytes of dynamic shared
// memory first when it exceeds 48 KiB (once per kernel and device; devices past 64 opt in at every launch).
template <auto& Kernel, class... Args>
void launch_flash_kernel(GpuDevice& dev, dim3 grid, unsigned threads, int smem, const Args&... args) {
  static std::atomic<uint64_t> opted{0};  // one per kernel (a template argument)
  opt_in_dynamic_smem(dev, reinterpret_cast<const void*>(&Kernel), smem, opted);
  Kernel<<<grid, threads, smem, dev.stream()>>>(args...);
  RBEE_GPU_CHECK_LAUNCH();
}

}  // namespace
}  // namespace rbee::gpu
