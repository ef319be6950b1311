// Bit packing of the K-quant blocks and the sub-block scales of the Q4_K / Q5_K quantizers, shared by the CPU backend
// (backends/cpu/quant/quantize_k.cpp, blocks.h) and the GPU kernels (backends/gpu/kernels/quant_kquant_fit.cuh): one
// definition, so a tensor quantized on either backend gets the same bytes. The layouts are ggml's.
// Attribution: ggml / llama.cpp (https://github.com/ggml-org/ggml), MIT License, Copyright (c) 2023-2024 The ggml
// authors; NOTICE holds the license text.
#pragma once

#include <math.h>

#include <cstdint>

#include "backends/common/kquant_fit.h"
#include "rbee/core/half.h"
#include "rbee/core/host_device.h"

namespace rbee::kquant {

// Packs 2-bit levels L[0..256) as Q2_K / Q3_K store them: element 128n + 32j + l at bits 2j of qs[32n + l].
RBEE_HOST_DEVICE inline void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int n = 0; n < 2; ++n) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* e = L + 128 * n + l;
      qs[32 * n + l] = (uint8_t)(e[0] | (e[32] << 2) | (e[64] << 4) | (e[96] << 6));
    }
  }
}

// The 12 packed bytes of Q4_K / Q5_K's 6-bit scales and mins of 8 sub-blocks: bytes 0-3 hold scales 0-3 in their
// low 6 bits, bytes 4-7 mins 0-3; bytes 8-11 hold the low 4 bits of scale 4-7 (low nibble) and min 4-7 (high
// nibble), whose top 2 bits sit in the spare top bits of bytes 0-3 (scales) and 4-7 (mins).
constexpr int kScaleMinBytes = 12;

RBEE_HOST_DEVICE inline void pack_scale_min_k4(const uint8_t* sc, const uint8_t* mn, uint8_t* s) {
  for (int i = 0; i < kScaleMinBytes; ++i) s[i] = 0;
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      s[j] = sc[j];
      s[j + 4] = mn[j];
    } else {
      s[j + 4] = (uint8_t)((sc[j] & 0x0F) | ((mn[j] & 0x0F) << 4));
      s[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
      s[j] |= (uint8_t)((mn[j] >> 4) << 6);
    }
  }
}

// Sub-block j (< 8) of the packed bytes: the inverse of pack_scale_min_k4.
RBEE_HOST_DEVICE inline void unpack_scale_min_k4(const uint8_t* s, int j, uint8_t& scale, uint8_t& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (uint8_t)((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    min = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Step (1) of Q4_K / Q5_K: a scale and min per sub-block of 32 (levels L[256] in [0, nmax]), with weights
// sqrt(mean(x^2)) + |x| that favour large elements.
RBEE_HOST_DEVICE inline void fit_k4_subblocks(const float* x, int nmax, float rmin, float rdelta, int nstep,
                                              float* scales, float* mins, uint8_t* L) {
  float w[32];
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av = sqrtf(sum_x2 / 32.f);
    for (int l = 0; l < 32; ++l) w[l] = av + fabsf(xs[l]);
    scales[j] = fit_scale_min(32, nmax, xs, w, L + 32 * j, &mins[j], rmin, rdelta, nstep, false);
  }
}

// Steps (2) and (3) of Q4_K / Q5_K: the 6-bit scales and mins of 8 sub-blocks of 32 (from step (1)'s fits
// `scales`, `mins`) against f16 super-scales d and dmin (returned as f16 bits), packed into packed_scales[12];
// then levels L[256] in [0, nmax] under the scales as they decode (a sub-block whose scale decodes to 0 keeps
// step (1)'s levels).
RBEE_HOST_DEVICE inline void finish_k4(const float* x, const float* scales, const float* mins, int nmax, uint16_t& d,
                                       uint16_t& dmin, uint8_t* packed_scales, uint8_t* L) {
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    max_scale = fmaxf(max_scale, scales[j]);
    max_min = fmaxf(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = (uint8_t)clamp_int(nearest_int(inv_scale * scales[j]), 0, 63);
    mn[j] = (uint8_t)clamp_int(nearest_int(inv_min * mins[j]), 0, 63);
  }
  pack_scale_min_k4(sc, mn, packed_scales);
  d = ::rbee::f32_to_f16_bits(max_scale / 63.f);
  dmin = ::rbee::f32_to_f16_bits(max_min / 63.f);
  const float df = ::rbee::f16_bits_to_f32(d), dminf = ::rbee::f16_bits_to_f32(dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    unpack_scale_min_k4(packed_scales, j, s, m);
    const float dl = df * (float)s;
    if (dl == 0.f) continue;
    const float ml = dminf * (float)m;
    for (int i = 32 * j; i < 32 * j + 32; ++i) L[i] = (uint8_t)clamp_int(nearest_int((x[i] + ml) / dl), 0, nmax);
  }
}

}  // namespace rbee::kquant
