// Per-target packing of GEMM operand panels into the f32 tile order the micro-kernel reads.
// Included once per Highway target by gemm_kernels.cpp.
//
// A panel is P rows (M rows of A, or N columns of B) by kc steps along K. Packed, step p holds the P values of
// that step next to each other: dst[p * P + r]. Missing rows of an edge panel are zero, so the micro-kernel
// always computes whole tiles.

#if defined(RBEE_GEMM_PACK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RBEE_GEMM_PACK_INL_H_
#undef RBEE_GEMM_PACK_INL_H_
#else
#define RBEE_GEMM_PACK_INL_H_
#endif

#include <algorithm>

#include "backends/cpu/gemm_convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rbee::cpu::gemm_detail::HWY_NAMESPACE {

// 8x8 f32 transpose through AVX registers: row i is 8 floats at rows[i]; column c is stored (8 floats) at
// dst + c * ld, in increasing c, so with ld < 8 each store spills into the next column's slots and the next store
// overwrites them. Only on targets with AVX (AVX2, AVX-512).
#if HWY_TARGET <= HWY_AVX2
HWY_INLINE void Transpose8x8(const float* const* rows, float* HWY_RESTRICT dst, size_t ld) {
  const __m256 r0 = _mm256_loadu_ps(rows[0]), r1 = _mm256_loadu_ps(rows[1]);
  const __m256 r2 = _mm256_loadu_ps(rows[2]), r3 = _mm256_loadu_ps(rows[3]);
  const __m256 r4 = _mm256_loadu_ps(rows[4]), r5 = _mm256_loadu_ps(rows[5]);
  const __m256 r6 = _mm256_loadu_ps(rows[6]), r7 = _mm256_loadu_ps(rows[7]);
  // pairs of rows interleaved, then quads, then the 128-bit halves swapped into place
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(dst + 0 * ld, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(dst + 1 * ld, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(dst + 2 * ld, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(dst + 3 * ld, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(dst + 4 * ld, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(dst + 5 * ld, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(dst + 6 * ld, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(dst + 7 * ld, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#endif

// All P rows present, each contiguous along K (row r at src + r * rs), f32: a transpose into
// dst[p * P + r]. Writes nothing outside dst[0, kc * P).
template <size_t P>
HWY_INLINE void PackTransposeF32(const float* HWY_RESTRICT src, int64_t rs, size_t kc, float* HWY_RESTRICT dst) {
  size_t p = 0;
#if HWY_TARGET <= HWY_AVX2
  constexpr size_t kFull = P / 8 * 8;  // rows moved in whole 8x8 blocks
  constexpr size_t kRest = P % 8;      // the rest goes through one 8x8 block with repeated rows; its stores
                                       // spill into the next step, so it runs first and never on the last step
  const float* rows[8];
  for (; kRest == 0 ? p + 8 <= kc : p + 8 < kc; p += 8) {
    if constexpr (kRest != 0) {
      for (size_t i = 0; i < 8; ++i) rows[i] = src + (int64_t)(kFull + std::min(i, kRest - 1)) * rs + p;
      Transpose8x8(rows, dst + p * P + kFull, P);
    }
    for (size_t r = 0; r < kFull; r += 8) {
      for (size_t i = 0; i < 8; ++i) rows[i] = src + (int64_t)(r + i) * rs + p;
      Transpose8x8(rows, dst + p * P + r, P);
    }
  }
#endif
  for (; p < kc; ++p) {
    for (size_t r = 0; r < P; ++r) dst[p * P + r] = src[(int64_t)r * rs + p];
  }
}

// dst[p * P + r] = f32(src[r * rs + p * ks]) for r < rows (<= P), p < kc; rows r >= `rows` are zero.
template <size_t P, class T>
HWY_NOINLINE void PackPanel(const T* HWY_RESTRICT src, int64_t rs, int64_t ks, size_t rows, size_t kc,
                            float* HWY_RESTRICT dst) {
  if (rows < P) {
    for (size_t p = 0; p < kc; ++p) std::fill(dst + p * P + rows, dst + p * P + P, 0.0f);
  }
  if (rs == 1) {
    // The P values of one step are adjacent in memory: one short row copy per step.
    if constexpr (kIsF32<T>) {
      if (rows == P) {
        for (size_t p = 0; p < kc; ++p) std::memcpy(dst + p * P, src + (int64_t)p * ks, P * sizeof(float));
        return;
      }
    }
    for (size_t p = 0; p < kc; ++p) ConvertRowToF32(src + (int64_t)p * ks, rows, dst + p * P);
    return;
  }
  if (ks == 1) {
    // Each row is contiguous along K: transpose, through an f32 staging buffer for 16-bit sources.
    if constexpr (kIsF32<T>) {
      if (rows == P) {
        PackTransposeF32<P>(src, rs, kc, dst);
        return;
      }
      for (size_t r = 0; r < rows; ++r) {
        const float* s = src + (int64_t)r * rs;
        for (size_t p = 0; p < kc; ++p) dst[p * P + r] = s[p];
      }
    } else {
      constexpr size_t kChunk = 256;
      HWY_ALIGN float stage[P * kChunk];
      for (size_t p0 = 0; p0 < kc; p0 += kChunk) {
        const size_t len = std::min(kChunk, kc - p0);
        for (size_t r = 0; r < rows; ++r) ConvertRowToF32(src + (int64_t)r * rs + p0, len, stage + r * kChunk);
        if (rows == P) {
          PackTransposeF32<P>(stage, kChunk, len, dst + p0 * P);
        } else {
          for (size_t r = 0; r < rows; ++r) {
            for (size_t p = 0; p < len; ++p) dst[(p0 + p) * P + r] = stage[r * kChunk + p];
          }
        }
      }
    }
    return;
  }
  // Any other strides (broadcast or strided views): element by element.
  for (size_t p = 0; p < kc; ++p) {
    const T* s = src + (int64_t)p * ks;
    for (size_t r = 0; r < rows; ++r) dst[p * P + r] = ToF32(s[(int64_t)r * rs]);
  }
}

// Packs `cols` consecutive rows into ceil(cols / P) panels, panel t at dst + t * P * kc (same element order as
// PackPanel). Where the P values of a step are adjacent (rs == 1, e.g. a row-major B), the source is walked
// step by step across all panels: long contiguous reads instead of one short read per page per panel.
template <size_t P, class T>
HWY_NOINLINE void PackPanels(const T* HWY_RESTRICT src, int64_t rs, int64_t ks, size_t cols, size_t kc,
                             float* HWY_RESTRICT dst) {
  const size_t full = cols / P;
  if (rs == 1 && full > 1) {
    for (size_t p = 0; p < kc; ++p) {
      const T* s = src + (int64_t)p * ks;
      for (size_t t = 0; t < full; ++t) {
        if constexpr (kIsF32<T>) {
          std::memcpy(dst + t * P * kc + p * P, s + t * P, P * sizeof(float));
        } else {
          ConvertRowToF32(s + t * P, P, dst + t * P * kc + p * P);
        }
      }
    }
  } else {
    for (size_t t = 0; t < full; ++t) PackPanel<P>(src + (int64_t)(t * P) * rs, rs, ks, P, kc, dst + t * P * kc);
  }
  if (full * P < cols) {
    PackPanel<P>(src + (int64_t)(full * P) * rs, rs, ks, cols - full * P, kc, dst + full * P * kc);
  }
}

}  // namespace rbee::cpu::gemm_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // RBEE_GEMM_PACK_INL_H_ toggle
