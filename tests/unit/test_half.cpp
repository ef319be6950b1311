// f16 / bf16 conversions against an independent reference built from frexp/ldexp in double precision.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "rbee/core/half.h"

namespace rbee {
namespace {

// Value of an f16 bit pattern, decoded field by field in double.
double f16_reference_value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
  double v;
  if (exp == 31) v = mant ? NAN : INFINITY;
  else if (exp == 0) v = std::ldexp((double)mant, -24);
  else v = std::ldexp(1.0 + mant / 1024.0, exp - 15);
  return sign ? -v : v;
}

// Nearest-even rounding of x to f16, by searching the two neighbouring f16 values.
uint16_t f16_reference_round(float x) {
  if (std::isnan(x)) return 0x7e00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs((double)x);
  if (a >= 65520.0) return sign | 0x7c00;
  // Candidates: scan by bisection over the positive patterns (monotonic in value).
  uint16_t lo = 0, hi = 0x7bff;
  while (lo < hi) {
    const uint16_t mid = (uint16_t)((lo + hi + 1) / 2);
    if (f16_reference_value(mid) <= a) lo = mid;
    else hi = mid - 1;
  }
  const double below = f16_reference_value(lo);
  if (below == a) return sign | lo;
  const double above = f16_reference_value((uint16_t)(lo + 1));
  const double d_lo = a - below, d_hi = above - a;
  uint16_t pick = d_lo < d_hi ? lo : d_hi < d_lo ? (uint16_t)(lo + 1) : ((lo & 1) ? (uint16_t)(lo + 1) : lo);
  return sign | pick;
}

TEST(Half, EveryF16DecodesExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const double want = f16_reference_value((uint16_t)h);
    const float got = f16_bits_to_f32((uint16_t)h);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ((double)got, want) << "bits " << h;
    }
  }
}

TEST(Half, EveryF16RoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t bits = (uint16_t)h;
    if (std::isnan(f16_reference_value(bits))) continue;
    ASSERT_EQ(f32_to_f16_bits(f16_bits_to_f32(bits)), bits) << h;
  }
}

TEST(Half, F32ToF16RoundsToNearestEven) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    // Random f32 bit patterns restricted to the f16 range and a bit beyond (exponents 90..145).
    uint32_t u = bits(rng);
    u = (u & 0x807fffffu) | ((90u + (u >> 23) % 56u) << 23);
    float x;
    std::memcpy(&x, &u, 4);
    ASSERT_EQ(f32_to_f16_bits(x), f16_reference_round(x)) << "x=" << x;
  }
  // Ties: exactly halfway between two f16 values goes to the even one.
  EXPECT_EQ(f32_to_f16_bits(1.0f + 1.0f / 2048), 0x3c00);          // 1 + half ulp -> 1
  EXPECT_EQ(f32_to_f16_bits(1.0f + 3.0f / 2048), 0x3c02);          // 1 + 1.5 ulp -> 1 + 2 ulp
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7c00);                    // ties up to infinity
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);       // half the smallest subnormal -> 0
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16_bits(INFINITY), 0x7c00);
  EXPECT_TRUE(std::isnan(f16_bits_to_f32(f32_to_f16_bits(NAN))));
}

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16_bits(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(f32_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(f32_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(f32_to_bf16_bits(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(NAN))));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1e6f, 1e6f);
  for (int i = 0; i < 100000; ++i) {
    const float x = dist(rng);
    const float r = bf16_bits_to_f32(f32_to_bf16_bits(x));
    ASSERT_LE(std::fabs(r - x), std::fabs(x) * std::ldexp(1.0f, -8)) << x;
  }
}

}  // namespace
}  // namespace rbee
