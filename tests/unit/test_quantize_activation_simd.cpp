// The SIMD activation quantizers (quantize_activation_x86.cpp) against the scalar rules (quantize_q8_k_reference,
// quantize_q8_activation_block): the same bytes for every block, on random rows and on the edge cases of the rules
// (ties at .5 after scaling, the largest magnitude negative or positive and repeated, zeros, denormal maxima, NaN
// and inf elements). SKIPPED where this CPU or build has no SIMD version.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/quant/quantize_internal.h"

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

}  // namespace
}  // namespace rbee::cpu::quant
