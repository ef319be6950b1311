// Prompt GEMM micro-kernels for x86 CPUs with AVX-512 VNNI (qgemm.h). Functions carry their own target
// attribute and run only after a runtime CPU check, so the rest of the build keeps its baseline flags.
//
// Q4_0, Q5_0, Q8_0, Q8_1 (one int32 per block, quant.h): panels of 16 weight rows, lane c of every ZMM = weight
// row c. Per block, 8 ZMMs hold the 16 rows' unsigned levels 4 bytes per lane (ZMM g: elements 4g..4g+3), then
// the 16 d_w as f32. A tile row's block sum is 8 vpdpbusd of those with the activation's 4-byte groups
// broadcast, started from -offset * sum q_x (Q4_0 levels q + 8, Q5_0 q + 16, Q8_x q + 128): 16 exact int32 block
// sums, one vcvtdq2ps and one fma with d_w * d_x per block for 16 outputs, the order of the row kernels.
//
// K-quants: the same lanes, one int32 S (levels times sub-block scales, vpdpbusd then vpmulld per sub-block) and
// one int32 C (bsums correction, vpdpwssd) per super-block, then two fmas (KSum below).
//
// Q4_1, Q5_1: packed panel of 4 weight rows; a ZMM register holds one 32-element block of two
// weight rows (row 2p in bytes 0-31, row 2p + 1 in bytes 32-63) as unsigned levels, and the 32 activation bytes
// of the same block broadcast to both halves. Per block and pair of rows, the 8 lanes per row are exactly the row
// kernels' (dot_legacy.cpp / dot_kquants.cpp, AVX2 path):
//   Q4_1 / Q5_1: lane l = sum of the 4 products of bytes 4l..4l+3 (vpdpbusd; the row kernels' vpmaddubsw +
//     vpmaddwd with ones gives the same int32, no int16 saturation is reachable with these ranges).
//     acc = fma(d_w * d_x, float(lanes), acc); the min term by fma per block.
// The final horizontal sum follows HSum (dot_common-inl.h): ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)).
#include "backends/cpu/quant/qgemm.h"

#include <cstdlib>
#include <cstring>

#include "backends/cpu/quant/blocks.h"
#include "backends/cpu/quant/kquant_scales.h"
#include "backends/cpu/quant/qgemm_target.h"

#if RBEE_QGEMM_X86
#include <immintrin.h>

// GCC 12 reports its own _mm512_undefined_* placeholders inside the intrinsics as maybe-uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define RBEE_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

namespace rbee::cpu::quant {
namespace {

constexpr int64_t Round64(int64_t v) { return (v + 63) / 64 * 64; }

// The QGemm tile entry of a kernel struct: mrows (1..kMaxRows) activation rows -> Kernel::Tile<mrows>.
template <class Kernel, int kMaxRows, int R = 1>
void TileOfRows(int64_t k, const void* panel, const void* x, size_t xs, int mrows, float* out, int64_t os, int ncols,
                int64_t b0, int64_t b1, float* state) {
  if constexpr (R < kMaxRows) {
    if (mrows != R) return TileOfRows<Kernel, kMaxRows, R + 1>(k, panel, x, xs, mrows, out, os, ncols, b0, b1, state);
  }
  Kernel::template Tile<R>(k, panel, x, xs, out, os, ncols, b0, b1, state);
}

// Ends a tile over blocks [b0, b1) of 16 weight rows (lane = weight row): while more blocks follow (`more`), the
// MR rows' partial sums go to `state` ([MR][16] f32) for the next call; else the first ncols lanes are the results.
template <int MR>
RBEE_VNNI inline void FinishTile(const __m512 (&acc)[MR], bool more, float* state, float* out, int64_t os, int ncols) {
  if (more) {
    for (int r = 0; r < MR; ++r) _mm512_store_ps(state + r * 16, acc[r]);
    return;
  }
  const __mmask16 mask = (__mmask16)((1u << ncols) - 1u);
  for (int r = 0; r < MR; ++r) _mm512_mask_storeu_ps(out + r * os, mask, acc[r]);
}

inline int32_t Load32i(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline float Load32f(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// Software prefetch for the panel packers: block `b` (of nb per row, block_bytes each) of the 16 weight rows at w
// (w_row_bytes apart), or, past the last block, block b - nb of the next panel's 16 rows (packers walk the panels of
// a task in order). The packers read 16 rows' blocks side by side, 16 short strided streams the hardware prefetcher
// does not follow: without it the packers waited on memory (a Q4_K pp512 profile on Zen 5: 52% of the packer's
// samples on the first load of each block). Prefetches never fault, past the matrix's end included.
inline void PrefetchPanelBlock(const void* w, int64_t w_row_bytes, int64_t nb, int64_t block_bytes, int64_t b) {
  const char* base = static_cast<const char*>(w);
  if (b >= nb) {
    base += 16 * w_row_bytes;
    b -= nb;
  }
  for (int r = 0; r < 16; ++r) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(base + r * w_row_bytes + b * block_bytes);
    for (uintptr_t line = p & ~(uintptr_t)63; line < p + (uintptr_t)block_bytes; line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
    }
  }
}

// acc + the 4-byte products of w (unsigned) with the int32 at p broadcast (signed), as one vpdpbusd with an
// embedded broadcast (one fused uop; the compiler otherwise issues a separate broadcast load per vpdpbusd).
RBEE_VNNI inline __m512i DpbusdBcast(__m512i acc, __m512i w, const uint8_t* p) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_t*>(p)));
  return acc;
}

// acc + the int16 pairs of w times the pair at p broadcast (vpdpwssd with an embedded broadcast, as above).
RBEE_VNNI inline __m512i DpwssdBcast(__m512i acc, __m512i w, const uint8_t* p) {
  __asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_t*>(p)));
  return acc;
}

// ---------------------------------------------------------------------------------------------------------
// Legacy (32-element) blocks. Q4_1 / Q5_1 panel: levels [nb][2 pairs][64 bytes], then d [nb][4] f32, then the
// per-block min m [nb][4] f32.
RBEE_VNNI inline __m256i Nibbles(const uint8_t* qs) {
  const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m256i both = _mm256_blend_epi32(v, _mm256_srli_epi16(v, 4), 0xF0);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}
RBEE_VNNI inline __m256i FifthBits(const uint8_t* qh) {
  int32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(bits), _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                                3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i select = _mm256_set1_epi64x((int64_t)0x8040201008040201ull);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// dst_c[4 r .. 4 r + 3] = dword c of src row r (r, c < 16), dst_c = lo + 64 c for c < 8, hi + 64 (c - 8) after:
// 16 rows of 16 dwords (src rows `stride` bytes apart) transposed into 16 vectors of one dword per row (unpack
// 32 / 64-bit, then 128-bit lanes). lo, hi 64-byte aligned.
RBEE_VNNI inline void Transpose16x16(const uint8_t* src, int64_t stride, uint8_t* lo, uint8_t* hi) {
  __m512i r[16], t[16], u[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(src + i * stride);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // u[i + m] = column m (of each 128-bit lane) of rows i..i+3
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int m = 0; m < 4; ++m) {
    const __m512i v = _mm512_shuffle_i32x4(u[m], u[4 + m], 0x88), w = _mm512_shuffle_i32x4(u[m], u[4 + m], 0xDD);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0x88);
    const __m512i w2 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0xDD);
    _mm512_store_si512(lo + (0 + m) * 64, _mm512_shuffle_i32x4(v, v2, 0x88));
    _mm512_store_si512(hi + m * 64, _mm512_shuffle_i32x4(v, v2, 0xDD));
    _mm512_store_si512(lo + (4 + m) * 64, _mm512_shuffle_i32x4(w, w2, 0x88));
    _mm512_store_si512(hi + (4 + m) * 64, _mm512_shuffle_i32x4(w, w2, 0xDD));
  }
}

// ---------------------------------------------------------------------------------------------------------
// Q4_0, Q5_0, Q8_0, Q8_1: unsigned levels q + 2^kShift and the offset shift.
struct BQ4_0 {
  using W = BlockQ4_0;
  static constexpr int kShift = 3;
  RBEE_VNNI static __m256i Levels(const W& b) { return Nibbles(b.qs); }
};
struct BQ5_0 {
  using W = BlockQ5_0;
  static constexpr int kShift = 4;
  RBEE_VNNI static __m256i Levels(const W& b) { return _mm256_or_si256(Nibbles(b.qs), FifthBits(b.qh)); }
};
template <class Block>
struct BQ8 {
  using W = Block;
  static constexpr int kShift = 7;
  RBEE_VNNI static __m256i Levels(const W& b) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)), _mm256_set1_epi8((char)0x80));
  }
};

template <class T>
struct BlockSum {
  static constexpr int kRows = 16;
  static constexpr int64_t kBlockBytes = 8 * 64 + 64;  // levels [8 groups][16 lanes][4 bytes], then d [16] f32
  static int64_t PanelBytes(int64_t k) { return (k / kQK) * kBlockBytes; }

  RBEE_VNNI static void Pack(const void* w, int64_t w_row_bytes, int rows, int64_t k, void* panel) {
    const int64_t nb = k / kQK;
    auto* base = static_cast<uint8_t*>(panel);
    alignas(64) uint8_t u[kRows][64];  // two blocks' levels per row, transposed into the panel by 16 x 16 dwords
    alignas(64) uint8_t spill[512];    // the second half's destination when nb is odd
    constexpr int64_t kAhead = 8;  // blocks (4 pairs) ahead
    for (int64_t ib = 0; ib < nb; ib += 2) {
      PrefetchPanelBlock(w, w_row_bytes, nb, (int64_t)sizeof(typename T::W), ib + kAhead);
      PrefetchPanelBlock(w, w_row_bytes, nb, (int64_t)sizeof(typename T::W), ib + kAhead + 1);
      const bool pair = ib + 1 < nb;
      for (int h = 0; h < 2; ++h) {
        if (h == 1 && !pair) break;
        float* d = reinterpret_cast<float*>(base + (ib + h) * kBlockBytes + 512);
        for (int r = 0; r < kRows; ++r) {
          d[r] = 0.f;
          if (r < rows) {
            const auto& b =
                reinterpret_cast<const typename T::W*>(static_cast<const char*>(w) + r * w_row_bytes)[ib + h];
            _mm256_store_si256(reinterpret_cast<__m256i*>(u[r] + 32 * h), T::Levels(b));
            d[r] = f16_to_f32(b.d);
          } else {
            _mm256_store_si256(reinterpret_cast<__m256i*>(u[r] + 32 * h), _mm256_setzero_si256());
          }
        }
      }
      if (!pair)
        for (int r = 0; r < kRows; ++r) _mm256_store_si256(reinterpret_cast<__m256i*>(u[r] + 32), _mm256_setzero_si256());
      Transpose16x16(&u[0][0], 64, base + ib * kBlockBytes, pair ? base + (ib + 1) * kBlockBytes : spill);
    }
  }

  // Packed activations of a tile of 8 rows, per block: the rows' 32 quants [8][32], d_x [8] f32, then the
  // chains' start values -(sum q_x) * 2^kShift [8] int32 (the offset of the unsigned weight levels).
  static constexpr int64_t kXBlockBytes = 8 * 32 + 8 * 4 + 8 * 4;
  static int64_t XTileBytes(int64_t k) { return Round64((k / kQK) * kXBlockBytes); }
  static void PackX(const void* xv, size_t xs, int rows, int64_t k, void* dst) {
    const int64_t nb = k / kQK;
    const size_t side = (size_t)((nb * (int64_t)sizeof(BlockQ8_0) + 31) / 32 * 32);
    auto* o = static_cast<uint8_t*>(dst);
    if (rows < 8) std::memset(o, 0, (size_t)XTileBytes(k));  // the missing rows are zeros
    for (int r = 0; r < rows; ++r) {
      const char* row = static_cast<const char*>(xv) + r * xs;
      const auto* x = reinterpret_cast<const BlockQ8_0*>(row);
      const auto* xd = reinterpret_cast<const float*>(row + side);
      const auto* xsum = reinterpret_cast<const int32_t*>(xd + nb);
      for (int64_t ib = 0; ib < nb; ++ib) {
        uint8_t* blk = o + ib * kXBlockBytes;
        std::memcpy(blk + 32 * r, x[ib].qs, 32);
        std::memcpy(blk + 256 + 4 * r, &xd[ib], 4);
        const int32_t start = -(xsum[ib] * (1 << T::kShift));
        std::memcpy(blk + 288 + 4 * r, &start, 4);
      }
    }
  }

  template <int MR>
  RBEE_VNNI static void Tile(int64_t k, const void* panel, const void* xv, size_t, float* out, int64_t os,
                             int ncols, int64_t b0, int64_t b1, float* state) {
    const int64_t nb = k / kQK;
    const auto* base = static_cast<const uint8_t*>(panel);
    const auto* xbase = static_cast<const uint8_t*>(xv);
    __m512 acc[MR];
    for (int r = 0; r < MR; ++r) acc[r] = b0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(state + r * 16);
    for (int64_t ib = b0; ib < b1; ++ib) {
      const uint8_t* blk = base + ib * kBlockBytes;
      const uint8_t* xb = xbase + ib * kXBlockBytes;  // every row at a fixed offset: one pointer
      __m512i w[8];
      for (int g = 0; g < 8; ++g) w[g] = _mm512_load_si512(blk + g * 64);
      const __m512 dw = _mm512_load_ps(reinterpret_cast<const float*>(blk + 512));
      // The rows' block sums as MR independent chains, interleaved group by group so the out-of-order core
      // always has MR vpdpbusd ready (vpdpbusd's latency is 5 cycles).
      __m512i sa[MR];
      for (int r = 0; r < MR; ++r) sa[r] = _mm512_set1_epi32(Load32i(xb + 288 + 4 * r));
      for (int g = 0; g < 8; ++g) {
        for (int r = 0; r < MR; ++r) sa[r] = DpbusdBcast(sa[r], w[g], xb + 32 * r + 4 * g);
      }
      for (int r = 0; r < MR; ++r) {
        const __m512 t = _mm512_mul_ps(dw, _mm512_set1_ps(Load32f(xb + 256 + 4 * r)));
        acc[r] = _mm512_fmadd_ps(t, _mm512_cvtepi32_ps(sa[r]), acc[r]);
      }
    }
    FinishTile<MR>(acc, b1 < nb, state, out, os, ncols);
  }

  static constexpr QGemm kGemm = {&PanelBytes, &Pack,     &TileOfRows<BlockSum, 8>, &XTileBytes, &PackX, kQK,
                                  kBlockBytes, kRows, 8, 8, int64_t{64} << 10};
};

// ---------------------------------------------------------------------------------------------------------
// Q4_1, Q5_1. Levels (unsigned bytes), d and mw of one block, computed as the row kernels do.
struct PQ4_1 {
  using W = BlockQ4_1;
  using X = BlockQ8_1;
  static constexpr bool kMacc = true;
  RBEE_VNNI static __m256i Levels(const W& b) { return Nibbles(b.qs); }
  static float Mw(const W& b) { return f16_to_f32(b.m); }
};
struct PQ5_1 {
  using W = BlockQ5_1;
  using X = BlockQ8_1;
  static constexpr bool kMacc = true;
  RBEE_VNNI static __m256i Levels(const W& b) { return _mm256_or_si256(Nibbles(b.qs), FifthBits(b.qh)); }
  static float Mw(const W& b) { return f16_to_f32(b.m); }
};

template <class T>
struct Legacy {
  static int64_t PanelBytes(int64_t k) { return Round64((k / kQK) * (128 + 32)); }

  RBEE_VNNI static void Pack(const void* w, int64_t w_row_bytes, int rows, int64_t k, void* panel) {
    const int64_t nb = k / kQK;
    auto* lev = static_cast<uint8_t*>(panel);
    float* d = reinterpret_cast<float*>(lev + nb * 128);
    float* mw = d + nb * 4;
    for (int r = 0; r < 4; ++r) {
      uint8_t* lr = lev + (r / 2) * 64 + (r % 2) * 32;
      if (r >= rows) {
        for (int64_t ib = 0; ib < nb; ++ib) {
          _mm256_store_si256(reinterpret_cast<__m256i*>(lr + ib * 128), _mm256_setzero_si256());
          d[ib * 4 + r] = 0.f;
          mw[ib * 4 + r] = 0.f;
        }
        continue;
      }
      const auto* b = reinterpret_cast<const typename T::W*>(static_cast<const char*>(w) + r * w_row_bytes);
      for (int64_t ib = 0; ib < nb; ++ib) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(lr + ib * 128), T::Levels(b[ib]));
        d[ib * 4 + r] = f16_to_f32(b[ib].d);
        mw[ib * 4 + r] = T::Mw(b[ib]);
      }
    }
  }

  template <int MR>
  RBEE_VNNI static void Tile(int64_t k, const void* panel, const void* xv, size_t xs, float* out, int64_t os,
                             int ncols, int64_t b0, int64_t b1, float* state) {
    using X = typename T::X;
    const int64_t nb = k / kQK;
    const auto* lev = static_cast<const uint8_t*>(panel);
    const float* d = reinterpret_cast<const float*>(lev + nb * 128);
    const float* mw = d + nb * 4;
    const size_t side = (size_t)((nb * (int64_t)sizeof(X) + 31) / 32 * 32);
    const X* x[MR];
    const float* xd[MR];
    for (int r = 0; r < MR; ++r) {
      const char* row = static_cast<const char*>(xv) + r * xs;
      x[r] = reinterpret_cast<const X*>(row);
      xd[r] = reinterpret_cast<const float*>(row + side);
    }
    const __m512i pick0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i pick1 = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    __m512 acc[MR][2];
    __m128 macc[MR];
    for (int r = 0; r < MR; ++r) {
      const bool fresh = b0 == 0;
      acc[r][0] = fresh ? _mm512_setzero_ps() : _mm512_load_ps(state + r * 32);
      acc[r][1] = fresh ? _mm512_setzero_ps() : _mm512_load_ps(state + r * 32 + 16);
      macc[r] = fresh ? _mm_setzero_ps() : _mm_load_ps(state + 4 * 32 + r * 4);
    }
    for (int64_t ib = b0; ib < b1; ++ib) {
      const __m512i w0 = _mm512_load_si512(lev + ib * 128), w1 = _mm512_load_si512(lev + ib * 128 + 64);
      const __m512 d4 = _mm512_castps128_ps512(_mm_loadu_ps(d + ib * 4));
      const __m512 dA = _mm512_permutexvar_ps(pick0, d4), dB = _mm512_permutexvar_ps(pick1, d4);
      __m128 mw4 = _mm_setzero_ps();
      if constexpr (T::kMacc) mw4 = _mm_loadu_ps(mw + ib * 4);
      for (int r = 0; r < MR; ++r) {
        const __m512i xb =
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r][ib].qs)));
        const __m512i init = _mm512_setzero_si512();
        const __m512i s0 = _mm512_dpbusd_epi32(init, w0, xb), s1 = _mm512_dpbusd_epi32(init, w1, xb);
        const __m512 dx = _mm512_set1_ps(xd[r][ib]);
        acc[r][0] = _mm512_fmadd_ps(_mm512_mul_ps(dA, dx), _mm512_cvtepi32_ps(s0), acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(_mm512_mul_ps(dB, dx), _mm512_cvtepi32_ps(s1), acc[r][1]);
        if constexpr (T::kMacc) macc[r] = _mm_fmadd_ps(mw4, _mm_set1_ps(xd[r][nb + ib]), macc[r]);
      }
    }
    if (b1 < nb) {
      for (int r = 0; r < MR; ++r) {
        _mm512_store_ps(state + r * 32, acc[r][0]);
        _mm512_store_ps(state + r * 32 + 16, acc[r][1]);
        _mm_store_ps(state + 4 * 32 + r * 4, macc[r]);
      }
      return;
    }
    for (int r = 0; r < MR; ++r) {
      alignas(64) float v[32];
      alignas(16) float m4[4];
      _mm512_store_ps(v, acc[r][0]);
      _mm512_store_ps(v + 16, acc[r][1]);
      _mm_store_ps(m4, macc[r]);
      for (int c = 0; c < ncols; ++c) {
        const float* l = v + 8 * c;
        out[r * os + c] = (((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))) + m4[c];
      }
    }
  }

  static constexpr QGemm kGemm = {&PanelBytes, &Pack, &TileOfRows<Legacy, 4>, nullptr, nullptr, kQK, 128 + 32, 4, 4,
                                  64, int64_t{16} << 10};
};

// ---------------------------------------------------------------------------------------------------------
// K-quants (256-element super-blocks): Pair(b, s) gives the unsigned levels of 32-element groups 2s and 2s + 1
// as dot_kquants.cpp defines them; scales and coefficients come from k_scales (kquant_scales.h), whose dc equals d
// for Q3_K and Q6_K (kDcIsD).
RBEE_VNNI inline __m256i Low2(__m256i v, int shift) {
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8(3));
}
RBEE_VNNI inline __m256i Bit(__m256i v, int bit, int to) {
  return _mm256_sll_epi16(_mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(bit)), _mm256_set1_epi8(1)),
                          _mm_cvtsi32_si128(to));
}
RBEE_VNNI inline __m256i Load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

struct PK2 {
  static constexpr bool kDcIsD = false;  // whether dc = d (kquant_scales.h)
  using W = BlockQ2_K;
  RBEE_VNNI static void Pair(const W& b, int s, __m256i& qa, __m256i& qb) {
    const __m256i v = Load32(b.qs + 32 * (s / 2));
    const int j = 2 * (s % 2);
    qa = Low2(v, 2 * j);
    qb = Low2(v, 2 * j + 2);
  }
};
struct PK3 {
  static constexpr bool kDcIsD = true;  // whether dc = d (kquant_scales.h)
  using W = BlockQ3_K;
  RBEE_VNNI static void Pair(const W& b, int s, __m256i& qa, __m256i& qb) {
    const __m256i v = Load32(b.qs + 32 * (s / 2));
    const __m256i h = Load32(b.hmask);
    const int j = 2 * (s % 2);
    qa = _mm256_or_si256(Low2(v, 2 * j), Bit(h, 2 * s, 2));
    qb = _mm256_or_si256(Low2(v, 2 * j + 2), Bit(h, 2 * s + 1, 2));
  }
};
struct PK4 {
  static constexpr bool kDcIsD = false;  // whether dc = d (kquant_scales.h)
  using W = BlockQ4_K;
  RBEE_VNNI static void Pair(const W& b, int s, __m256i& qa, __m256i& qb) {
    const __m256i v = Load32(b.qs + 32 * s);
    const __m256i m = _mm256_set1_epi8(0x0F);
    qa = _mm256_and_si256(v, m);
    qb = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
  }
};
struct PK5 {
  static constexpr bool kDcIsD = false;  // whether dc = d (kquant_scales.h)
  using W = BlockQ5_K;
  RBEE_VNNI static void Pair(const W& b, int s, __m256i& qa, __m256i& qb) {
    const __m256i v = Load32(b.qs + 32 * s);
    const __m256i h = Load32(b.qh);
    const __m256i m = _mm256_set1_epi8(0x0F);
    qa = _mm256_or_si256(_mm256_and_si256(v, m), Bit(h, 2 * s, 4));
    qb = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m), Bit(h, 2 * s + 1, 4));
  }
};
struct PK6 {
  static constexpr bool kDcIsD = true;  // whether dc = d (kquant_scales.h)
  using W = BlockQ6_K;
  RBEE_VNNI static void Pair(const W& b, int s, __m256i& qa, __m256i& qb) {
    const int n = s / 2, shift = 4 * (s % 2);
    const __m256i la = Load32(b.ql + 64 * n), lb = Load32(b.ql + 64 * n + 32);
    const __m256i h = Load32(b.qh + 32 * n);
    const __m256i m = _mm256_set1_epi8(0x0F);
    const __m128i sh = _mm_cvtsi32_si128(shift);
    const int g = 2 * (s % 2);
    qa = _mm256_or_si256(_mm256_and_si256(_mm256_srl_epi16(la, sh), m), _mm256_slli_epi16(Low2(h, 2 * g), 4));
    qb = _mm256_or_si256(_mm256_and_si256(_mm256_srl_epi16(lb, sh), m), _mm256_slli_epi16(Low2(h, 2 * g + 2), 4));
  }
};

// The K-quant prompt GEMM: panels of 16 weight rows, lane c = weight row c (quant.h's order: one int32 S and
// one int32 C per super-block, then two fmas). Panel per super-block: levels [64 groups of 4 elements][16
// lanes][4 bytes], sub-block scales sc [16][16 lanes] int32, correction coefficients [8 pairs][16 lanes][2 int16]
// (c[2j], c[2j + 1], dotted with Q8_K's bsums pairs by vpdpwssd; Q4_K / Q5_K: 4 pairs (c[4j], c[4j + 2]) of their
// per-32 coefficients, dotted with sums of 32), d [16] and dc [16] f32. Per sub-block of 16
// (Q4_K / Q5_K: of 32, one scale) the products are summed exactly by vpdpbusd, multiplied by the scale (vpmulld)
// and added to S; every int32 stays exact (|S| < 2^31 for every type's ranges).
template <class T, bool kPer32>
struct KSum {
  static constexpr int kRows = 16;
  static constexpr int64_t kSbBytes = 64 * 64 + 16 * 64 + 8 * 64 + 2 * 64;
  static constexpr int kCPairs = kPer32 ? 4 : 8;  // vpdpwssd pairs of the correction C (the panel keeps room for 8)
  static int64_t PanelBytes(int64_t k) { return (k / kQKK) * kSbBytes; }

  RBEE_VNNI static void Pack(const void* w, int64_t w_row_bytes, int rows, int64_t k, void* panel) {
    const int64_t nsb = k / kQKK;
    auto* base = static_cast<uint8_t*>(panel);
    for (int64_t sb = 0; sb < nsb; ++sb) {
      PrefetchPanelBlock(w, w_row_bytes, nsb, (int64_t)sizeof(typename T::W), sb + 2);
      uint8_t* blk = base + sb * kSbBytes;
      auto* sc = reinterpret_cast<int32_t*>(blk + 4096);
      auto* cc = reinterpret_cast<int16_t*>(blk + 4096 + 1024);
      auto* d = reinterpret_cast<float*>(blk + 4096 + 1024 + 512);
      float* dc = d + 16;
      alignas(64) uint8_t u[kRows][kQKK];  // the rows' levels, transposed into the panel below
      for (int r = 0; r < kRows; ++r) {
        KScales ks{};
        if (r < rows) {
          const auto& b = reinterpret_cast<const typename T::W*>(static_cast<const char*>(w) + r * w_row_bytes)[sb];
          for (int s = 0; s < 4; ++s) {
            __m256i qa, qb;
            T::Pair(b, s, qa, qb);
            _mm256_store_si256(reinterpret_cast<__m256i*>(u[r] + 64 * s), qa);
            _mm256_store_si256(reinterpret_cast<__m256i*>(u[r] + 64 * s + 32), qb);
          }
          k_scales(b, ks);
        } else {
          std::memset(u[r], 0, kQKK);
        }
        for (int i = 0; i < 16; ++i) sc[i * 16 + r] = ks.sc[i];
        for (int j = 0; j < kCPairs; ++j) {  // kPer32: one coefficient per 32 elements, c[4j] and c[4j + 2]
          cc[(j * 16 + r) * 2] = ks.c[(kPer32 ? 4 : 2) * j];
          cc[(j * 16 + r) * 2 + 1] = ks.c[(kPer32 ? 4 : 2) * j + (kPer32 ? 2 : 1)];
        }
        d[r] = ks.d;
        dc[r] = ks.dc;
      }
      for (int j = 0; j < 4; ++j) Transpose16x16(&u[0][64 * j], kQKK, blk + 16 * j * 64, blk + (16 * j + 8) * 64);
    }
  }

  // Packed activations of a tile of 8 rows, per super-block: the rows' quants [8][256], their bsums as int32
  // pairs [8][8] (the vpdpwssd operand; kPer32: the 8 sums of 32 elements, bsums[2g] + bsums[2g + 1] (|.| <= 4096),
  // as 4 pairs, since Q4_K / Q5_K have one coefficient per 32: C takes 4 vpdpwssd instead of 8), d_x [8] f32.
  static constexpr int64_t kXSbBytes = 8 * 256 + 8 * 32 + 8 * 4;
  static int64_t XTileBytes(int64_t k) { return Round64((k / kQKK) * kXSbBytes); }
  static void PackX(const void* xv, size_t xs, int rows, int64_t k, void* dst) {
    const int64_t nsb = k / kQKK;
    auto* o = static_cast<uint8_t*>(dst);
    if (rows < 8) std::memset(o, 0, (size_t)XTileBytes(k));  // the missing rows are zeros
    for (int r = 0; r < rows; ++r) {
      const auto* x = reinterpret_cast<const BlockQ8_K*>(static_cast<const char*>(xv) + r * xs);
      for (int64_t sb = 0; sb < nsb; ++sb) {
        uint8_t* blk = o + sb * kXSbBytes;
        std::memcpy(blk + 256 * r, x[sb].qs, 256);
        if constexpr (kPer32) {
          int16_t s32[8];
          for (int g = 0; g < 8; ++g) s32[g] = (int16_t)(x[sb].bsums[2 * g] + x[sb].bsums[2 * g + 1]);
          std::memcpy(blk + 2048 + 32 * r, s32, 16);
        } else {
          std::memcpy(blk + 2048 + 32 * r, x[sb].bsums, 32);
        }
        std::memcpy(blk + 2304 + 4 * r, &x[sb].d, 4);
      }
    }
  }

  template <int MR>
  RBEE_VNNI static void Tile(int64_t k, const void* panel, const void* xv, size_t, float* out, int64_t os,
                             int ncols, int64_t b0, int64_t b1, float* state) {
    const int64_t nsb = k / kQKK;
    const auto* base = static_cast<const uint8_t*>(panel);
    const auto* xbase = static_cast<const uint8_t*>(xv);
    __m512 acc[MR];
    for (int r = 0; r < MR; ++r) acc[r] = b0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(state + r * 16);
    constexpr int kSub = kPer32 ? 8 : 16;     // sub-blocks with their own scale
    constexpr int kGroups = 64 / kSub;        // 4-element groups per sub-block
    for (int64_t sb = b0; sb < b1; ++sb) {
      const uint8_t* blk = base + sb * kSbBytes;
      const uint8_t* xb = xbase + sb * kXSbBytes;  // every row at a fixed offset: one pointer
      const auto* sc = reinterpret_cast<const int32_t*>(blk + 4096);
      __m512i S[MR];
      for (int r = 0; r < MR; ++r) S[r] = _mm512_setzero_si512();
      // 16-element sub-blocks two at a time: 2 * MR independent vpdpbusd chains (a sub-block's chain alone is 4
      // long, and its vpmulld waits for it: one sub-block at a time left the core waiting on latencies; Q4_K /
      // Q5_K's chains of 8 run best one sub-block at a time).
      constexpr int kStep = kPer32 ? 1 : 2;
      for (int i = 0; i < kSub; i += kStep) {
        if constexpr (kStep == 1) {
          __m512i w[kGroups];
          for (int g = 0; g < kGroups; ++g) w[g] = _mm512_load_si512(blk + (i * kGroups + g) * 64);
          const __m512i scale = _mm512_load_si512(sc + 2 * i * 16);
          const uint8_t* xi = xb + i * kGroups * 4;
          __m512i da[MR];
          for (int r = 0; r < MR; ++r) da[r] = _mm512_setzero_si512();
          for (int g = 0; g < kGroups; ++g) {  // MR independent chains, interleaved (as in BlockSum)
            for (int r = 0; r < MR; ++r) {
              da[r] = DpbusdBcast(da[r], w[g], xi + 256 * r + 4 * g);
            }
          }
          for (int r = 0; r < MR; ++r) S[r] = _mm512_add_epi32(S[r], _mm512_mullo_epi32(da[r], scale));
          continue;
        }
        const uint8_t* xi = xb + i * kGroups * 4;
        __m512i da[MR], db[MR];
        for (int r = 0; r < MR; ++r) da[r] = db[r] = _mm512_setzero_si512();
        for (int g = 0; g < kGroups; ++g) {
          const __m512i wa = _mm512_load_si512(blk + (i * kGroups + g) * 64);
          const __m512i wb = _mm512_load_si512(blk + ((i + 1) * kGroups + g) * 64);
          for (int r = 0; r < MR; ++r) {
            da[r] = DpbusdBcast(da[r], wa, xi + 256 * r + 4 * g);
            db[r] = DpbusdBcast(db[r], wb, xi + 256 * r + 4 * (kGroups + g));
          }
        }
        const __m512i sa = _mm512_load_si512(sc + i * 16);
        const __m512i sb2 = _mm512_load_si512(sc + (i + 1) * 16);
        for (int r = 0; r < MR; ++r) {
          S[r] = _mm512_add_epi32(S[r], _mm512_mullo_epi32(da[r], sa));
          S[r] = _mm512_add_epi32(S[r], _mm512_mullo_epi32(db[r], sb2));
        }
      }
      const auto* cc = blk + 4096 + 1024;
      const __m512 d = _mm512_load_ps(reinterpret_cast<const float*>(blk + 4096 + 1024 + 512));
      const __m512 dc = _mm512_load_ps(reinterpret_cast<const float*>(blk + 4096 + 1024 + 512) + 16);
      // C of the MR rows as MR independent chains, interleaved pair by pair (row after row, each row's chain of
      // kCPairs dependent vpdpwssd left the core waiting on their latency).
      __m512i c[MR];
      for (int r = 0; r < MR; ++r) c[r] = _mm512_setzero_si512();
      for (int j = 0; j < kCPairs; ++j) {
        const __m512i cj = _mm512_load_si512(cc + j * 64);
        for (int r = 0; r < MR; ++r) c[r] = DpwssdBcast(c[r], cj, xb + 2048 + 32 * r + 4 * j);
      }
      for (int r = 0; r < MR; ++r) {
        const __m512 dx = _mm512_set1_ps(Load32f(xb + 2304 + 4 * r));
        const __m512 ddx = _mm512_mul_ps(d, dx);
        // Q3_K / Q6_K: dc is d (kquant_scales.h), so dc * d_x is the same product: one multiply less (the
        // multiply-add pipes are what the tile is bound by).
        const __m512 dcdx = T::kDcIsD ? ddx : _mm512_mul_ps(dc, dx);
        acc[r] = _mm512_fmadd_ps(ddx, _mm512_cvtepi32_ps(S[r]), acc[r]);
        acc[r] = _mm512_fnmadd_ps(dcdx, _mm512_cvtepi32_ps(c[r]), acc[r]);
      }
    }
    FinishTile<MR>(acc, b1 < nsb, state, out, os, ncols);
  }

  static constexpr QGemm kGemm = {&PanelBytes, &Pack,     &TileOfRows<KSum, 8>, &XTileBytes, &PackX, kQKK,
                                  kSbBytes,    kRows, 8,     8,  int64_t{64} << 10};
};

}  // namespace

const QGemm* qgemm_avx512_vnni(DType weight) {
  switch (weight) {
    case DType::Q4_0: return &BlockSum<BQ4_0>::kGemm;
    case DType::Q4_1: return &Legacy<PQ4_1>::kGemm;
    case DType::Q5_0: return &BlockSum<BQ5_0>::kGemm;
    case DType::Q5_1: return &Legacy<PQ5_1>::kGemm;
    case DType::Q8_0: return &BlockSum<BQ8<BlockQ8_0>>::kGemm;
    case DType::Q8_1: return &BlockSum<BQ8<BlockQ8_1>>::kGemm;
    case DType::Q2_K: return &KSum<PK2, false>::kGemm;
    case DType::Q3_K: return &KSum<PK3, false>::kGemm;
    case DType::Q4_K: return &KSum<PK4, true>::kGemm;
    case DType::Q5_K: return &KSum<PK5, true>::kGemm;
    case DType::Q6_K: return &KSum<PK6, false>::kGemm;
    default: return nullptr;
  }
}

}  // namespace rbee::cpu::quant
#endif  // RBEE_QGEMM_X86
