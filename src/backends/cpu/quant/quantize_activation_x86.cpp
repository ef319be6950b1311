// The activation quantizers with AVX2 (quantize_internal.h: quantize_q8_k_simd, quantize_q8_activation_simd), bit
// for bit the scalar rules; the prompt GEMM quantizes every activation row of every matmul with them (10-12% of a
// pp512 ran in the scalar loops). Every operation is exact or the same single f32 rounding as the scalar code (the
// product, the quotient), and the vector conversion rounds to nearest even as rintf and the 1.5 * 2^23 trick do.
// Clamping the product in f32 before rounding equals clamping the rounded integer (monotonic rounding, integer
// bounds), also for +-inf products; NaN products give 0, as the scalar rules.
//   Q8_K (quantize_q8_k_reference): per 256-element super-block amax = max |x| (NaN ignored), max = the first x
//     with |x| == amax, iscale = -127 / max, q = clamp(nearest-even(iscale * x), -127, 127), bsums = the 16 sums of
//     16 quants, d = 1 / iscale; an all-zero (or all-NaN) block is all zeros.
//   Q8_0 / Q8_1 activations (quantize_q8_activation_block): per 32 elements amax = max |x| (NaN ignored), id =
//     127 / amax (0 when amax is 0), q = clamp(nearest-even(x * id), -128, 127), d = amax / 127, the quants' sum.
//   F16 / BF16 activation rows (round_to_16bit_simd): x rounded to the weight's 16-bit type and back, as half.h.
#include <cstring>

#include "backends/cpu/quant/quantize_internal.h"
#include "rbee/core/half.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define RBEE_AVX2_FN __attribute__((target("avx2,fma")))

namespace rbee::cpu::quant {
namespace {

RBEE_AVX2_FN inline float HMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

RBEE_AVX2_FN inline int32_t HSum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// 8 quants as int32: clamp(nearest-even(scale * xv), lo, 127), 0 where the product is NaN.
RBEE_AVX2_FN inline __m256i Quants8(__m256 xv, __m256 scale, float lo) {
  const __m256 v = _mm256_mul_ps(scale, xv);
  const __m256 ordered = _mm256_cmp_ps(v, v, _CMP_ORD_Q);
  const __m256 c = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(lo)), _mm256_set1_ps(127.f));
  return _mm256_cvtps_epi32(_mm256_and_ps(c, ordered));
}

RBEE_AVX2_FN void QuantizeQ8KAvx2(const float* x, BlockQ8_K* y, int64_t nb) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    __m256 am = _mm256_setzero_ps();
    // max_ps returns its second operand where either is NaN: NaN elements never raise amax (the scalar `>`).
    for (int j = 0; j < kQKK; j += 8) am = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), abs_mask), am);
    const float amax = HMax(am);
    if (amax == 0.f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    float max = 0.f;
    const __m256 target = _mm256_set1_ps(amax);
    for (int j = 0; j < kQKK; j += 8) {
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), abs_mask), target,
                                                       _CMP_EQ_OQ));
      if (hit) {
        max = x[j + __builtin_ctz((unsigned)hit)];
        break;
      }
    }
    const float iscale_f = -127.f / max;
    const __m256 iscale = _mm256_set1_ps(iscale_f);
    for (int j = 0; j < kQKK; j += 32) {
      const __m256i a = Quants8(_mm256_loadu_ps(x + j), iscale, -127.f);
      const __m256i b = Quants8(_mm256_loadu_ps(x + j + 8), iscale, -127.f);
      const __m256i c = Quants8(_mm256_loadu_ps(x + j + 16), iscale, -127.f);
      const __m256i d = Quants8(_mm256_loadu_ps(x + j + 24), iscale, -127.f);
      y[i].bsums[j / 16] = (int16_t)HSum(_mm256_add_epi32(a, b));
      y[i].bsums[j / 16 + 1] = (int16_t)HSum(_mm256_add_epi32(c, d));
      // packs work per 128-bit lane: dwords come out a0-3 b0-3 c0-3 d0-3 a4-7 b4-7 c4-7 d4-7.
      const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + j), _mm256_permutevar8x32_epi32(bytes, order));
    }
    y[i].d = 1 / iscale_f;
  }
}

// Q8_0 / Q8_1 activation blocks: 32 elements each.
RBEE_AVX2_FN void QuantizeQ8ActivationAvx2(const float* x, int64_t nb, int8_t* qs, size_t stride, float* d,
                                           int32_t* sum) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    const __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
    const __m256 x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);
    __m256 am = _mm256_max_ps(_mm256_and_ps(x0, abs_mask), _mm256_setzero_ps());  // NaN: the second operand
    am = _mm256_max_ps(_mm256_and_ps(x1, abs_mask), am);
    am = _mm256_max_ps(_mm256_and_ps(x2, abs_mask), am);
    am = _mm256_max_ps(_mm256_and_ps(x3, abs_mask), am);
    const float amax = HMax(am);
    const __m256 id = _mm256_set1_ps(amax != 0.f ? 127.f / amax : 0.f);
    const __m256i a = Quants8(x0, id, -128.f), b = Quants8(x1, id, -128.f);
    const __m256i c = Quants8(x2, id, -128.f), e = Quants8(x3, id, -128.f);
    sum[i] = HSum(_mm256_add_epi32(_mm256_add_epi32(a, b), _mm256_add_epi32(c, e)));
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, e));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + (size_t)i * stride), _mm256_permutevar8x32_epi32(bytes, order));
    d[i] = amax / 127.f;
  }
}

// Rounds to nearest even as f32_to_f16_bits: vcvtps2ph with an explicit rounding mode (subnormal results, overflow to
// infinity and NaN quieting with the payload's top 10 bits are what the scalar code does too), then vcvtph2ps (exact).
__attribute__((target("avx2,f16c"))) void RoundF16Avx2(const float* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = f16_bits_to_f32(f32_to_f16_bits(x[i]));
}

// f32_to_bf16_bits in integers, lane by lane: u + 0x7fff + bit 16 of u, the low half cleared; NaN: the top half with
// the quiet bit set.
RBEE_AVX2_FN void RoundBF16Avx2(const float* x, float* out, int64_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  const __m256i high = _mm256_set1_epi32((int)0xffff0000u), quiet = _mm256_set1_epi32(0x00400000);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    const __m256i rounded = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), high);
    const __m256i quieted = _mm256_or_si256(_mm256_and_si256(u, high), quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_blendv_epi8(rounded, quieted, nan));
  }
  for (; i < n; ++i) out[i] = bf16_bits_to_f32(f32_to_bf16_bits(x[i]));
}

bool HasAvx2() {
  static const bool avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return avx2;
}

}  // namespace

bool quantize_q8_activation_simd(const float* x, int64_t nb, int8_t* qs, size_t stride, float* d, int32_t* sum) {
  if (!HasAvx2()) return false;
  QuantizeQ8ActivationAvx2(x, nb, qs, stride, d, sum);
  return true;
}

bool quantize_q8_k_simd(const float* x, BlockQ8_K* y, int64_t nb) {
  if (!HasAvx2()) return false;
  QuantizeQ8KAvx2(x, y, nb);
  return true;
}

bool round_to_16bit_simd(bool bf16, const float* x, float* out, int64_t n) {
  static const bool f16c = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("f16c") != 0;
  }();
  if (!HasAvx2() || (!bf16 && !f16c)) return false;
  if (bf16) RoundBF16Avx2(x, out, n);
  else RoundF16Avx2(x, out, n);
  return true;
}

}  // namespace rbee::cpu::quant

#else

namespace rbee::cpu::quant {
bool quantize_q8_k_simd(const float*, BlockQ8_K*, int64_t) { return false; }
bool quantize_q8_activation_simd(const float*, int64_t, int8_t*, size_t, float*, int32_t*) { return false; }
bool round_to_16bit_simd(bool, const float*, float*, int64_t) { return false; }
}  // namespace rbee::cpu::quant

#endif
