// K-quant quantizers (Q2_K .. Q6_K) and the Q8_K activation format. Each super-block is quantized in three
// steps, as ggml's reference quantizers do: (1) fit a scale (and min) per sub-block with a search
// (backends/common/kquant_fit.h), (2) quantize those sub-block scales against one f16 super-scale, (3) re-quantize every
// element with the sub-block scale it will actually be decoded with, then pack the bits.
// Attribution: ggml / llama.cpp (https://github.com/ggml-org/ggml), MIT License, Copyright (c) 2023-2024 The ggml
// authors; NOTICE holds the license text.
#include <cmath>
#include <cstring>

#include "backends/common/kquant_pack.h"
#include "backends/cpu/quant/quantize_internal.h"

namespace rbee::cpu::quant {

// Packing and the Q4_K / Q5_K sub-block scales are shared with the GPU kernels (backends/common/kquant_pack.h).
using kquant::finish_k4;
using kquant::fit_k4_subblocks;
using kquant::pack_2bit;

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
  if (!quantize_q8_k_simd(x, y, nb)) quantize_q8_k_reference(x, y, nb);
}

void quantize_q8_k_reference(const float* x, BlockQ8_K* y, int64_t nb) {
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
