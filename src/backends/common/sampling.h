// The arithmetic of token sampling (the `sample` op, op_table.def), shared by the CPU kernel
// (backends/cpu/cpu_sample.cpp, which llm::Sampler runs) and the GPU kernel (backends/gpu/kernels/sample.cu):
// one definition, so that both backends pick the same token from the same logits, settings and seed.
//
// Everything that decides a token is either an integer operation or a single correctly rounded float operation
// (add, multiply, divide, fma, rint), identical on every IEEE machine and compiler:
//  - float operations never contract into an FMA: the device path calls the round-once intrinsics and the host
//    path turns contraction off where the compiler could apply it;
//  - exp is our own (exp_nonpositive: Cody-Waite reduction and a polynomial in fmaf), not the math library's;
//  - probabilities are fixed-point integers (weight(): floor(e^(c - c_max) * 2^40)), so sums are exact and do
//    not depend on the order a parallel reduction adds them in;
//  - random numbers come from a counter-based generator (random_word(seed, draw)): the draw-th number of a
//    seed is known without drawing the ones before, on the host or on a device.
#pragma once

#include <math.h>

#include <cstdint>

#include "rbee/core/half.h"  // detail::f32_bits / bits_f32
#include "rbee/core/host_device.h"

namespace rbee::sampling {

// ---- float operations rounded once ----
// a op b rounded once: the device's round-to-nearest intrinsic, or the host's operator with contraction into an
// FMA turned off where the compiler could apply it.
enum class RoundedOp { Add, Sub, Mul };
template <RoundedOp op>
RBEE_HOST_DEVICE inline float rounded(float a, float b) {
#if defined(__CUDA_ARCH__)
  if constexpr (op == RoundedOp::Add) return __fadd_rn(a, b);
  else if constexpr (op == RoundedOp::Sub) return __fsub_rn(a, b);
  else return __fmul_rn(a, b);
#else
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
  if constexpr (op == RoundedOp::Add) return a + b;
  else if constexpr (op == RoundedOp::Sub) return a - b;
  else return a * b;
#endif
}
RBEE_HOST_DEVICE inline float mul(float a, float b) { return rounded<RoundedOp::Mul>(a, b); }
RBEE_HOST_DEVICE inline float add(float a, float b) { return rounded<RoundedOp::Add>(a, b); }
RBEE_HOST_DEVICE inline float sub(float a, float b) { return rounded<RoundedOp::Sub>(a, b); }
RBEE_HOST_DEVICE inline float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// ---- order of candidates ----
// A monotone map of floats to unsigned integers (a < b <=> bits(a) < bits(b); -0 and +0 map alike).
RBEE_HOST_DEVICE inline uint32_t order_bits(float v) {
  if (v == 0.f) v = 0.f;
  const uint32_t u = ::rbee::detail::f32_bits(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
// Candidates are ordered by value, larger first, and by id, smaller first, among equal values: one 64-bit key
// per token, larger = earlier. Never 0 (for ids below 2^31), so 0 can mean "no candidate".
RBEE_HOST_DEVICE inline uint64_t order_key(float v, int32_t id) {
  return ((uint64_t)order_bits(v) << 32) | (uint64_t)(0xFFFFFFFFu - (uint32_t)id);
}
RBEE_HOST_DEVICE inline int32_t key_id(uint64_t key) { return (int32_t)(0xFFFFFFFFu - (uint32_t)key); }

// A token takes part in temperature sampling when its adjusted logit is neither NaN nor -inf (a logit bias of
// -inf bans it). Greedy decoding takes every token but NaN.
RBEE_HOST_DEVICE inline bool is_candidate(float v) { return v == v && v != -INFINITY; }

// ---- weights ----
// e^x for x <= 0 (0 for x < -32, where the weight below would be 0 anyway; also 0 for NaN). Cephes' expf:
// x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts), e^r = 1 + r + r^2 P(r), times 2^n built from bits.
// Relative error within 2 ulps of e^x; exp_nonpositive(0) = 1 exactly.
RBEE_HOST_DEVICE inline float exp_nonpositive(float x) {
  if (!(x >= -32.f)) return 0.f;
  const float n = rintf(mul(x, 1.44269504088896341f));
  float r = fmaf(-n, 0.693359375f, x);
  r = fmaf(-n, -2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fmaf(p, r, 1.3981999507e-3f);
  p = fmaf(p, r, 8.3334519073e-3f);
  p = fmaf(p, r, 4.1665795894e-2f);
  p = fmaf(p, r, 1.6666665459e-1f);
  p = fmaf(p, r, 5.0000001201e-1f);
  const float e = add(fmaf(mul(r, r), p, r), 1.f);
  const float scale = ::rbee::detail::bits_f32((uint32_t)(127 + (int)n) << 23);  // 2^n, n in [-47, 0]: normal
  return mul(e, scale);
}

// Fixed-point weights: a token's unnormalized probability is weight(c, c_max) / 2^kWeightBits with c its
// logit over the temperature; the most likely token weighs exactly 2^kWeightBits. Sums of up to 2^23 weights
// fit in 64 bits. Weights below 2^-40 of the top one are 0: such tokens are never drawn.
inline constexpr int kWeightBits = 40;
inline constexpr uint64_t kWeightOne = uint64_t{1} << kWeightBits;
RBEE_HOST_DEVICE inline uint64_t weight(float c, float c_max) {
  if (c == c_max) return kWeightOne;
  const float e = exp_nonpositive(sub(c, c_max));
  return (uint64_t)mul(e, 1099511627776.f);  // e * 2^40 is exact; the conversion truncates
}

// ---- logit adjustments (bias, then the repetition, presence and frequency penalties, llama.cpp's order) ----
// `count`: occurrences of the token in the generated output; 0 when it occurs only in the prompt; -1 when it
// occurs in neither (it only has a bias). The repetition penalty applies to tokens seen anywhere (divide positive
// logits, multiply negative ones), presence and frequency penalties to generated ones.
RBEE_HOST_DEVICE inline float adjust(float logit, float bias, int32_t count, float repetition, float presence,
                                     float frequency) {
  float l = add(logit, bias);
  if (count >= 0 && repetition != 1.f) l = l > 0.f ? div(l, repetition) : mul(l, repetition);
  if (count > 0 && (presence != 0.f || frequency != 0.f)) l = sub(l, add(presence, mul(frequency, (float)count)));
  return l;
}

// ---- the counter-based random stream ----
RBEE_HOST_DEVICE inline uint64_t mix64(uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// The uniform 64-bit word of draw number `draw` (0, 1, ...) of a sampler seeded with `seed`.
RBEE_HOST_DEVICE inline uint64_t random_word(uint64_t seed, uint64_t draw) {
  return mix64(mix64(seed + 0x9E3779B97F4A7C15ull) + draw * 0xD1B54A32D192ED03ull);
}
// floor(word * total / 2^64): uniform in [0, total) for a uniform word (the high half of the 128-bit product,
// from 32-bit pieces).
RBEE_HOST_DEVICE inline uint64_t scale_to(uint64_t word, uint64_t total) {
  const uint64_t a_lo = (uint32_t)word, a_hi = word >> 32, b_lo = (uint32_t)total, b_hi = total >> 32;
  const uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi, hi_hi = a_hi * b_hi;
  const uint64_t cross = (lo_lo >> 32) + (uint32_t)hi_lo + lo_hi;
  return hi_hi + (hi_lo >> 32) + (cross >> 32);
}

// ---- thresholds ----
// top-p: the smallest prefix (in key order) of the top-k survivors whose weight reaches top_p of their total.
RBEE_HOST_DEVICE inline double top_p_threshold(uint64_t total, float top_p) { return (double)total * (double)top_p; }
RBEE_HOST_DEVICE inline bool reaches(uint64_t cumulative, double threshold) { return (double)cumulative >= threshold; }
// min-p: tokens whose weight is at least min_p times the top one's.
RBEE_HOST_DEVICE inline double min_p_threshold(float min_p) { return (double)min_p * (double)kWeightOne; }

}  // namespace rbee::sampling
