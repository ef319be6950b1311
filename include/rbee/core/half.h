// IEEE binary16 (f16) and bfloat16 (bf16) storage types with exact conversions.
//
// Conversions to the narrow types round to nearest, ties to even; NaN stays NaN, overflow becomes infinity.
// These are the scalar reference conversions; SIMD kernels use the CPU's own instructions where present. The
// GPU kernels use the same functions (RBEE_HOST_DEVICE), so both backends round 16-bit values identically.
#pragma once

#include <cstdint>
#include <cstring>

#include "rbee/core/host_device.h"

namespace rbee {

namespace detail {
RBEE_HOST_DEVICE inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
RBEE_HOST_DEVICE inline float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

// f16 bits -> f32. Exact (every f16 value is representable in f32).
RBEE_HOST_DEVICE inline float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t out;
  if (exp == 0x1f) {
    out = sign | 0x7f800000u | (mant << 13);  // inf or NaN (payload kept)
  } else if (exp != 0) {
    out = sign | ((exp + 112u) << 23) | (mant << 13);  // normal: rebias 15 -> 127
  } else if (mant == 0) {
    out = sign;  // signed zero
  } else {
    // subnormal f16: value = mant * 2^-24; normalize into an f32 normal
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while ((mant & 0x400u) == 0);
    out = sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  return detail::bits_f32(out);
}

// f32 -> f16 bits, round to nearest even.
RBEE_HOST_DEVICE inline uint16_t f32_to_f16_bits(float f) {
  const uint32_t u = detail::f32_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return (uint16_t)(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u | ((abs >> 13) & 0x3ffu) : 0u));
  }
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds to >= 65520: infinity
  if (abs < 0x38800000u) {
    // result is subnormal or zero: value / 2^-24, rounded to nearest even
    if (abs < 0x33000000u) return (uint16_t)sign;  // below half the smallest subnormal
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14 + (113 - exp) - 1 ... bits to drop from the 24-bit mantissa
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return (uint16_t)(sign | q);
  }
  // normal: rebias 127 -> 15 and round 23 -> 10 mantissa bits
  uint32_t r = abs - 0x38000000u;  // exponent - 112
  const uint32_t lsb = (r >> 13) & 1u;
  r += 0xfffu + lsb;
  return (uint16_t)(sign | (r >> 13));
}

RBEE_HOST_DEVICE inline float bf16_bits_to_f32(uint16_t b) { return detail::bits_f32((uint32_t)b << 16); }

// f32 -> bf16 bits, round to nearest even; NaN stays a quiet NaN.
RBEE_HOST_DEVICE inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = detail::f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

// Storage types. They convert explicitly; arithmetic happens in float.
struct f16 {
  uint16_t bits = 0;
  f16() = default;
  explicit f16(float f) : bits(f32_to_f16_bits(f)) {}
  static f16 from_bits(uint16_t b) {
    f16 h;
    h.bits = b;
    return h;
  }
  explicit operator float() const { return f16_bits_to_f32(bits); }
  float to_float() const { return f16_bits_to_f32(bits); }
};

struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(f32_to_bf16_bits(f)) {}
  static bf16 from_bits(uint16_t b) {
    bf16 h;
    h.bits = b;
    return h;
  }
  explicit operator float() const { return bf16_bits_to_f32(bits); }
  float to_float() const { return bf16_bits_to_f32(bits); }
};

static_assert(sizeof(f16) == 2 && sizeof(bf16) == 2);

}  // namespace rbee
