// Device ports of the K-quant quantizers (the CPU's quantize_k.cpp): per super-block, (1) fit a scale (and min)
// per sub-block with the scale searches that both backends share (backends/common/kquant_fit.h), (2) quantize the
// sub-block scales against an f16 super-scale, (3) re-quantize every element with the scale it will be decoded
// with, then pack. One thread runs one super-block; quantizing weights is not on any hot path.
//
// Every function writes one block of `ts` bytes at y (byte stores: block fields are only 2-byte aligned).
#pragma once

#include <cstdint>

#include "backends/common/kquant_fit.h"
#include "backends/common/kquant_pack.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/quant_math.cuh"

namespace rbee::gpu::quant {

// The scale searches and the packing are shared with the CPU (backends/common/kquant_fit.h, kquant_pack.h).
using ::rbee::kquant::finish_k4;
using ::rbee::kquant::fit_k4_subblocks;
using ::rbee::kquant::fit_scale_min;
using ::rbee::kquant::fit_symmetric_descent;
using ::rbee::kquant::fit_symmetric_grid;
using ::rbee::kquant::pack_2bit;

#if defined(__CUDACC__) || defined(__HIPCC__)

__device__ __forceinline__ void put_u16(uint8_t* p, uint16_t v) {
  p[0] = (uint8_t)(v & 0xFF);
  p[1] = (uint8_t)(v >> 8);
}
__device__ __forceinline__ void put_f16(uint8_t* p, float v) { put_u16(p, ::rbee::f32_to_f16_bits(v)); }

// Q2_K: scales[16] @0, qs[64] @16, d @80, dmin @82.
__device__ inline void quantize_block_q2_k(const float* x, uint8_t* y) {
  uint8_t L[256];
  float scales[16], mins[16], w[16];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) w[l] = fabsf(x[16 * j + l]);
    scales[j] = fit_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
    max_scale = fmaxf(max_scale, scales[j]);
    max_min = fmaxf(max_min, mins[j]);
  }
  uint8_t sc[16];
  for (int j = 0; j < 16; ++j) {
    const int s = max_scale > 0 ? clamp_int(nearest_int(15.f / max_scale * scales[j]), 0, 15) : 0;
    const int m = max_min > 0 ? clamp_int(nearest_int(15.f / max_min * mins[j]), 0, 15) : 0;
    sc[j] = (uint8_t)(s | (m << 4));
    y[j] = sc[j];
  }
  const uint16_t dh = ::rbee::f32_to_f16_bits(max_scale > 0 ? max_scale / 15.f : 0.f);
  const uint16_t mh = ::rbee::f32_to_f16_bits(max_min > 0 ? max_min / 15.f : 0.f);
  put_u16(y + 80, dh);
  put_u16(y + 82, mh);
  const float d = f16_to_float(dh), dmin = f16_to_float(mh);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * (float)(sc[j] & 0x0F);
    if (dl == 0.f) continue;
    const float ml = dmin * (float)(sc[j] >> 4);
    for (int l = 16 * j; l < 16 * j + 16; ++l) L[l] = (uint8_t)clamp_int(nearest_int((x[l] + ml) / dl), 0, 3);
  }
  pack_2bit(L, y + 16);
}

// Q3_K: hmask[32] @0, qs[64] @32, scales[12] @96, d @108.
__device__ inline void quantize_block_q3_k(const float* x, uint8_t* y) {
  int8_t L[256];
  float scales[16];
  float max_scale = 0, amax = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_symmetric_descent(16, 4, x + 16 * j, L + 16 * j);
    if (fabsf(scales[j]) > amax) {
      amax = fabsf(scales[j]);
      max_scale = scales[j];
    }
  }
  uint8_t* sc = y + 96;
  for (int i = 0; i < 12; ++i) sc[i] = 0;
  uint16_t dh = ::rbee::f32_to_f16_bits(0.f);
  if (max_scale != 0.f) {
    const float iscale = -32.f / max_scale;
    for (int j = 0; j < 16; ++j) {
      const int l = clamp_int(nearest_int(iscale * scales[j]), -32, 31) + 32;
      if (j < 8) sc[j] = (uint8_t)(l & 0x0F);
      else sc[j - 8] |= (uint8_t)((l & 0x0F) << 4);
      sc[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
    }
    dh = ::rbee::f32_to_f16_bits(1 / iscale);
  }
  put_u16(y + 108, dh);
  const float d = f16_to_float(dh);
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? (sc[j] & 0x0F) : (sc[j - 8] >> 4);
    const int high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
    const float dl = d * (float)((low | (high << 4)) - 32);
    if (dl == 0.f) continue;
    for (int l = 16 * j; l < 16 * j + 16; ++l) L[l] = (int8_t)(clamp_int(nearest_int(x[l] / dl), -4, 3) + 4);
  }
  uint8_t low[256];
  for (int i = 0; i < 32; ++i) y[i] = 0;
  for (int j = 0; j < 256; ++j) {
    int l = L[j];
    if (l > 3) {
      y[j % 32] |= (uint8_t)(1u << (j / 32));
      l -= 4;
    }
    low[j] = (uint8_t)l;
  }
  pack_2bit(low, y + 32);
}

// Q4_K (nmax 15) / Q5_K (nmax 31): d @0, dmin @2, scales[12] @4; levels L[256] in [0, nmax] on return.
__device__ inline void quantize_k4_common(const float* x, int nmax, float rmin, float rdelta, int nstep, uint8_t* y,
                                          uint8_t* L) {
  float scales[8], mins[8];
  fit_k4_subblocks(x, nmax, rmin, rdelta, nstep, scales, mins, L);
  uint16_t d, dmin;
  finish_k4(x, scales, mins, nmax, d, dmin, y + 4, L);
  put_u16(y, d);
  put_u16(y + 2, dmin);
}

// Q4_K: qs[128] @16.
__device__ inline void quantize_block_q4_k(const float* x, uint8_t* y) {
  uint8_t L[256];
  quantize_k4_common(x, 15, -1.f, 0.1f, 20, y, L);
  for (int p = 0; p < 4; ++p) {
    for (int l = 0; l < 32; ++l) y[16 + 32 * p + l] = (uint8_t)(L[64 * p + l] | (L[64 * p + 32 + l] << 4));
  }
}

// Q5_K: qh[32] @16, qs[128] @48.
__device__ inline void quantize_block_q5_k(const float* x, uint8_t* y) {
  uint8_t L[256];
  quantize_k4_common(x, 31, -0.5f, 0.1f, 15, y, L);
  uint8_t* qh = y + 16;
  for (int l = 0; l < 32; ++l) qh[l] = 0;
  for (int p = 0; p < 4; ++p) {
    for (int l = 0; l < 32; ++l) {
      const int a = L[64 * p + l], b = L[64 * p + 32 + l];
      y[48 + 32 * p + l] = (uint8_t)((a & 0x0F) | ((b & 0x0F) << 4));
      qh[l] |= (uint8_t)(((a >> 4) << (2 * p)) | ((b >> 4) << (2 * p + 1)));
    }
  }
}

// Q6_K: ql[128] @0, qh[64] @128, scales[16] @192 (int8), d @208.
__device__ inline void quantize_block_q6_k(const float* x, uint8_t* y) {
  int8_t L[256];
  float scales[16];
  float max_scale = 0, amax = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_symmetric_grid(16, 32, x + 16 * j, L + 16 * j);
    if (fabsf(scales[j]) > amax) {
      amax = fabsf(scales[j]);
      max_scale = scales[j];
    }
  }
  if (amax < 1e-15f) {
    for (int i = 0; i < 210; ++i) y[i] = 0;
    return;
  }
  const float iscale = -128.f / max_scale;
  const uint16_t dh = ::rbee::f32_to_f16_bits(1 / iscale);
  put_u16(y + 208, dh);
  int8_t sc[16];
  for (int j = 0; j < 16; ++j) {
    sc[j] = (int8_t)clamp_int(nearest_int(iscale * scales[j]), -128, 127);
    y[192 + j] = (uint8_t)sc[j];
  }
  const float d = f16_to_float(dh);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * (float)sc[j];
    if (dl == 0.f) continue;
    for (int l = 16 * j; l < 16 * j + 16; ++l) L[l] = (int8_t)(clamp_int(nearest_int(x[l] / dl), -32, 31) + 32);
  }
  for (int n = 0; n < 2; ++n) {
    const int8_t* e = L + 128 * n;
    uint8_t* ql = y + 64 * n;
    uint8_t* qh = y + 128 + 32 * n;
    for (int l = 0; l < 32; ++l) {
      ql[l] = (uint8_t)((e[l] & 0x0F) | ((e[l + 64] & 0x0F) << 4));
      ql[l + 32] = (uint8_t)((e[l + 32] & 0x0F) | ((e[l + 96] & 0x0F) << 4));
      qh[l] = (uint8_t)((e[l] >> 4) | ((e[l + 32] >> 4) << 2) | ((e[l + 64] >> 4) << 4) | ((e[l + 96] >> 4) << 6));
    }
  }
}

#endif  // device compilation

}  // namespace rbee::gpu::quant
