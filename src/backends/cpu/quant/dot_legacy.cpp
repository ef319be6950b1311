// Dot products of 32-element-block weights (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1) with activations quantized
// to Q8_0 (or Q8_1 for the _1 types), computed on the packed blocks:
//   _0 types: sum_blocks d_w * d_x * sum_j q_w[j] * q_x[j]            (q_w with its offset removed)
//   _1 types: sum_blocks d_w * d_x * sum_j q_w[j] * q_x[j] + m_w * s_x  (s_x = d_x * sum_j q_x[j])
// Integer sums are exact; only the per-block scaling happens in float.
// Attribution: the accumulation order follows ggml / llama.cpp (MIT License; NOTICE holds the license text).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/quant/dot_legacy.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <cmath>
#include <hwy/highway.h>

#include "backends/cpu/quant/dot_common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rbee::cpu::quant::HWY_NAMESPACE {
namespace {

// ---- block decoding shared by the portable kernels: quants as int16 (offset removed for the _0 types) ----
struct LQ4_0 {
  using W = BlockQ4_0;
  using X = BlockQ8_0;
  static constexpr bool kHasMin = false;
  static void Decode(const W& b, int16_t* q) {
    for (int j = 0; j < 16; ++j) {
      q[j] = (int16_t)((b.qs[j] & 0x0F) - 8);
      q[j + 16] = (int16_t)((b.qs[j] >> 4) - 8);
    }
  }
};
struct LQ4_1 {
  using W = BlockQ4_1;
  using X = BlockQ8_1;
  static constexpr bool kHasMin = true;
  static void Decode(const W& b, int16_t* q) {
    for (int j = 0; j < 16; ++j) {
      q[j] = (int16_t)(b.qs[j] & 0x0F);
      q[j + 16] = (int16_t)(b.qs[j] >> 4);
    }
  }
};
inline uint32_t Bits32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
struct LQ5_0 {
  using W = BlockQ5_0;
  using X = BlockQ8_0;
  static constexpr bool kHasMin = false;
  static void Decode(const W& b, int16_t* q) {
    const uint32_t h = Bits32(b.qh);
    for (int j = 0; j < 16; ++j) {
      q[j] = (int16_t)(((b.qs[j] & 0x0F) | (((h >> j) & 1) << 4)) - 16);
      q[j + 16] = (int16_t)(((b.qs[j] >> 4) | (((h >> (j + 16)) & 1) << 4)) - 16);
    }
  }
};
struct LQ5_1 {
  using W = BlockQ5_1;
  using X = BlockQ8_1;
  static constexpr bool kHasMin = true;
  static void Decode(const W& b, int16_t* q) {
    const uint32_t h = Bits32(b.qh);
    for (int j = 0; j < 16; ++j) {
      q[j] = (int16_t)((b.qs[j] & 0x0F) | (((h >> j) & 1) << 4));
      q[j + 16] = (int16_t)((b.qs[j] >> 4) | (((h >> (j + 16)) & 1) << 4));
    }
  }
};
struct LQ8_0 {
  using W = BlockQ8_0;
  using X = BlockQ8_0;
  static constexpr bool kHasMin = false;
  static void Decode(const W& b, int16_t* q) {
    for (int j = 0; j < 32; ++j) q[j] = b.qs[j];
  }
};
struct LQ8_1 {
  using W = BlockQ8_1;
  using X = BlockQ8_0;
  static constexpr bool kHasMin = false;
  static void Decode(const W& b, int16_t* q) {
    for (int j = 0; j < 32; ++j) q[j] = b.qs[j];
  }
};

template <class T> float WeightMin(const typename T::W& b) {
  if constexpr (T::kHasMin) return f16_to_f32(b.m);
  else return 0.f;
}
template <class T> float ActSum(const typename T::X& b) {
  if constexpr (T::kHasMin) return f16_to_f32(b.s);
  else return 0.f;
}

// ---- portable kernel (every target): decode each weight block once, then an int16 x int8 dot per row ----
template <class T>
struct Portable {
  template <int NR>
  struct Impl {
    static void Run(int64_t k, const void* wv, const void* xv, size_t xs, float* out, int64_t os) {
      const auto* w = static_cast<const typename T::W*>(wv);
      const typename T::X* x[NR];
      for (int r = 0; r < NR; ++r) x[r] = reinterpret_cast<const typename T::X*>(static_cast<const char*>(xv) + r * xs);
      float acc[NR] = {};
      HWY_ALIGN int16_t q[kQK];
      for (int64_t ib = 0; ib < k / kQK; ++ib) {
        T::Decode(w[ib], q);
        const float dw = f16_to_f32(w[ib].d), mw = WeightMin<T>(w[ib]);
        for (int r = 0; r < NR; ++r) {
          const int32_t sum = DotI16I8(q, x[r][ib].qs, kQK);
          acc[r] += dw * f16_to_f32(x[r][ib].d) * (float)sum + mw * ActSum<T>(x[r][ib]);
        }
      }
      for (int r = 0; r < NR; ++r) out[r * os] = acc[r];
    }
  };
  static void Dot(int64_t k, const void* w, const void* x, size_t xs, int rows, float* out, int64_t os) {
    ForRows<Impl>(rows, k, w, x, xs, out, os);
  }
};

#if RBEE_QUANT_AVX2
// ---- AVX2: weight quants unpacked to 32 bytes in a register, then vpmaddubsw against each activation row.
// Q4_0 / Q5_0 keep their unsigned levels u = q + offset and subtract offset * d_w * (d_x * sum q_x) per block,
// taking d_x * sum q_x from the activation row's side data (quant.h). Q8_0 / Q8_1 weights are signed: they use
// |q_w| * (q_x with q_w's sign), the usual way to feed signed bytes to vpmaddubsw; |q_w| <= 128 and
// |q_x| <= 127 keep the pairwise int16 sums below 2^15.
struct AQ4_0 : LQ4_0 {
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 8;
  static __m256i Load(const W& b) { return Nibbles(b.qs); }
};
struct AQ4_1 : LQ4_1 {
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 0;
  static __m256i Load(const W& b) { return Nibbles(b.qs); }
};
struct AQ5_0 : LQ5_0 {
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 16;
  static __m256i Load(const W& b) { return _mm256_or_si256(Nibbles(b.qs), FifthBits(b.qh)); }
};
struct AQ5_1 : LQ5_1 {
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 0;
  static __m256i Load(const W& b) { return _mm256_or_si256(Nibbles(b.qs), FifthBits(b.qh)); }
};
struct AQ8_0 : LQ8_0 {
  static constexpr bool kSigned = true;
  static constexpr int kOffset = 0;
  static __m256i Load(const W& b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)); }
};
struct AQ8_1 : LQ8_1 {
  static constexpr bool kSigned = true;
  static constexpr int kOffset = 0;
  static __m256i Load(const W& b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)); }
};

// The f16 at p (the first field of every legacy block) as f32 in lane 0; reads the 8 bytes at p, all inside the
// block, so the load folds into vcvtph2ps.
HWY_INLINE __m128 F16At(const uint16_t* p) { return _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }

template <class T>
struct Avx2 {
  // Adds block ib of the weights times block ib of each row to acc (float lanes) and macc (the min or offset
  // terms). xd[r]: row r's block scales d_x as f32, then d_x * sum q_x (Q8_0 rows) or s (Q8_1 rows); quant.h.
  template <int NR>
  static HWY_INLINE void Block(const typename T::W& b, const typename T::X* const* x, const float* const* xd,
                               int64_t nb, int64_t ib, __m256* acc, float* macc) {
    const __m256i q = T::Load(b);
    const __m256i qa = T::kSigned ? _mm256_sign_epi8(q, q) : q;
    const __m128 dw = F16At(&b.d);
    const __m256 dwv = _mm256_broadcastss_ps(dw);
    float mw = 0.f;
    if constexpr (T::kHasMin) mw = F16(b.m);
    if constexpr (T::kOffset != 0) mw = -(float)T::kOffset * _mm_cvtss_f32(dw);
    for (int r = 0; r < NR; ++r) {
      __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r][ib].qs));
      if (T::kSigned) y = _mm256_sign_epi8(y, q);
      const __m256 sum = _mm256_cvtepi32_ps(DotU8I8(qa, y));
      acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dwv, _mm256_broadcast_ss(xd[r] + ib)), sum, acc[r]);
      if constexpr (T::kHasMin || T::kOffset != 0) macc[r] = std::fma(mw, xd[r][nb + ib], macc[r]);
    }
  }
  template <int NR>
  struct Impl {
    static void Run(int64_t k, const void* wv, const void* xv, size_t xs, float* out, int64_t os) {
      const auto* w = static_cast<const typename T::W*>(wv);
      const int64_t nb = k / kQK;
      const size_t side = (size_t)((nb * (int64_t)sizeof(typename T::X) + 31) / 32 * 32);
      const typename T::X* x[NR];
      const float* xd[NR];
      for (int r = 0; r < NR; ++r) {
        const char* row = static_cast<const char*>(xv) + r * xs;
        x[r] = reinterpret_cast<const typename T::X*>(row);
        xd[r] = reinterpret_cast<const float*>(row + side);
      }
      // One accumulator chain per row, blocks in order, as ggml's CPU kernels (ggml_vec_dot_*, llamafile's
      // tinyBLAS) accumulate: acc = fma(d_w * d_x, sum, acc) in 8 lanes, the min terms by scalar fma, then the
      // lanes summed as hsum_float_8. So results match llama.cpp's bit for bit where the activations do. Every
      // row count uses the same order, so a row's result is the same whatever rows share its tile: continuous
      // batching relies on it (a stream's tokens must not change with its neighbours).
      __m256 acc[NR];
      float macc[NR] = {};
      for (int r = 0; r < NR; ++r) acc[r] = _mm256_setzero_ps();
      for (int64_t ib = 0; ib < nb; ++ib) Block<NR>(w[ib], x, xd, nb, ib, acc, macc);
      for (int r = 0; r < NR; ++r) out[r * os] = HSum(acc[r]) + macc[r];
    }
  };
  static void Dot(int64_t k, const void* w, const void* x, size_t xs, int rows, float* out, int64_t os) {
    ForRows<Impl>(rows, k, w, x, xs, out, os);
  }
};
#endif  // RBEE_QUANT_AVX2

}  // namespace

RowDotFn GetLegacyRowDot(DType t) {
#if RBEE_QUANT_AVX2
  switch (t) {
    case DType::Q4_0: return &Avx2<AQ4_0>::Dot;
    case DType::Q4_1: return &Avx2<AQ4_1>::Dot;
    case DType::Q5_0: return &Avx2<AQ5_0>::Dot;
    case DType::Q5_1: return &Avx2<AQ5_1>::Dot;
    case DType::Q8_0: return &Avx2<AQ8_0>::Dot;
    case DType::Q8_1: return &Avx2<AQ8_1>::Dot;
    default: return nullptr;
  }
#else
  switch (t) {
    case DType::Q4_0: return &Portable<LQ4_0>::Dot;
    case DType::Q4_1: return &Portable<LQ4_1>::Dot;
    case DType::Q5_0: return &Portable<LQ5_0>::Dot;
    case DType::Q5_1: return &Portable<LQ5_1>::Dot;
    case DType::Q8_0: return &Portable<LQ8_0>::Dot;
    case DType::Q8_1: return &Portable<LQ8_1>::Dot;
    default: return nullptr;
  }
#endif
}

}  // namespace rbee::cpu::quant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rbee::cpu::quant {
HWY_EXPORT(GetLegacyRowDot);
RowDotFn legacy_row_dot(DType weight) { return HWY_DYNAMIC_DISPATCH(GetLegacyRowDot)(weight); }
}  // namespace rbee::cpu::quant
#endif
