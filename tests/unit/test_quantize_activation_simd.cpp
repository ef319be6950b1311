// The SIMD activation quantizers (quantize_activation_x86.cpp) against the scalar rules (quantize_q8_k_reference,
// quantize_q8_activation_block): the same bytes for every block, on random rows and on the edge cases of the rules
// (ties at .5 after scaling, the largest magnitude negative or positive and repeated, zeros, denormal maxima, NaN
// and inf elements), and the F16 / BF16 rounding of activation rows against half.h's scalar round trip. SKIPPED
// where this CPU or build has no SIMD version.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/quant/quantize_internal.h"
#include "rbee/core/half.h"

namespace rbee::cpu::quant {
namespace {

std::vector<float> edge_rows() {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x;
  auto block = [&](auto fill) {
    const size_t at = x.size();
    x.resize(at + kQKK);
    for (int j = 0; j < kQKK; ++j) x[at + (size_t)j] = fill(j);
  };
  for (int b = 0; b < 64; ++b) block([&](int) { return normal(rng) * (b + 1) * 0.37f; });
  block([](int) { return 0.f; });
  block([](int j) { return j == 77 ? -0.f : 0.f; });
  // Elements that scale to k + 0.5 exactly (iscale = -127 / -127 = 1): ties to even.
  block([](int j) { return j == 3 ? -127.f : (float)(j % 200) - 99.5f; });
  // The largest magnitude repeated with both signs: the first one sets the sign of the scale.
  block([](int j) { return j == 9 ? 3.f : j == 30 ? -3.f : 0.01f * (float)j; });
  block([](int j) { return j == 9 ? -3.f : j == 30 ? 3.f : 0.01f * (float)j; });
  // Denormal maximum: -127 / max overflows to inf.
  block([](int j) { return j == 5 ? std::numeric_limits<float>::denorm_min() : j == 6 ? -1e-45f : 0.f; });
  block([](int j) { return j % 2 ? std::numeric_limits<float>::denorm_min() * (float)j : 0.f; });
  block([](int j) { return j == 11 ? std::nanf("") : 0.5f * std::sin((float)j); });
  block([](int) { return std::nanf(""); });
  block([](int j) { return j == 40 ? std::numeric_limits<float>::infinity() : (float)j; });
  block([](int j) { return j == 40 ? -std::numeric_limits<float>::infinity() : j == 41 ? std::nanf("") : -(float)j; });
  return x;
}

TEST(QuantizeQ8KSimd, SameBytesAsTheScalarRule) {
  const std::vector<float> x = edge_rows();
  const int64_t nb = (int64_t)x.size() / kQKK;
  std::vector<BlockQ8_K> want((size_t)nb), got((size_t)nb);
  std::memset(want.data(), 0x5A, want.size() * sizeof(BlockQ8_K));
  std::memset(got.data(), 0xA5, got.size() * sizeof(BlockQ8_K));  // poisoned differently
  quantize_q8_k_reference(x.data(), want.data(), nb);
  if (!quantize_q8_k_simd(x.data(), got.data(), nb)) GTEST_SKIP() << "no SIMD Q8_K quantizer on this CPU / build";
  for (int64_t i = 0; i < nb; ++i) {
    EXPECT_EQ(0, std::memcmp(&want[(size_t)i], &got[(size_t)i], sizeof(BlockQ8_K))) << "block " << i;
  }
  // quantize_q8_k (the dispatcher) takes the SIMD path here.
  std::vector<BlockQ8_K> via((size_t)nb);
  quantize_q8_k(x.data(), via.data(), nb);
  EXPECT_EQ(0, std::memcmp(via.data(), want.data(), via.size() * sizeof(BlockQ8_K)));
  // The tie block rounds to even.
  EXPECT_EQ(want[66].qs[0], -100);  // iscale = -127 / -127 = 1: -99.5 -> -100 (even)
  EXPECT_EQ(want[66].qs[1], -98);   // -98.5 -> -98
}

TEST(QuantizeQ8ActivationSimd, SameBytesAsTheScalarRule) {
  std::vector<float> x = edge_rows();
  // A 32-element block whose amax is 127: id = 1, products at k + 0.5 round to even.
  for (int j = 0; j < kQK; ++j) x.push_back(j == 0 ? 127.f : (float)j - 15.5f);
  const int64_t nb = (int64_t)x.size() / kQK;
  constexpr size_t kStride = 40;  // quants of block i at i * kStride, as inside BlockQ8_0 / BlockQ8_1 arrays
  std::vector<int8_t> want_q((size_t)nb * kStride, 0x11), got_q((size_t)nb * kStride, 0x11);
  std::vector<float> want_d((size_t)nb), got_d((size_t)nb, -1.f);
  std::vector<int32_t> want_s((size_t)nb), got_s((size_t)nb, -12345);
  for (int64_t i = 0; i < nb; ++i) {
    want_s[(size_t)i] = quantize_q8_activation_block(x.data() + i * kQK, want_d[(size_t)i], &want_q[(size_t)i * kStride]);
  }
  for (size_t i = 0; i < want_q.size(); ++i) {
    if (i % kStride >= (size_t)kQK) got_q[i] = want_q[i];  // the gaps stay as they were
  }
  if (!quantize_q8_activation_simd(x.data(), nb, got_q.data(), kStride, got_d.data(), got_s.data())) {
    GTEST_SKIP() << "no SIMD Q8 activation quantizer on this CPU / build";
  }
  for (int64_t i = 0; i < nb; ++i) {
    const size_t at = (size_t)i * kStride;
    EXPECT_EQ(0, std::memcmp(&want_q[at], &got_q[at], kQK)) << "block " << i;
    EXPECT_EQ(0, std::memcmp(&want_d[(size_t)i], &got_d[(size_t)i], sizeof(float))) << "block " << i;
    EXPECT_EQ(want_s[(size_t)i], got_s[(size_t)i]) << "block " << i;
  }
  EXPECT_EQ(got_q, want_q);  // nothing written outside the blocks' quants
  const size_t tie = (size_t)(nb - 1) * kStride;
  EXPECT_EQ(want_q[tie + 1], -14);  // -14.5 -> -14 (even)
  EXPECT_EQ(want_q[tie + 2], -14);  // -13.5 -> -14
}

// F16 / BF16 activation rows: the same bits as half.h's scalar round trip for every input class.
TEST(Round16BitSimd, SameBitsAsTheScalarRoundTrip) {
  std::vector<uint32_t> bits = {
      0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,  // zeros, infinities
      0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fa02000u, 0xff9fe001u,  // quiet and signalling NaNs, payloads
      0x00000001u, 0x807fffffu, 0x33000000u, 0x33000001u, 0x387fe000u, 0x387ff000u, 0x38800000u,  // tiny, subnormal
      0x477fe000u, 0x477fefffu, 0x477ff000u, 0x477fffffu, 0x7f7fffffu,  // the f16 maximum and overflow to infinity
      0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, 0x7f7f8000u,  // bf16 ties (to even), beside them, overflow
      0x3f801000u, 0x3f803000u, 0x3f800fffu};                           // f16 ties
  std::mt19937 rng(29);
  for (int i = 0; i < 4000; ++i) bits.push_back(rng());
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int i = 0; i < 997; ++i) {  // an odd count: the scalar remainder
    float v = normal(rng) * 100.f;
    uint32_t b;
    std::memcpy(&b, &v, 4);
    bits.push_back(b);
  }
  std::vector<float> x(bits.size());
  std::memcpy(x.data(), bits.data(), bits.size() * 4);
  for (const bool bf16 : {false, true}) {
    std::vector<float> got(x.size(), -777.f);
    if (!round_to_16bit_simd(bf16, x.data(), got.data(), (int64_t)x.size())) {
      GTEST_SKIP() << "no SIMD 16-bit rounding on this CPU / build";
    }
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = bf16 ? bf16_bits_to_f32(f32_to_bf16_bits(x[i])) : f16_bits_to_f32(f32_to_f16_bits(x[i]));
      ASSERT_EQ(0, std::memcmp(&want, &got[i], 4))
          << (bf16 ? "bf16" : "f16") << " input bits " << std::hex << bits[i] << " element " << std::dec << i;
    }
  }
}

}  // namespace
}  // namespace rbee::cpu::quant
