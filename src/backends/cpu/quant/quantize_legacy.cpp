// Round-to-nearest quantizers of the 32-element block types, written to give the same bytes as ggml's
// reference quantizers (quantize_row_q*_ref) and gguf-py: the scale comes from the block's extreme value,
// quants are truncations of (x * (1/d) + offset + 0.5), and every step is a float operation in their order.
// Attribution: ggml / llama.cpp (https://github.com/ggml-org/ggml), MIT License, Copyright (c) 2023-2024 The ggml
// authors; NOTICE holds the license text.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/quant/blocks.h"
#include "backends/cpu/quant/quantize_internal.h"

namespace rbee::cpu::quant {

namespace {

// The element of largest magnitude (the first one on ties), with its sign.
float signed_absmax(const float* x, int n) {
  float amax = 0.f, max = 0.f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, int n, float& min, float& max) {
  min = x[0];
  max = x[0];
  for (int j = 1; j < n; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
}

// Truncation toward zero of v, clamped to [0, hi]: ggml's MIN(hi, (int8_t)v) for the v >= -0.5 that finite
// inputs give; NaN (from non-finite inputs) becomes 0 instead of undefined behaviour.
uint8_t trunc_clamp(float v, int hi) {
  if (!(v > 0.f)) return 0;
  if (v >= (float)hi) return (uint8_t)hi;
  return (uint8_t)(int)v;
}

// round(v) half away from zero, as roundf; |v| <= 127 for finite inputs, NaN becomes 0.
int8_t round_to_i8(float v) {
  if (!(v == v)) return 0;
  const float r = std::round(v);
  return (int8_t)(r < -128.f ? -128 : r > 127.f ? 127 : (int)r);
}

}  // namespace

void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float d = signed_absmax(x, kQK) / -8.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t lo = trunc_clamp(x[j] * id + 8.5f, 15);
      const uint8_t hi = trunc_clamp(x[j + kQK / 2] * id + 8.5f, 15);
      y[i].qs[j] = (uint8_t)(lo | (hi << 4));
    }
  }
}

void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float min, max;
    min_max(x, kQK, min, max);
    const float d = (max - min) / 15.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(min);
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t lo = trunc_clamp((x[j] - min) * id + 0.5f, 15);
      const uint8_t hi = trunc_clamp((x[j + kQK / 2] - min) * id + 0.5f, 15);
      y[i].qs[j] = (uint8_t)(lo | (hi << 4));
    }
  }
}

void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float d = signed_absmax(x, kQK) / -16.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    y[i].d = f32_to_f16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t lo = trunc_clamp(x[j] * id + 16.5f, 31);
      const uint8_t hi = trunc_clamp(x[j + kQK / 2] * id + 16.5f, 31);
      y[i].qs[j] = (uint8_t)((lo & 0x0F) | ((hi & 0x0F) << 4));
      qh |= (uint32_t)(lo >> 4) << j;
      qh |= (uint32_t)(hi >> 4) << (j + kQK / 2);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float min, max;
    min_max(x, kQK, min, max);
    const float d = (max - min) / 31.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t lo = trunc_clamp((x[j] - min) * id + 0.5f, 31);
      const uint8_t hi = trunc_clamp((x[j + kQK / 2] - min) * id + 0.5f, 31);
      y[i].qs[j] = (uint8_t)((lo & 0x0F) | ((hi & 0x0F) << 4));
      qh |= (uint32_t)(lo >> 4) << j;
      qh |= (uint32_t)(hi >> 4) << (j + kQK / 2);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

namespace {
// Q8_0 weight rule (gguf-py, ggml's reference quantizer): d = amax / 127, q = round-half-away(x * (1 / d)).
// Returns sum(q).
int quantize_q8_block(const float* x, float& d_out, int8_t* qs) {
  float amax = 0.f;
  for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.f;
  const float id = d != 0.f ? 1.f / d : 0.f;
  int sum = 0;
  for (int j = 0; j < kQK; ++j) {
    qs[j] = round_to_i8(x[j] * id);
    sum += qs[j];
  }
  d_out = d;
  return sum;
}

// v rounded to the nearest integer, ties to even, for |v| <= 2^22 (adding and removing 1.5 * 2^23 leaves no
// fraction bits; IEEE round-to-nearest does the rest). NaN becomes 0.
inline int8_t nearest_even_i8(float v) {
  if (!(v == v)) return 0;
  const float r = (v + 12582912.f) - 12582912.f;
  return (int8_t)(r < -128.f ? -128 : r > 127.f ? 127 : (int)r);
}
}  // namespace

int quantize_q8_activation_block(const float* x, float& d_out, int8_t* qs) {
  float amax = 0.f;
  for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float id = amax != 0.f ? 127.f / amax : 0.f;
  int sum = 0;
  for (int j = 0; j < kQK; ++j) {
    qs[j] = nearest_even_i8(x[j] * id);
    sum += qs[j];
  }
  d_out = amax / 127.f;
  return sum;
}

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float d;
    quantize_q8_block(x, d, y[i].qs);
    y[i].d = f32_to_f16(d);
  }
}

namespace {
// fn(i, d, sum) after block i's quants are written by quantize_q8_activation_block's rule (SIMD where present).
template <class Block, class Fn>
void quantize_q8_activation_blocks(const float* x, Block* y, int64_t nb, Fn&& fn) {
  constexpr int64_t kChunk = 64;
  float d[kChunk];
  int32_t sum[kChunk];
  for (int64_t i0 = 0; i0 < nb; i0 += kChunk) {
    const int64_t n = std::min(kChunk, nb - i0);
    if (!quantize_q8_activation_simd(x + i0 * kQK, n, y[i0].qs, sizeof(Block), d, sum)) {
      for (int64_t i = 0; i < n; ++i) sum[i] = quantize_q8_activation_block(x + (i0 + i) * kQK, d[i], y[i0 + i].qs);
    }
    for (int64_t i = 0; i < n; ++i) fn(i0 + i, d[i], sum[i]);
  }
}
}  // namespace

void quantize_q8_0_activation(const float* x, BlockQ8_0* y, int64_t nb) {
  quantize_q8_activation_blocks(x, y, nb, [&](int64_t i, float d, int32_t) { y[i].d = f32_to_f16(d); });
}

void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t nb) {
  quantize_q8_activation_blocks(x, y, nb, [&](int64_t i, float d, int32_t sum) {
    y[i].d = f32_to_f16(d);
    y[i].s = f32_to_f16(d * (float)sum);
  });
}

}  // namespace rbee::cpu::quant
