// Per-target loads that widen F32/F16/BF16 to f32 vectors and stores that round f32 back, for the GEMM.
// Included once per Highway target by gemm_kernels.cpp (Highway's -inl.h convention: no plain include guard).
//
// Element types are tagged by their C++ storage type: float, hwy::float16_t, hwy::bfloat16_t. Narrowing rounds
// to nearest, ties to even (F16C's vcvtps2ph on AVX2/AVX-512, exact integer code elsewhere); NaN stays NaN.

#if defined(RBEE_GEMM_CONVERT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RBEE_GEMM_CONVERT_INL_H_
#undef RBEE_GEMM_CONVERT_INL_H_
#else
#define RBEE_GEMM_CONVERT_INL_H_
#endif

#include <cstring>
#include <type_traits>

#include <hwy/highway.h>

#include "rbee/core/half.h"

HWY_BEFORE_NAMESPACE();
namespace rbee::cpu::gemm_detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
// Lanes of a full f32 vector: fixed per x86 target (4 on SSE4, 8 on AVX2, 16 on AVX-512).
inline constexpr size_t kLanes = hn::MaxLanes(DF());

// The targets where Highway converts f16 with the F16C instructions.
#undef RBEE_GEMM_HAVE_F16C
#if HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
#define RBEE_GEMM_HAVE_F16C 1
#else
#define RBEE_GEMM_HAVE_F16C 0
#endif

template <class T>
inline constexpr bool kIsF32 = std::is_same_v<T, float>;
template <class T>
inline constexpr bool kIsF16 = std::is_same_v<T, hwy::float16_t>;
template <class T>
inline constexpr bool kIsBF16 = std::is_same_v<T, hwy::bfloat16_t>;

template <class T>
HWY_INLINE uint16_t Bits16(T v) {
  uint16_t b;
  std::memcpy(&b, &v, 2);
  return b;
}

// One element to f32.
template <class T>
HWY_INLINE float ToF32(T v) {
  if constexpr (kIsF32<T>) {
    return v;
  } else if constexpr (kIsF16<T>) {
    return f16_bits_to_f32(Bits16(v));
  } else {
    return bf16_bits_to_f32(Bits16(v));
  }
}

// One f32 to T, round to nearest even.
template <class T>
HWY_INLINE T FromF32(float f) {
  if constexpr (kIsF32<T>) {
    return f;
  } else {
    const uint16_t b = kIsF16<T> ? f32_to_f16_bits(f) : f32_to_bf16_bits(f);
    T out;
    std::memcpy(&out, &b, 2);
    return out;
  }
}

// Widens f16 bits (in u32 lanes) to f32 exactly, including subnormals, infinities and NaN. Used where F16C is
// absent: Highway's emulation there does not handle infinities and NaN.
template <class D32>
HWY_INLINE hn::Vec<D32> F16BitsToF32(D32 df, hn::Vec<hn::RebindToUnsigned<D32>> bits) {
  const hn::RebindToUnsigned<D32> du;
  const auto magnitude = hn::ShiftLeft<13>(hn::And(bits, hn::Set(du, 0x7fffu)));
  const auto exponent = hn::And(magnitude, hn::Set(du, 0x0f800000u));
  auto out = hn::Add(magnitude, hn::Set(du, (127u - 15u) << 23));
  // inf/NaN: move the exponent up to 255
  out = hn::IfThenElse(hn::Eq(exponent, hn::Set(du, 0x0f800000u)), hn::Add(out, hn::Set(du, (128u - 16u) << 23)), out);
  // zero/subnormal: renormalize through a float subtraction (exact)
  const auto renorm =
      hn::BitCast(du, hn::Sub(hn::BitCast(df, hn::Add(out, hn::Set(du, 1u << 23))), hn::BitCast(df, hn::Set(du, 113u << 23))));
  out = hn::IfThenElse(hn::Eq(exponent, hn::Zero(du)), renorm, out);
  const auto sign = hn::ShiftLeft<16>(hn::And(bits, hn::Set(du, 0x8000u)));
  return hn::BitCast(df, hn::Or(out, sign));
}

// Loads Lanes(d) elements of T at p (unaligned) as f32.
template <class D, class T>
HWY_INLINE hn::Vec<D> LoadF32(D d, const T* HWY_RESTRICT p) {
  if constexpr (kIsF32<T>) {
    return hn::LoadU(d, p);
  } else if constexpr (kIsBF16<T>) {
    const hn::Rebind<uint16_t, D> d16;
    const hn::RebindToUnsigned<D> du;
    const auto bits = hn::PromoteTo(du, hn::LoadU(d16, reinterpret_cast<const uint16_t*>(p)));
    return hn::BitCast(d, hn::ShiftLeft<16>(bits));
  } else {
#if RBEE_GEMM_HAVE_F16C
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, p));
#else
    const hn::Rebind<uint16_t, D> d16;
    const hn::RebindToUnsigned<D> du;
    return F16BitsToF32(d, hn::PromoteTo(du, hn::LoadU(d16, reinterpret_cast<const uint16_t*>(p))));
#endif
  }
}

// Rounds f32 lanes to bf16 bits (in u32 lanes), ties to even; NaN becomes a quiet NaN.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> F32ToBF16Bits(D d, hn::Vec<D> v) {
  const hn::RebindToUnsigned<D> du;
  const auto u = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(u, hn::Add(hn::Set(du, 0x7fffu), lsb)));
  const auto quiet_nan = hn::Or(hn::ShiftRight<16>(u), hn::Set(du, 0x40u));
  const auto is_nan = hn::Gt(hn::And(u, hn::Set(du, 0x7fffffffu)), hn::Set(du, 0x7f800000u));
  return hn::IfThenElse(is_nan, quiet_nan, rounded);
}

// Stores Lanes(d) f32 lanes at p as T; with `accumulate`, adds the values already there first.
template <class D, class T>
HWY_INLINE void StoreF32(D d, hn::Vec<D> v, T* HWY_RESTRICT p, bool accumulate) {
  if constexpr (kIsF32<T>) {
    if (accumulate) v = hn::Add(v, hn::LoadU(d, p));
    hn::StoreU(v, d, p);
  } else {
    if (accumulate) v = hn::Add(v, LoadF32(d, p));
    if constexpr (kIsBF16<T>) {
      const hn::Rebind<uint16_t, D> d16;
      const hn::RebindToSigned<D> di;
      const auto bits = hn::BitCast(di, F32ToBF16Bits(d, v));  // <= 0xffff: the demotion does not saturate
      hn::StoreU(hn::DemoteTo(d16, bits), d16, reinterpret_cast<uint16_t*>(p));
    } else {
#if RBEE_GEMM_HAVE_F16C
      const hn::Rebind<hwy::float16_t, D> dh;
      hn::StoreU(hn::DemoteTo(dh, v), dh, p);
#else
      HWY_ALIGN float lanes[hn::MaxLanes(D())];
      hn::Store(v, d, lanes);
      for (size_t i = 0; i < hn::Lanes(d); ++i) p[i] = FromF32<T>(lanes[i]);
#endif
    }
  }
}

// dst[i] = f32(src[i]) for i < n.
template <class T>
HWY_INLINE void ConvertRowToF32(const T* HWY_RESTRICT src, size_t n, float* HWY_RESTRICT dst) {
  size_t i = 0;
  if constexpr (kIsF32<T>) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  } else {
    const DF df;
    for (; i + kLanes <= n; i += kLanes) hn::StoreU(LoadF32(df, src + i), df, dst + i);
    for (; i < n; ++i) dst[i] = ToF32(src[i]);
  }
}

// dst[i] (+)= src[i] rounded to T, for i < n.
template <class T>
HWY_INLINE void StoreRowFromF32(const float* HWY_RESTRICT src, size_t n, T* HWY_RESTRICT dst, bool accumulate) {
  const DF df;
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) StoreF32(df, hn::LoadU(df, src + i), dst + i, accumulate);
  for (; i < n; ++i) dst[i] = FromF32<T>(accumulate ? ToF32(dst[i]) + src[i] : src[i]);
}

}  // namespace rbee::cpu::gemm_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // RBEE_GEMM_CONVERT_INL_H_ toggle
