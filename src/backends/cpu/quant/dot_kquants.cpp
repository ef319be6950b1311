// Dot products of K-quant weights (Q2_K .. Q6_K, and Q8_K) with activations quantized to Q8_K, computed on the
// packed super-blocks. Every type is brought to one form per super-block of 256:
//   8 groups of 32 unsigned levels u (0..63), an int16 scale per 16 elements sc[i], a correction coefficient
//   per 16 elements c[i], and float factors d, dc, such that element e = d * sc[e/16] * u[e] - dc * c[e/16].
// Then dot(w, x) = d_x * (d * sum_e sc[e/16] * u[e] * q_x[e] - dc * sum_i c[i] * bsums_x[i]): one exact
// integer sum S per super-block and the correction C from the activation block sums that Q8_K carries, then
// acc = fma(d * d_x, float(S), acc), acc = fma(-(dc * d_x), float(C), acc) in super-block order (quant.h; the
// prompt GEMM keeps the same order in its lanes). Per type:
//   Q2_K: sc = 4-bit scale, c = 4-bit min, dc = dmin      Q3_K: u = q + 4, sc = 6-bit scale, c = 4 * sc, dc = d
//   Q4_K/Q5_K: sc, c = 6-bit scale and min of the 32-group, dc = dmin      Q6_K: u = q + 32, c = 32 * sc, dc = d
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/quant/dot_kquants.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <cmath>
#include <hwy/highway.h>

#include "backends/cpu/quant/dot_common-inl.h"
#include "backends/cpu/quant/kquant_scales.h"

HWY_BEFORE_NAMESPACE();
namespace rbee::cpu::quant::HWY_NAMESPACE {
namespace {

// Scales of one super-block in the common form above: KScales, k_scales (kquant_scales.h, shared with the prompt
// GEMM's panels).

struct KQ2 {
  using W = BlockQ2_K;
  static void Levels(const W& b, uint8_t* u) {
    for (int e = 0; e < kQKK; ++e) {
      const int n = e / 128, j = (e / 32) % 4, l = e % 32;
      u[e] = (uint8_t)((b.qs[32 * n + l] >> (2 * j)) & 3);
    }
  }
};
struct KQ3 {
  using W = BlockQ3_K;
  static void Levels(const W& b, uint8_t* u) {
    for (int e = 0; e < kQKK; ++e) {
      const int n = e / 128, j = (e / 32) % 4, l = e % 32;
      const int low = (b.qs[32 * n + l] >> (2 * j)) & 3;
      u[e] = (uint8_t)(low | (((b.hmask[l] >> (4 * n + j)) & 1) << 2));
    }
  }
};
struct KQ4 {
  using W = BlockQ4_K;
  static void Levels(const W& b, uint8_t* u) {
    for (int e = 0; e < kQKK; ++e) {
      const int p = e / 64, hi = (e / 32) % 2, l = e % 32;
      const uint8_t v = b.qs[32 * p + l];
      u[e] = (uint8_t)(hi ? v >> 4 : v & 0x0F);
    }
  }
};
struct KQ5 {
  using W = BlockQ5_K;
  static void Levels(const W& b, uint8_t* u) {
    for (int e = 0; e < kQKK; ++e) {
      const int p = e / 64, hi = (e / 32) % 2, l = e % 32;
      const uint8_t v = b.qs[32 * p + l];
      u[e] = (uint8_t)((hi ? v >> 4 : v & 0x0F) | (((b.qh[l] >> (2 * p + hi)) & 1) << 4));
    }
  }
};
struct KQ6 {
  using W = BlockQ6_K;
  static void Levels(const W& b, uint8_t* u) {
    for (int e = 0; e < kQKK; ++e) {
      const int n = e / 128, g = (e / 32) % 4, l = e % 32;
      const uint8_t v = b.ql[64 * n + l + 32 * (g & 1)];
      u[e] = (uint8_t)((g < 2 ? v & 0x0F : v >> 4) | (((b.qh[32 * n + l] >> (2 * g)) & 3) << 4));
    }
  }
};

// ---- portable kernel (every target): per super-block, int16 products sc * u (|.| <= 63 * 128) dotted with the
// int8 activations, plus the correction from the activation block sums.
template <class T>
struct Portable {
  template <int NR>
  struct Impl {
    static void Run(int64_t k, const void* wv, const void* xv, size_t xs, float* out, int64_t os) {
      const auto* w = static_cast<const typename T::W*>(wv);
      const BlockQ8_K* x[NR];
      for (int r = 0; r < NR; ++r) x[r] = reinterpret_cast<const BlockQ8_K*>(static_cast<const char*>(xv) + r * xs);
      float acc[NR] = {};
      HWY_ALIGN uint8_t u[kQKK];
      HWY_ALIGN int16_t scaled[kQKK];
      KScales s;
      for (int64_t ib = 0; ib < k / kQKK; ++ib) {
        k_scales(w[ib], s);
        T::Levels(w[ib], u);
        for (int e = 0; e < kQKK; ++e) scaled[e] = (int16_t)(s.sc[e / 16] * u[e]);
        for (int r = 0; r < NR; ++r) {
          const int32_t sum = DotI16I8(scaled, x[r][ib].qs, kQKK);
          int32_t corr = 0;
          for (int i = 0; i < 16; ++i) corr += s.c[i] * x[r][ib].bsums[i];
          acc[r] = std::fma(s.d * x[r][ib].d, (float)sum, acc[r]);
          acc[r] = std::fma(-(s.dc * x[r][ib].d), (float)corr, acc[r]);
        }
      }
      for (int r = 0; r < NR; ++r) out[r * os] = acc[r];
    }
  };
  static void Dot(int64_t k, const void* w, const void* x, size_t xs, int rows, float* out, int64_t os) {
    ForRows<Impl>(rows, k, w, x, xs, out, os);
  }
};

// Q8_K weights (an activation format, accepted as weights for completeness): a plain int8 dot per block.
struct Q8KWeights {
  template <int NR>
  struct Impl {
    static void Run(int64_t k, const void* wv, const void* xv, size_t xs, float* out, int64_t os) {
      const auto* w = static_cast<const BlockQ8_K*>(wv);
      const BlockQ8_K* x[NR];
      for (int r = 0; r < NR; ++r) x[r] = reinterpret_cast<const BlockQ8_K*>(static_cast<const char*>(xv) + r * xs);
      float acc[NR] = {};
      HWY_ALIGN int16_t q[kQKK];
      for (int64_t ib = 0; ib < k / kQKK; ++ib) {
        for (int e = 0; e < kQKK; ++e) q[e] = w[ib].qs[e];
        for (int r = 0; r < NR; ++r) acc[r] += w[ib].d * x[r][ib].d * (float)DotI16I8(q, x[r][ib].qs, kQKK);
      }
      for (int r = 0; r < NR; ++r) out[r * os] = acc[r];
    }
  };
  static void Dot(int64_t k, const void* w, const void* x, size_t xs, int rows, float* out, int64_t os) {
    ForRows<Impl>(rows, k, w, x, xs, out, os);
  }
};

#if RBEE_QUANT_AVX2
// ---- AVX2: per super-block, Pair(b, s) gives the levels of groups 2s and 2s + 1 as 32 unsigned bytes each;
// vpmaddubsw with the activations (|pair sums| <= 2 * 63 * 127), vpmaddwd with the group's two 16-element scales,
// int32 accumulation over the super-block, and vpmaddwd of the correction coefficients with bsums.
inline __m256i Low2(__m256i v, int shift) {
  return _mm256_and_si256(_mm256_srli_epi16(v, shift), _mm256_set1_epi8(3));
}
inline __m256i Bit(__m256i v, int bit, int to) {
  return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(v, bit), _mm256_set1_epi8(1)), to);
}
inline __m256i Load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

struct AQ2 : KQ2 {
  static void Pair(const W& b, int s, __m256i& qa, __m256i& qb) {
    const __m256i v = Load32(b.qs + 32 * (s / 2));
    const int j = 2 * (s % 2);
    qa = Low2(v, 2 * j);
    qb = Low2(v, 2 * j + 2);
  }
};
struct AQ3 : KQ3 {
  static void Pair(const W& b, int s, __m256i& qa, __m256i& qb) {
    const __m256i v = Load32(b.qs + 32 * (s / 2));
    const __m256i h = Load32(b.hmask);
    const int j = 2 * (s % 2);
    qa = _mm256_or_si256(Low2(v, 2 * j), Bit(h, 2 * s, 2));
    qb = _mm256_or_si256(Low2(v, 2 * j + 2), Bit(h, 2 * s + 1, 2));
  }
};
struct AQ4 : KQ4 {
  static void Pair(const W& b, int s, __m256i& qa, __m256i& qb) {
    const __m256i v = Load32(b.qs + 32 * s);
    const __m256i m = _mm256_set1_epi8(0x0F);
    qa = _mm256_and_si256(v, m);
    qb = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
  }
};
struct AQ5 : KQ5 {
  static void Pair(const W& b, int s, __m256i& qa, __m256i& qb) {
    const __m256i v = Load32(b.qs + 32 * s);
    const __m256i h = Load32(b.qh);
    const __m256i m = _mm256_set1_epi8(0x0F);
    qa = _mm256_or_si256(_mm256_and_si256(v, m), Bit(h, 2 * s, 4));
    qb = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m), Bit(h, 2 * s + 1, 4));
  }
};
struct AQ6 : KQ6 {
  static void Pair(const W& b, int s, __m256i& qa, __m256i& qb) {
    const int n = s / 2, shift = 4 * (s % 2);  // groups 0,1 of a half use low nibbles, groups 2,3 high ones
    const __m256i la = Load32(b.ql + 64 * n), lb = Load32(b.ql + 64 * n + 32);
    const __m256i h = Load32(b.qh + 32 * n);
    const __m256i m = _mm256_set1_epi8(0x0F);
    const int g = 2 * (s % 2);
    qa = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(la, shift), m), _mm256_slli_epi16(Low2(h, 2 * g), 4));
    qb = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lb, shift), m),
                         _mm256_slli_epi16(Low2(h, 2 * g + 2), 4));
  }
};

// Scales of one super-block in registers: S and C hold the 16 per-16-element scales sc[i] and correction
// coefficients c[i] as int16 (computed with vector ops, never stored and reloaded piecewise).
struct KScalesV {
  __m256i S, C;
  float d, dc;
};
inline uint32_t Word(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
// 16 bytes (one per 16-element sub-group) -> 16 int16.
inline __m256i Widen(__m128i bytes, bool is_signed) {
  return is_signed ? _mm256_cvtepi8_epi16(bytes) : _mm256_cvtepu8_epi16(bytes);
}
inline void ScalesQ2(const BlockQ2_K& b, KScalesV& v) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
  const __m128i m = _mm_set1_epi8(0x0F);
  v.S = Widen(_mm_and_si128(raw, m), false);
  v.C = Widen(_mm_and_si128(_mm_srli_epi16(raw, 4), m), false);
  v.d = F16(b.d);
  v.dc = F16(b.dmin);
}
inline void ScalesQ3(const BlockQ3_K& b, KScalesV& v) {
  // Words a, c: low nibbles of bytes 0-7 are scales 0-7, high nibbles scales 8-15; word h: 2-bit pairs, scale
  // i's at bit 2 (i / 4) of byte i % 4.
  const uint32_t a = Word(b.scales), c = Word(b.scales + 4), h = Word(b.scales + 8);
  const uint32_t lo4 = 0x0F0F0F0Fu, lo2 = 0x03030303u;
  const uint32_t w0 = (a & lo4) | ((h & lo2) << 4);
  const uint32_t w1 = (c & lo4) | (((h >> 2) & lo2) << 4);
  const uint32_t w2 = ((a >> 4) & lo4) | (((h >> 4) & lo2) << 4);
  const uint32_t w3 = ((c >> 4) & lo4) | (((h >> 6) & lo2) << 4);
  const __m128i bytes = _mm_sub_epi8(_mm_setr_epi32((int)w0, (int)w1, (int)w2, (int)w3), _mm_set1_epi8(32));
  v.S = Widen(bytes, true);
  v.C = _mm256_slli_epi16(v.S, 2);
  v.d = v.dc = F16(b.d);
}
// Q4_K / Q5_K: 8 six-bit scales and mins, each covering two 16-element sub-groups.
template <class Block>
inline void ScalesK4(const Block& b, KScalesV& v) {
  const uint32_t a = Word(b.scales), m = Word(b.scales + 4), h = Word(b.scales + 8);
  const uint32_t lo6 = 0x3F3F3F3Fu, lo4 = 0x0F0F0F0Fu, lo2 = 0x03030303u;
  const uint32_t sc03 = a & lo6, mn03 = m & lo6;
  const uint32_t sc47 = (h & lo4) | (((a >> 6) & lo2) << 4);
  const uint32_t mn47 = ((h >> 4) & lo4) | (((m >> 6) & lo2) << 4);
  const __m128i sc = _mm_setr_epi32((int)sc03, (int)sc47, 0, 0), mn = _mm_setr_epi32((int)mn03, (int)mn47, 0, 0);
  v.S = Widen(_mm_unpacklo_epi8(sc, sc), false);  // s0 s0 s1 s1 ... s7 s7
  v.C = Widen(_mm_unpacklo_epi8(mn, mn), false);
  v.d = F16(b.d);
  v.dc = F16(b.dmin);
}
inline void ScalesQ6(const BlockQ6_K& b, KScalesV& v) {
  v.S = Widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)), true);
  v.C = _mm256_slli_epi16(v.S, 5);
  v.d = v.dc = F16(b.d);
}
inline void ScalesV(const BlockQ2_K& b, KScalesV& v) { ScalesQ2(b, v); }
inline void ScalesV(const BlockQ3_K& b, KScalesV& v) { ScalesQ3(b, v); }
inline void ScalesV(const BlockQ4_K& b, KScalesV& v) { ScalesK4(b, v); }
inline void ScalesV(const BlockQ5_K& b, KScalesV& v) { ScalesK4(b, v); }
inline void ScalesV(const BlockQ6_K& b, KScalesV& v) { ScalesQ6(b, v); }

// For group g (32 elements): int16 lanes 0-7 = sc[2g], lanes 8-15 = sc[2g + 1], matching how vpmaddubsw leaves
// the pair sums of bytes 0-15 and 16-31. half = S's 128-bit half holding sc[8 (g / 4) ..] in both lanes.
inline __m256i GroupScales(__m256i half, int g) {
  const int o = 4 * (g % 4);
  const __m256i pick = _mm256_setr_epi8((char)o, (char)(o + 1), (char)o, (char)(o + 1), (char)o, (char)(o + 1),
                                        (char)o, (char)(o + 1), (char)o, (char)(o + 1), (char)o, (char)(o + 1),
                                        (char)o, (char)(o + 1), (char)o, (char)(o + 1), (char)(o + 2), (char)(o + 3),
                                        (char)(o + 2), (char)(o + 3), (char)(o + 2), (char)(o + 3), (char)(o + 2),
                                        (char)(o + 3), (char)(o + 2), (char)(o + 3), (char)(o + 2), (char)(o + 3),
                                        (char)(o + 2), (char)(o + 3), (char)(o + 2), (char)(o + 3));
  return _mm256_shuffle_epi8(half, pick);
}

template <class T>
struct Avx2 {
  template <int NR>
  struct Impl {
    static void Run(int64_t k, const void* wv, const void* xv, size_t xs, float* out, int64_t os) {
      const auto* w = static_cast<const typename T::W*>(wv);
      const BlockQ8_K* x[NR];
      for (int r = 0; r < NR; ++r) x[r] = reinterpret_cast<const BlockQ8_K*>(static_cast<const char*>(xv) + r * xs);
      float acc[NR] = {};
      KScalesV s;
      for (int64_t ib = 0; ib < k / kQKK; ++ib) {
        const typename T::W& b = w[ib];
        ScalesV(b, s);
        const __m256i halves[2] = {_mm256_permute2x128_si256(s.S, s.S, 0x00), _mm256_permute2x128_si256(s.S, s.S, 0x11)};
        __m256i isum[NR];
        for (int r = 0; r < NR; ++r) isum[r] = _mm256_setzero_si256();
        for (int p = 0; p < 4; ++p) {
          __m256i qa, qb;
          T::Pair(b, p, qa, qb);
          const __m256i sa = GroupScales(halves[p / 2], 2 * p), sb = GroupScales(halves[p / 2], 2 * p + 1);
          for (int r = 0; r < NR; ++r) {
            const int8_t* y = x[r][ib].qs + 64 * p;
            const __m256i pa = _mm256_maddubs_epi16(qa, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y)));
            const __m256i pb = _mm256_maddubs_epi16(qb, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + 32)));
            isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(_mm256_madd_epi16(pa, sa), _mm256_madd_epi16(pb, sb)));
          }
        }
        for (int r = 0; r < NR; ++r) {
          const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r][ib].bsums));
          // S and C reduced together (exact int32): h = [S0+S1, S2+S3, C0+C1, C2+C3 | S4+S5, ...], then lanes.
          const __m256i h = _mm256_hadd_epi32(isum[r], _mm256_madd_epi16(bs, s.C));
          const __m128i q = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
          const __m128 sc = _mm_cvtepi32_ps(_mm_hadd_epi32(q, q));  // [S, C, S, C]
          const float dx = x[r][ib].d;
          acc[r] = Fma(s.d * dx, _mm_cvtss_f32(sc), acc[r]);
          acc[r] = Fma(-(s.dc * dx), _mm_cvtss_f32(_mm_movehdup_ps(sc)), acc[r]);
        }
      }
      for (int r = 0; r < NR; ++r) out[r * os] = acc[r];
    }
  };
  static void Dot(int64_t k, const void* w, const void* x, size_t xs, int rows, float* out, int64_t os) {
    ForRows<Impl>(rows, k, w, x, xs, out, os);
  }
};
#endif  // RBEE_QUANT_AVX2

}  // namespace

RowDotFn GetKQuantRowDot(DType t) {
  switch (t) {
#if RBEE_QUANT_AVX2
    case DType::Q2_K: return &Avx2<AQ2>::Dot;
    case DType::Q3_K: return &Avx2<AQ3>::Dot;
    case DType::Q4_K: return &Avx2<AQ4>::Dot;
    case DType::Q5_K: return &Avx2<AQ5>::Dot;
    case DType::Q6_K: return &Avx2<AQ6>::Dot;
#else
    case DType::Q2_K: return &Portable<KQ2>::Dot;
    case DType::Q3_K: return &Portable<KQ3>::Dot;
    case DType::Q4_K: return &Portable<KQ4>::Dot;
    case DType::Q5_K: return &Portable<KQ5>::Dot;
    case DType::Q6_K: return &Portable<KQ6>::Dot;
#endif
    case DType::Q8_K: return &Q8KWeights::Dot;
    default: return nullptr;
  }
}

}  // namespace rbee::cpu::quant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rbee::cpu::quant {
HWY_EXPORT(GetKQuantRowDot);
RowDotFn kquant_row_dot(DType weight) { return HWY_DYNAMIC_DISPATCH(GetKQuantRowDot)(weight); }
}  // namespace rbee::cpu::quant
#endif
