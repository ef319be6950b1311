// SIMD helpers shared by the quantized dot-product kernels (dot_legacy.cpp, dot_kquants.cpp). Included once
// per Highway target from inside those files' per-target compilation (Highway's -inl.h include-guard pattern).
//
// Portable helpers use Highway ops only. On x86 targets with AVX2 (HWY_AVX2, HWY_AVX3) the kernels use raw
// intrinsics for what Highway 1.0.3 lacks: unsigned x signed byte multiply-add pairs (vpmaddubsw) and byte sign
// transfer (vpsignb), the core of every int8 dot product here.
#if defined(RBEE_QUANT_DOT_COMMON_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RBEE_QUANT_DOT_COMMON_INL_H_
#undef RBEE_QUANT_DOT_COMMON_INL_H_
#else
#define RBEE_QUANT_DOT_COMMON_INL_H_
#endif

#include <cstring>

#include <hwy/highway.h>

#include "backends/cpu/quant/blocks.h"
#include "backends/cpu/quant/quant.h"

#undef RBEE_QUANT_AVX2
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
#define RBEE_QUANT_AVX2 1
#include <immintrin.h>
#else
#define RBEE_QUANT_AVX2 0
#endif

HWY_BEFORE_NAMESPACE();
namespace rbee::cpu::quant::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// sum a[i] * b[i] for i < n; n a multiple of 32 (every vector width here divides it).
HWY_INLINE int32_t DotI16I8(const int16_t* HWY_RESTRICT a, const int8_t* HWY_RESTRICT b, int n) {
#if HWY_TARGET == HWY_SCALAR
  int32_t sum = 0;  // one-lane vectors cannot widen pairs
  for (int i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
#else
  const hn::ScalableTag<int32_t> d32;
  const hn::Repartition<int16_t, decltype(d32)> d16;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  auto sum0 = hn::Zero(d32), sum1 = hn::Zero(d32);
  for (int i = 0; i < n; i += (int)hn::Lanes(d16)) {
    const auto va = hn::LoadU(d16, a + i);
    const auto vb = hn::PromoteTo(d16, hn::LoadU(d8, b + i));
    sum0 = hn::ReorderWidenMulAccumulate(d32, va, vb, sum0, sum1);
  }
  return hn::GetLane(hn::SumOfLanes(d32, hn::Add(sum0, sum1)));
#endif
}

// Calls Impl<rows>(args...) for rows in 1..kMaxRows: kernels keep one accumulator per row in registers.
template <template <int> class Impl, class... Args>
HWY_INLINE void ForRows(int rows, Args... args) {
  switch (rows) {
    case 1: return Impl<1>::Run(args...);
    case 2: return Impl<2>::Run(args...);
    case 3: return Impl<3>::Run(args...);
    default: return Impl<4>::Run(args...);
  }
}

#if RBEE_QUANT_AVX2
HWY_INLINE float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

HWY_INLINE float F16(uint16_t h) { return _cvtsh_ss(h); }

// The exact int32 sum of v's 8 lanes.
HWY_INLINE int32_t HSumI(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

// a * b + c rounded once (vfmadd; the same bits as std::fma and the prompt GEMM's vector fmas).
HWY_INLINE float Fma(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

// 16 packed bytes -> 32 bytes: low nibbles in bytes 0-15, high nibbles in bytes 16-31. (The bytes are loaded
// into both 128-bit lanes and the upper lane shifted: no cross-lane shuffle.)
HWY_INLINE __m256i Nibbles(const uint8_t* qs) {
  const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m256i both = _mm256_blend_epi32(v, _mm256_srli_epi16(v, 4), 0xF0);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Byte i = 0x10 where bit i of the little-endian 32-bit word at qh is set, else 0 (Q5 fifth bits).
HWY_INLINE __m256i FifthBits(const uint8_t* qh) {
  int32_t bits;
  std::memcpy(&bits, qh, 4);
  // Byte i takes byte i / 8 of the word, then keeps bit i % 8 of it.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(bits), _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                                3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i select = _mm256_set1_epi64x((int64_t)0x8040201008040201ull);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// Eight int32 sums of four products u[i] * s[i]: u unsigned bytes (< 128 here), s signed bytes.
HWY_INLINE __m256i DotU8I8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
#endif  // RBEE_QUANT_AVX2

}  // namespace rbee::cpu::quant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
