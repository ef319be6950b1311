// K-quant quantizers (Q2_K .. Q6_K) and the Q8_K activation format. Each super-block is quantized in three
// steps, as ggml's reference quantizers do: (1) fit a scale (and min) per sub-block with a search
// (backends/common/kquant_fit.h), (2) quantize those sub-block scales against one f16 super-scale, (3) re-quantize every
// element with the sub-block scale it will actually be decoded with, then pack the bits.
// Attribution: ggml / llama.cpp (https://github.com/ggml-org/ggml), MIT License, Copyright (c) 2023-2024 The ggml
// authors; NOTICE holds the license text.
#include <cmath>
#include <cstring>

#include "backends/cpu/quant/quantize_internal.h"

namespace rbee::cpu::quant {

namespace {
// Packs 2-bit levels L[0..256) as Q2_K / Q3_K store them: element 128n + 32j + l at bits 2j of qs[32n + l].
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int n = 0; n < 2; ++n) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* e = L + 128 * n + l;
      qs[32 * n + l] = (uint8_t)(e[0] | (e[32] << 2) | (e[64] << 4) | (e[96] << 6));
    }
  }
}

// Packs 6-bit scales and mins of 8 sub-blocks into Q4_K / Q5_K's 12 bytes (layout: unpack_scale_min_k4).
void pack_scale_min_k4(const uint8_t* sc, const uint8_t* mn, uint8_t* s) {
  std::memset(s, 0, kKScaleBytes);
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

// Steps (2) and (3) of Q4_K / Q5_K: 6-bit scales and mins of 8 sub-blocks of 32 against f16 d and dmin,
// then levels L in [0, nmax] under the decoded scales.
void finish_k4(const float* x, const float* scales, const float* mins, int nmax, uint16_t& d, uint16_t& dmin,
               uint8_t* packed_scales, uint8_t* L) {
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    max_scale = std::fmax(max_scale, scales[j]);
    max_min = std::fmax(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = (uint8_t)clamp_int(nearest_int(inv_scale * scales[j]), 0, 63);
    mn[j] = (uint8_t)clamp_int(nearest_int(inv_min * mins[j]), 0, 63);
  }
  pack_scale_min_k4(sc, mn, packed_scales);
  d = f32_to_f16(max_scale / 63.f);
  dmin = f32_to_f16(max_min / 63.f);
  const float df = f16_to_f32(d), dminf = f16_to_f32(dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    unpack_scale_min_k4(packed_scales, j, s, m);
    const float dl = df * (float)s;
    if (dl == 0.f) continue;  // keeps the levels of step (1)
    const float ml = dminf * (float)m;
    for (int i = 32 * j; i < 32 * j + 32; ++i) L[i] = (uint8_t)clamp_int(nearest_int((x[i] + ml) / dl), 0, nmax);
  }
}

// Step (1) of Q4_K / Q5_K: weights sqrt(mean(x^2)) + |x| favour large elements.
void fit_k4_subblocks(const float* x, int nmax, float rmin, float rdelta, int nstep, float* scales, float* mins,
                      uint8_t* L) {
  float w[32];
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av = std::sqrt(sum_x2 / 32.f);
    for (int l = 0; l < 32; ++l) w[l] = av + std::fabs(xs[l]);
    scales[j] = fit_scale_min(32, nmax, xs, w, L + 32 * j, &mins[j], rmin, rdelta, nstep, false);
  }
}
}  // namespace

void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    uint8_t L[kQKK];
    float scales[16], mins[16], w[16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) w[l] = std::fabs(x[16 * j + l]);
      scales[j] = fit_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
      max_scale = std::fmax(max_scale, scales[j]);
      max_min = std::fmax(max_min, mins[j]);
    }
    // 4-bit scales and mins against d = max_scale / 15 and dmin = max_min / 15.
    for (int j = 0; j < 16; ++j) {
      const int s = max_scale > 0 ? clamp_int(nearest_int(15.f / max_scale * scales[j]), 0, 15) : 0;
      const int m = max_min > 0 ? clamp_int(nearest_int(15.f / max_min * mins[j]), 0, 15) : 0;
      y[i].scales[j] = (uint8_t)(s | (m << 4));
    }
    y[i].d = f32_to_f16(max_scale > 0 ? max_scale / 15.f : 0.f);
    y[i].dmin = f32_to_f16(max_min > 0 ? max_min / 15.f : 0.f);
    const float d = f16_to_f32(y[i].d), dmin = f16_to_f32(y[i].dmin);
    for (int j = 0; j < 16; ++j) {
      const float dl = d * (float)(y[i].scales[j] & 0x0F);
      if (dl == 0.f) continue;
      const float ml = dmin * (float)(y[i].scales[j] >> 4);
      for (int l = 16 * j; l < 16 * j + 16; ++l) L[l] = (uint8_t)clamp_int(nearest_int((x[l] + ml) / dl), 0, 3);
    }
    pack_2bit(L, y[i].qs);
  }
}

void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    int8_t L[kQKK];
    float scales[16];
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_symmetric_descent(16, 4, x + 16 * j, L + 16 * j);
      if (std::fabs(scales[j]) > amax) {
        amax = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    // Signed 6-bit scales against d = max_scale / -32 (the largest one maps to -32).
    std::memset(y[i].scales, 0, 12);
    if (max_scale != 0.f) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < 16; ++j) {
        const int l = clamp_int(nearest_int(iscale * scales[j]), -32, 31) + 32;
        if (j < 8) y[i].scales[j] = (uint8_t)(l & 0x0F);
        else y[i].scales[j - 8] |= (uint8_t)((l & 0x0F) << 4);
        y[i].scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
      }
      y[i].d = f32_to_f16(1 / iscale);
    } else {
      y[i].d = f32_to_f16(0.f);
    }
    const float d = f16_to_f32(y[i].d);
    for (int j = 0; j < 16; ++j) {
      const float dl = d * (float)q3k_scale(y[i].scales, j);
      if (dl == 0.f) continue;
      for (int l = 16 * j; l < 16 * j + 16; ++l) L[l] = (int8_t)(clamp_int(nearest_int(x[l] / dl), -4, 3) + 4);
    }
    // Levels 4..7 set their bit in hmask (bit k of hmask[m] for element 32k + m) and keep the low 2 bits.
    uint8_t low[kQKK];
    std::memset(y[i].hmask, 0, sizeof(y[i].hmask));
    for (int j = 0; j < kQKK; ++j) {
      int l = L[j];
      if (l > 3) {
        y[i].hmask[j % 32] |= (uint8_t)(1u << (j / 32));
        l -= 4;
      }
      low[j] = (uint8_t)l;
    }
    pack_2bit(low, y[i].qs);
  }
}

void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    uint8_t L[kQKK];
    float scales[8], mins[8];
    fit_k4_subblocks(x, 15, -1.f, 0.1f, 20, scales, mins, L);
    finish_k4(x, scales, mins, 15, y[i].d, y[i].dmin, y[i].scales, L);
    for (int p = 0; p < 4; ++p) {
      for (int l = 0; l < 32; ++l) y[i].qs[32 * p + l] = (uint8_t)(L[64 * p + l] | (L[64 * p + 32 + l] << 4));
    }
  }
}

void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    uint8_t L[kQKK];
    float scales[8], mins[8];
    fit_k4_subblocks(x, 31, -0.5f, 0.1f, 15, scales, mins, L);
    finish_k4(x, scales, mins, 31, y[i].d, y[i].dmin, y[i].scales, L);
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    for (int p = 0; p < 4; ++p) {
      for (int l = 0; l < 32; ++l) {
        const int a = L[64 * p + l], b = L[64 * p + 32 + l];
        y[i].qs[32 * p + l] = (uint8_t)((a & 0x0F) | ((b & 0x0F) << 4));
        y[i].qh[l] |= (uint8_t)(((a >> 4) << (2 * p)) | ((b >> 4) << (2 * p + 1)));
      }
    }
  }
}

void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    int8_t L[kQKK];
    float scales[16];
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_symmetric_grid(16, 32, x + 16 * j, L + 16 * j);
      if (std::fabs(scales[j]) > amax) {
        amax = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    if (amax < 1e-15f) {
      std::memset(&y[i], 0, sizeof(BlockQ6_K));
      continue;
    }
    // int8 scales against d = max_scale / -128 (the largest one maps to -128).
    const float iscale = -128.f / max_scale;
    y[i].d = f32_to_f16(1 / iscale);
    for (int j = 0; j < 16; ++j) y[i].scales[j] = (int8_t)clamp_int(nearest_int(iscale * scales[j]), -128, 127);
    const float d = f16_to_f32(y[i].d);
    for (int j = 0; j < 16; ++j) {
      const float dl = d * (float)y[i].scales[j];
      if (dl == 0.f) continue;
      for (int l = 16 * j; l < 16 * j + 16; ++l) L[l] = (int8_t)(clamp_int(nearest_int(x[l] / dl), -32, 31) + 32);
    }
    for (int n = 0; n < 2; ++n) {
      const int8_t* e = L + 128 * n;
      uint8_t* ql = y[i].ql + 64 * n;
      uint8_t* qh = y[i].qh + 32 * n;
      for (int l = 0; l < 32; ++l) {
        ql[l] = (uint8_t)((e[l] & 0x0F) | ((e[l + 64] & 0x0F) << 4));
        ql[l + 32] = (uint8_t)((e[l + 32] & 0x0F) | ((e[l + 96] & 0x0F) << 4));
        qh[l] = (uint8_t)((e[l] >> 4) | ((e[l + 32] >> 4) << 2) | ((e[l + 64] >> 4) << 4) | ((e[l + 96] >> 4) << 6));
      }
    }
  }
}

void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float amax = 0, max = 0;
    for (int j = 0; j < kQKK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax == 0.f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    // The largest magnitude maps to -127 * sign, so every quant is in [-127, 127].
    const float iscale = -127.f / max;
    for (int j = 0; j < kQKK; ++j) y[i].qs[j] = (int8_t)clamp_int(nearest_int(iscale * x[j]), -127, 127);
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * g + l];
      y[i].bsums[g] = (int16_t)sum;
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace rbee::cpu::quant
