// Dot products of 32-element-block weights (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1) with activations quantized
// to Q8_0 (or Q8_1 for the _1 types), computed on the packed blocks:
//   Q4_0, Q5_0, Q8_0, Q8_1: sum_blocks d_w * d_x * s_b, s_b = sum_j q_w[j] * q_x[j] (q_w with its offset
//     removed) as one exact int32 per block, then acc = fma(d_w * d_x, float(s_b), acc) in block order: ggml's
//     reference order, the order of the prompt GEMM too (quant.h states the contract).
//   _1 types: sum_blocks d_w * d_x * sum_j q_w[j] * q_x[j] + m_w * s_x  (s_x = d_x * sum_j q_x[j]), in 8 lanes
//     as ggml's AVX2 kernels (SmolLM2's logits equal llama.cpp's).
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
          if constexpr (T::kHasMin) {
            acc[r] += dw * f16_to_f32(x[r][ib].d) * (float)sum + mw * ActSum<T>(x[r][ib]);
          } else {
            acc[r] = std::fma(dw * f16_to_f32(x[r][ib].d), (float)sum, acc[r]);  // the contract's order
          }
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

// The _1 types' kernel (Q4_1, Q5_1; the others run Avx2BlockSum below).
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


// The types with one int32 per block (Q8_0 activations): s_b = sum q_w q_x exactly, then
// acc = fma(d_w * d_x, float(s_b), acc) in block order (quant.h), the order the prompt GEMM keeps in its lanes.
// Unsigned-level types (Q4_0, Q5_0) take kOffset * sum q_x out of the block's integer sum; the activation row's
// side data has each block's d_x (f32) and sum q_x (int32). The horizontal sums run four at a time: four
// blocks of one row (rows == 1, decode), or one block of four rows.
template <class T>
struct Avx2BlockSum {
  static constexpr int kShift = T::kOffset == 8 ? 3 : T::kOffset == 16 ? 4 : 0;
  static_assert(T::kOffset == 0 || (1 << kShift) == T::kOffset);
  // The 8 int32 lanes of block b's products with the activation block y (offset not yet removed).
  static HWY_INLINE __m256i Lanes(const typename T::W& b, const BlockQ8_0& y) {
    const __m256i q = T::Load(b);
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs));
    if constexpr (T::kSigned) return DotU8I8(_mm256_sign_epi8(q, q), _mm256_sign_epi8(v, q));
    return DotU8I8(q, v);
  }
  static HWY_INLINE __m128i Unoffset(__m128i s, __m128i xsum) {
    if constexpr (T::kOffset != 0) return _mm_sub_epi32(s, _mm_slli_epi32(xsum, kShift));
    return s;
  }
  template <int NR>
  struct Impl {
    static void Run(int64_t k, const void* wv, const void* xv, size_t xs, float* out, int64_t os) {
      const auto* w = static_cast<const typename T::W*>(wv);
      const int64_t nb = k / kQK;
      const size_t side = (size_t)((nb * (int64_t)sizeof(BlockQ8_0) + 31) / 32 * 32);
      const BlockQ8_0* x[NR];
      const float* xd[NR];
      const int32_t* xsum[NR];
      for (int r = 0; r < NR; ++r) {
        const char* row = static_cast<const char*>(xv) + r * xs;
        x[r] = reinterpret_cast<const BlockQ8_0*>(row);
        xd[r] = reinterpret_cast<const float*>(row + side);
        xsum[r] = reinterpret_cast<const int32_t*>(xd[r] + nb);
      }
      if constexpr (NR == 1) {
        __m128 acc = _mm_setzero_ps();
        int64_t ib = 0;
        for (; ib + 4 <= nb; ib += 4) {
          const __m128i s = Unoffset(HSum4I(Lanes(w[ib], x[0][ib]), Lanes(w[ib + 1], x[0][ib + 1]),
                                            Lanes(w[ib + 2], x[0][ib + 2]), Lanes(w[ib + 3], x[0][ib + 3])),
                                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(xsum[0] + ib)));
          const __m128 f = _mm_cvtepi32_ps(s);
          const __m128 dw = _mm_cvtph_ps(_mm_setr_epi16((short)w[ib].d, (short)w[ib + 1].d, (short)w[ib + 2].d,
                                                        (short)w[ib + 3].d, 0, 0, 0, 0));
          const __m128 t = _mm_mul_ps(dw, _mm_loadu_ps(xd[0] + ib));
          acc = _mm_fmadd_ss(t, f, acc);
          acc = _mm_fmadd_ss(_mm_shuffle_ps(t, t, 1), _mm_shuffle_ps(f, f, 1), acc);
          acc = _mm_fmadd_ss(_mm_shuffle_ps(t, t, 2), _mm_shuffle_ps(f, f, 2), acc);
          acc = _mm_fmadd_ss(_mm_shuffle_ps(t, t, 3), _mm_shuffle_ps(f, f, 3), acc);
        }
        for (; ib < nb; ++ib) {
          const __m256i z = _mm256_setzero_si256();
          const __m128i s = Unoffset(HSum4I(Lanes(w[ib], x[0][ib]), z, z, z), _mm_cvtsi32_si128(xsum[0][ib]));
          const __m128 t = _mm_mul_ss(_mm_set_ss(F16(w[ib].d)), _mm_set_ss(xd[0][ib]));
          acc = _mm_fmadd_ss(t, _mm_cvtepi32_ps(s), acc);
        }
        out[0] = _mm_cvtss_f32(acc);
      } else {
        // Lane r = activation row r (lanes past NR compute zeros).
        __m128 acc = _mm_setzero_ps();
        for (int64_t ib = 0; ib < nb; ++ib) {
          __m256i v[4];
          alignas(16) int32_t xs4[4] = {};
          alignas(16) float xd4[4] = {};
          for (int r = 0; r < 4; ++r) {
            if (r < NR) {
              v[r] = Lanes(w[ib], x[r][ib]);
              xs4[r] = xsum[r][ib];
              xd4[r] = xd[r][ib];
            } else {
              v[r] = _mm256_setzero_si256();
            }
          }
          const __m128i s = Unoffset(HSum4I(v[0], v[1], v[2], v[3]), _mm_load_si128(reinterpret_cast<const __m128i*>(xs4)));
          const __m128 t = _mm_mul_ps(_mm_set1_ps(F16(w[ib].d)), _mm_load_ps(xd4));
          acc = _mm_fmadd_ps(t, _mm_cvtepi32_ps(s), acc);
        }
        alignas(16) float o[4];
        _mm_store_ps(o, acc);
        for (int r = 0; r < NR; ++r) out[r * os] = o[r];
      }
    }
  };
  static void Dot(int64_t k, const void* w, const void* x, size_t xs, int rows, float* out, int64_t os) {
    ForRows<Impl>(rows, k, w, x, xs, out, os);
  }
};
#endif  // RBEE_QUANT_AVX2

}  // namespace

// Whether this target's row kernels are the AVX2 code (HWY_AVX2 and HWY_AVX3 compile the same raw intrinsics).
bool IsX86SimdRowTarget() { return RBEE_QUANT_AVX2 != 0; }

RowDotFn GetLegacyRowDot(DType t) {
#if RBEE_QUANT_AVX2
  switch (t) {
    case DType::Q4_0: return &Avx2BlockSum<AQ4_0>::Dot;
    case DType::Q4_1: return &Avx2<AQ4_1>::Dot;
    case DType::Q5_0: return &Avx2BlockSum<AQ5_0>::Dot;
    case DType::Q5_1: return &Avx2<AQ5_1>::Dot;
    case DType::Q8_0: return &Avx2BlockSum<AQ8_0>::Dot;
    case DType::Q8_1: return &Avx2BlockSum<AQ8_1>::Dot;
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
HWY_EXPORT(IsX86SimdRowTarget);
bool row_kernels_are_x86_simd() { return HWY_DYNAMIC_DISPATCH(IsX86SimdRowTarget)(); }
RowDotFn legacy_row_dot(DType weight) { return HWY_DYNAMIC_DISPATCH(GetLegacyRowDot)(weight); }
}  // namespace rbee::cpu::quant
#endif
