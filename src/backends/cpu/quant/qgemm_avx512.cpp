// Prompt GEMM micro-kernels for x86 CPUs with AVX-512 VNNI (qgemm.h). Functions carry their own target
// attribute and run only after a runtime CPU check, so the rest of the build keeps its baseline flags.
//
// Packed panel of kQGemmPanelRows = 4 weight rows; a ZMM register holds one 32-element block of two weight rows
// (row 2p in bytes 0-31, row 2p + 1 in bytes 32-63) as unsigned levels, and the 32 activation bytes of the same
// block broadcast to both halves. Per block and pair of rows, the 8 lanes per row are exactly the row kernels'
// (dot_legacy.cpp / dot_kquants.cpp, AVX2 path):
//   legacy types: lane l = sum of the 4 products of bytes 4l..4l+3 (vpdpbusd; the row kernels' vpmaddubsw +
//     vpmaddwd with ones gives the same int32, no int16 saturation is reachable with these ranges). Q8_0 / Q8_1
//     weights are stored as q + 128 and the lanes start from -128 * (lane sum of the activations), so the int32
//     is sum q_w * q_x itself. acc = fma(d_w * d_x, float(lanes), acc); the offset / min term by fma per block.
//   K-quants: per 32-element group vpmaddubsw (unsigned levels x int8 activations) then vpdpwssd with the
//     group's two 16-element int16 scales (= the row kernels' vpmaddwd + add), per super-block the same two
//     fmas (d * d_x, then -dc * d_x times the bsums correction).
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

// ---------------------------------------------------------------------------------------------------------
// Legacy (32-element) blocks. Panel: levels [nb][2 pairs][64 bytes], then d [nb][4] f32, then the per-block
// offset / min term mw [nb][4] f32 (Q4_0: -8 d, Q5_0: -16 d, Q4_1 / Q5_1: m, Q8_x: 0).
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

// Levels (unsigned bytes), d and mw of one block, computed as the row kernels do.
struct PQ4_0 {
  using W = BlockQ4_0;
  using X = BlockQ8_0;
  static constexpr bool kSigned = false, kMacc = true;
  RBEE_VNNI static __m256i Levels(const W& b) { return Nibbles(b.qs); }
  static float Mw(const W& b) { return -8.f * f16_to_f32(b.d); }
};
struct PQ4_1 {
  using W = BlockQ4_1;
  using X = BlockQ8_1;
  static constexpr bool kSigned = false, kMacc = true;
  RBEE_VNNI static __m256i Levels(const W& b) { return Nibbles(b.qs); }
  static float Mw(const W& b) { return f16_to_f32(b.m); }
};
struct PQ5_0 {
  using W = BlockQ5_0;
  using X = BlockQ8_0;
  static constexpr bool kSigned = false, kMacc = true;
  RBEE_VNNI static __m256i Levels(const W& b) { return _mm256_or_si256(Nibbles(b.qs), FifthBits(b.qh)); }
  static float Mw(const W& b) { return -16.f * f16_to_f32(b.d); }
};
struct PQ5_1 {
  using W = BlockQ5_1;
  using X = BlockQ8_1;
  static constexpr bool kSigned = false, kMacc = true;
  RBEE_VNNI static __m256i Levels(const W& b) { return _mm256_or_si256(Nibbles(b.qs), FifthBits(b.qh)); }
  static float Mw(const W& b) { return f16_to_f32(b.m); }
};
template <class Block>
struct PQ8 {
  using W = Block;
  using X = BlockQ8_0;
  static constexpr bool kSigned = true, kMacc = false;
  RBEE_VNNI static __m256i Levels(const W& b) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)), _mm256_set1_epi8((char)0x80));
  }
  static float Mw(const W&) { return 0.f; }
};

template <class T>
struct Legacy {
  static int64_t PanelBytes(int64_t k) { return Round64((k / kQK) * (128 + 32)); }

  RBEE_VNNI static void Pack(const void* w, int64_t w_row_bytes, int rows, int64_t k, void* panel) {
    const int64_t nb = k / kQK;
    auto* lev = static_cast<uint8_t*>(panel);
    float* d = reinterpret_cast<float*>(lev + nb * 128);
    float* mw = d + nb * 4;
    for (int r = 0; r < kQGemmPanelRows; ++r) {
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
    const __m512i k80 = _mm512_set1_epi8((char)0x80);
    __m512 acc[MR][2];
    __m128 macc[MR];
    for (int r = 0; r < MR; ++r) {
      const bool fresh = b0 == 0;
      acc[r][0] = fresh ? _mm512_setzero_ps() : _mm512_load_ps(state + r * 32);
      acc[r][1] = fresh ? _mm512_setzero_ps() : _mm512_load_ps(state + r * 32 + 16);
      macc[r] = fresh ? _mm_setzero_ps() : _mm_load_ps(state + kQGemmTileRows * 32 + r * 4);
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
        __m512i init = _mm512_setzero_si512();
        if constexpr (T::kSigned) init = _mm512_sub_epi32(init, _mm512_dpbusd_epi32(init, k80, xb));
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
        _mm_store_ps(state + kQGemmTileRows * 32 + r * 4, macc[r]);
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

  static void TileAny(int64_t k, const void* panel, const void* x, size_t xs, int mrows, float* out, int64_t os,
                      int ncols, int64_t b0, int64_t b1, float* state) {
    switch (mrows) {
      case 1: return Tile<1>(k, panel, x, xs, out, os, ncols, b0, b1, state);
      case 2: return Tile<2>(k, panel, x, xs, out, os, ncols, b0, b1, state);
      case 3: return Tile<3>(k, panel, x, xs, out, os, ncols, b0, b1, state);
      default: return Tile<4>(k, panel, x, xs, out, os, ncols, b0, b1, state);
    }
  }
  static constexpr QGemm kGemm = {&PanelBytes, &Pack, &TileAny, kQK, 128 + 32};
};

// ---------------------------------------------------------------------------------------------------------
// K-quants (256-element super-blocks). Panel per super-block sb: levels [nsb][8 groups][2 pairs][64 bytes],
// group scales [nsb][8][2][32 int16] (lanes 16h + 0..7 = row h's scale of the group's first 16 elements,
// 16h + 8..15 of its second), corrections [nsb][2][32 int16] (row h's 16 coefficients c at 16h), d [nsb][4],
// dc [nsb][4]. Levels as dot_kquants.cpp defines them; scales and coefficients from k_scales (kquant_scales.h).
RBEE_VNNI inline __m256i Low2(__m256i v, int shift) {
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8(3));
}
RBEE_VNNI inline __m256i Bit(__m256i v, int bit, int to) {
  return _mm256_sll_epi16(_mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(bit)), _mm256_set1_epi8(1)),
                          _mm_cvtsi32_si128(to));
}
RBEE_VNNI inline __m256i Load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

struct PK2 {
  using W = BlockQ2_K;
  RBEE_VNNI static void Pair(const W& b, int s, __m256i& qa, __m256i& qb) {
    const __m256i v = Load32(b.qs + 32 * (s / 2));
    const int j = 2 * (s % 2);
    qa = Low2(v, 2 * j);
    qb = Low2(v, 2 * j + 2);
  }
};
struct PK3 {
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
  using W = BlockQ4_K;
  RBEE_VNNI static void Pair(const W& b, int s, __m256i& qa, __m256i& qb) {
    const __m256i v = Load32(b.qs + 32 * s);
    const __m256i m = _mm256_set1_epi8(0x0F);
    qa = _mm256_and_si256(v, m);
    qb = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
  }
};
struct PK5 {
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

template <class T>
struct KQuant {
  static constexpr int64_t kSbBytes = 1024 + 1024 + 128 + 32;
  static int64_t PanelBytes(int64_t k) { return Round64((k / kQKK) * kSbBytes); }

  RBEE_VNNI static void Pack(const void* w, int64_t w_row_bytes, int rows, int64_t k, void* panel) {
    const int64_t nsb = k / kQKK;
    auto* lev = static_cast<uint8_t*>(panel);
    auto* gsc = reinterpret_cast<int16_t*>(lev + nsb * 1024);
    int16_t* cc = gsc + nsb * 512;
    float* d = reinterpret_cast<float*>(cc + nsb * 64);
    float* dc = d + nsb * 4;
    for (int r = 0; r < kQGemmPanelRows; ++r) {
      const int p = r / 2, h = r % 2;
      const auto* b = reinterpret_cast<const typename T::W*>(static_cast<const char*>(w) + r * w_row_bytes);
      for (int64_t sb = 0; sb < nsb; ++sb) {
        uint8_t* l = lev + sb * 1024 + p * 64 + h * 32;
        int16_t* g = gsc + sb * 512 + p * 32 + h * 16;
        int16_t* c = cc + sb * 64 + p * 32 + h * 16;
        if (r >= rows) {
          for (int gi = 0; gi < 8; ++gi) {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(l + gi * 128), _mm256_setzero_si256());
            std::memset(g + gi * 64, 0, 32);
          }
          std::memset(c, 0, 32);
          d[sb * 4 + r] = dc[sb * 4 + r] = 0.f;
          continue;
        }
        for (int s = 0; s < 4; ++s) {
          __m256i qa, qb;
          T::Pair(b[sb], s, qa, qb);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(l + (2 * s) * 128), qa);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(l + (2 * s + 1) * 128), qb);
        }
        KScales ks;
        k_scales(b[sb], ks);
        for (int gi = 0; gi < 8; ++gi)
          for (int e = 0; e < 8; ++e) {
            g[gi * 64 + e] = ks.sc[2 * gi];
            g[gi * 64 + 8 + e] = ks.sc[2 * gi + 1];
          }
        std::memcpy(c, ks.c, 32);
        d[sb * 4 + r] = ks.d;
        dc[sb * 4 + r] = ks.dc;
      }
    }
  }

  template <int MR>
  RBEE_VNNI static void Tile(int64_t k, const void* panel, const void* xv, size_t xs, float* out, int64_t os,
                             int ncols, int64_t b0, int64_t b1, float* state) {
    const int64_t nsb = k / kQKK;
    const auto* lev = static_cast<const uint8_t*>(panel);
    const auto* gsc = reinterpret_cast<const int16_t*>(lev + nsb * 1024);
    const int16_t* cc = gsc + nsb * 512;
    const float* d = reinterpret_cast<const float*>(cc + nsb * 64);
    const float* dc = d + nsb * 4;
    const BlockQ8_K* x[MR];
    for (int r = 0; r < MR; ++r) x[r] = reinterpret_cast<const BlockQ8_K*>(static_cast<const char*>(xv) + r * xs);
    const __m512i pick0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i pick1 = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    __m512 acc[MR][2];
    for (int r = 0; r < MR; ++r) {
      acc[r][0] = b0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(state + r * 32);
      acc[r][1] = b0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(state + r * 32 + 16);
    }
    for (int64_t sb = b0; sb < b1; ++sb) {
      __m512i isum[MR][2];
      for (int r = 0; r < MR; ++r) isum[r][0] = isum[r][1] = _mm512_setzero_si512();
      const uint8_t* l = lev + sb * 1024;
      const int16_t* g = gsc + sb * 512;
      for (int gi = 0; gi < 8; ++gi) {
        const __m512i w0 = _mm512_load_si512(l + gi * 128), w1 = _mm512_load_si512(l + gi * 128 + 64);
        const __m512i s0 = _mm512_load_si512(g + gi * 64), s1 = _mm512_load_si512(g + gi * 64 + 32);
        for (int r = 0; r < MR; ++r) {
          const __m512i xb = _mm512_broadcast_i64x4(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r][sb].qs + 32 * gi)));
          isum[r][0] = _mm512_dpwssd_epi32(isum[r][0], _mm512_maddubs_epi16(w0, xb), s0);
          isum[r][1] = _mm512_dpwssd_epi32(isum[r][1], _mm512_maddubs_epi16(w1, xb), s1);
        }
      }
      const __m512i c0 = _mm512_load_si512(cc + sb * 64), c1 = _mm512_load_si512(cc + sb * 64 + 32);
      const __m512 d4 = _mm512_castps128_ps512(_mm_loadu_ps(d + sb * 4));
      const __m512 dc4 = _mm512_castps128_ps512(_mm_loadu_ps(dc + sb * 4));
      const __m512 dA = _mm512_permutexvar_ps(pick0, d4), dB = _mm512_permutexvar_ps(pick1, d4);
      const __m512 dcA = _mm512_permutexvar_ps(pick0, dc4), dcB = _mm512_permutexvar_ps(pick1, dc4);
      for (int r = 0; r < MR; ++r) {
        const __m512i bs =
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r][sb].bsums)));
        const __m512 dx = _mm512_set1_ps(x[r][sb].d);
        const __m512 corr0 = _mm512_cvtepi32_ps(_mm512_madd_epi16(bs, c0));
        const __m512 corr1 = _mm512_cvtepi32_ps(_mm512_madd_epi16(bs, c1));
        acc[r][0] = _mm512_fmadd_ps(_mm512_mul_ps(dA, dx), _mm512_cvtepi32_ps(isum[r][0]), acc[r][0]);
        acc[r][0] = _mm512_fnmadd_ps(_mm512_mul_ps(dcA, dx), corr0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(_mm512_mul_ps(dB, dx), _mm512_cvtepi32_ps(isum[r][1]), acc[r][1]);
        acc[r][1] = _mm512_fnmadd_ps(_mm512_mul_ps(dcB, dx), corr1, acc[r][1]);
      }
    }
    if (b1 < nsb) {
      for (int r = 0; r < MR; ++r) {
        _mm512_store_ps(state + r * 32, acc[r][0]);
        _mm512_store_ps(state + r * 32 + 16, acc[r][1]);
      }
      return;
    }
    for (int r = 0; r < MR; ++r) {
      alignas(64) float v[32];
      _mm512_store_ps(v, acc[r][0]);
      _mm512_store_ps(v + 16, acc[r][1]);
      for (int c = 0; c < ncols; ++c) {
        const float* lv = v + 8 * c;
        out[r * os + c] = ((lv[0] + lv[4]) + (lv[2] + lv[6])) + ((lv[1] + lv[5]) + (lv[3] + lv[7]));
      }
    }
  }

  static void TileAny(int64_t k, const void* panel, const void* x, size_t xs, int mrows, float* out, int64_t os,
                      int ncols, int64_t b0, int64_t b1, float* state) {
    switch (mrows) {
      case 1: return Tile<1>(k, panel, x, xs, out, os, ncols, b0, b1, state);
      case 2: return Tile<2>(k, panel, x, xs, out, os, ncols, b0, b1, state);
      case 3: return Tile<3>(k, panel, x, xs, out, os, ncols, b0, b1, state);
      default: return Tile<4>(k, panel, x, xs, out, os, ncols, b0, b1, state);
    }
  }
  static constexpr QGemm kGemm = {&PanelBytes, &Pack, &TileAny, kQKK, kSbBytes};
};

}  // namespace

const QGemm* qgemm_avx512_vnni(DType weight) {
  switch (weight) {
    case DType::Q4_0: return &Legacy<PQ4_0>::kGemm;
    case DType::Q4_1: return &Legacy<PQ4_1>::kGemm;
    case DType::Q5_0: return &Legacy<PQ5_0>::kGemm;
    case DType::Q5_1: return &Legacy<PQ5_1>::kGemm;
    case DType::Q8_0: return &Legacy<PQ8<BlockQ8_0>>::kGemm;
    case DType::Q8_1: return &Legacy<PQ8<BlockQ8_1>>::kGemm;
    case DType::Q2_K: return &KQuant<PK2>::kGemm;
    case DType::Q3_K: return &KQuant<PK3>::kGemm;
    case DType::Q4_K: return &KQuant<PK4>::kGemm;
    case DType::Q5_K: return &KQuant<PK5>::kGemm;
    case DType::Q6_K: return &KQuant<PK6>::kGemm;
    default: return nullptr;
  }
}

}  // namespace rbee::cpu::quant
#endif  // RBEE_QGEMM_X86
