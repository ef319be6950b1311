// Dequantization of every block type. Each value is computed with the same float operations in the same order
// as ggml's dequantize_row_* (and gguf-py), so results are bit-identical to theirs.
#include <cstring>

#include "backends/cpu/quant/blocks.h"
#include "backends/cpu/quant/quant.h"
#include "rbee/core/error.h"

namespace rbee::cpu::quant {

namespace {

void dequant_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * (float)((b[i].qs[j] & 0x0F) - 8);
      y[j + kQK / 2] = d * (float)((b[i].qs[j] >> 4) - 8);
    }
  }
}

void dequant_q4_1(const BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      const float lo = d * (float)(b[i].qs[j] & 0x0F);
      const float hi = d * (float)(b[i].qs[j] >> 4);
      y[j] = lo + m;
      y[j + kQK / 2] = hi + m;
    }
  }
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void dequant_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(b[i].d);
    const uint32_t qh = load_u32(b[i].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (b[i].qs[j] & 0x0F) | (int)(((qh >> j) & 1u) << 4);
      const int hi = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
      y[j] = d * (float)(lo - 16);
      y[j + kQK / 2] = d * (float)(hi - 16);
    }
  }
}

void dequant_q5_1(const BlockQ5_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
    const uint32_t qh = load_u32(b[i].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (b[i].qs[j] & 0x0F) | (int)(((qh >> j) & 1u) << 4);
      const int hi = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
      const float a = d * (float)lo, c = d * (float)hi;
      y[j] = a + m;
      y[j + kQK / 2] = c + m;
    }
  }
}

void dequant_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = d * (float)b[i].qs[j];
  }
}

void dequant_q8_1(const BlockQ8_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = d * (float)b[i].qs[j];
  }
}

void dequant_q2_k(const BlockQ2_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
    for (int n = 0; n < 2; ++n) {
      const uint8_t* q = b[i].qs + 32 * n;
      for (int j = 0; j < 4; ++j) {
        for (int half = 0; half < 2; ++half) {
          const uint8_t sc = b[i].scales[8 * n + 2 * j + half];
          const float dl = d * (float)(sc & 0x0F), ml = dmin * (float)(sc >> 4);
          for (int l = 0; l < 16; ++l) {
            const float v = dl * (float)((q[16 * half + l] >> (2 * j)) & 3);
            *y++ = v - ml;
          }
        }
      }
    }
  }
}

void dequant_q3_k(const BlockQ3_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d);
    for (int n = 0; n < 2; ++n) {
      const uint8_t* q = b[i].qs + 32 * n;
      for (int j = 0; j < 4; ++j) {
        const int bit = 4 * n + j;
        for (int half = 0; half < 2; ++half) {
          const float dl = d * (float)q3k_scale(b[i].scales, 8 * n + 2 * j + half);
          for (int l = 16 * half; l < 16 * half + 16; ++l) {
            const int low = (q[l] >> (2 * j)) & 3;
            const int v = low - (((b[i].hmask[l] >> bit) & 1) ? 0 : 4);
            *y++ = dl * (float)v;
          }
        }
      }
    }
  }
}

void dequant_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
    for (int p = 0; p < 4; ++p) {
      const uint8_t* q = b[i].qs + 32 * p;
      for (int half = 0; half < 2; ++half) {
        uint8_t sc, m;
        unpack_scale_min_k4(b[i].scales, 2 * p + half, sc, m);
        const float dl = d * (float)sc, ml = dmin * (float)m;
        for (int l = 0; l < 32; ++l) {
          const float v = dl * (float)(half ? q[l] >> 4 : q[l] & 0x0F);
          *y++ = v - ml;
        }
      }
    }
  }
}

void dequant_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
    for (int p = 0; p < 4; ++p) {
      const uint8_t* q = b[i].qs + 32 * p;
      for (int half = 0; half < 2; ++half) {
        uint8_t sc, m;
        unpack_scale_min_k4(b[i].scales, 2 * p + half, sc, m);
        const float dl = d * (float)sc, ml = dmin * (float)m;
        const int bit = 2 * p + half;
        for (int l = 0; l < 32; ++l) {
          const int low = half ? q[l] >> 4 : q[l] & 0x0F;
          const float v = dl * (float)(low | (((b[i].qh[l] >> bit) & 1) << 4));
          *y++ = v - ml;
        }
      }
    }
  }
}

void dequant_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d);
    for (int n = 0; n < 2; ++n) {
      const uint8_t* ql = b[i].ql + 64 * n;
      const uint8_t* qh = b[i].qh + 32 * n;
      for (int g = 0; g < 4; ++g) {
        for (int l = 0; l < 32; ++l) {
          const uint8_t lbyte = ql[l + 32 * (g & 1)];
          const int low = g < 2 ? lbyte & 0x0F : lbyte >> 4;
          const int q = (low | (((qh[l] >> (2 * g)) & 3) << 4)) - 32;
          const float dl = d * (float)b[i].scales[8 * n + 2 * g + l / 16];
          *y++ = dl * (float)q;
        }
      }
    }
  }
}

void dequant_q8_k(const BlockQ8_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQKK) {
    for (int j = 0; j < kQKK; ++j) y[j] = b[i].d * (float)b[i].qs[j];
  }
}

}  // namespace

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const int64_t nb = n / dtype_block_size(type);
  switch (type) {
    case DType::Q4_0: return dequant_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb);
    case DType::Q4_1: return dequant_q4_1(static_cast<const BlockQ4_1*>(src), dst, nb);
    case DType::Q5_0: return dequant_q5_0(static_cast<const BlockQ5_0*>(src), dst, nb);
    case DType::Q5_1: return dequant_q5_1(static_cast<const BlockQ5_1*>(src), dst, nb);
    case DType::Q8_0: return dequant_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb);
    case DType::Q8_1: return dequant_q8_1(static_cast<const BlockQ8_1*>(src), dst, nb);
    case DType::Q2_K: return dequant_q2_k(static_cast<const BlockQ2_K*>(src), dst, nb);
    case DType::Q3_K: return dequant_q3_k(static_cast<const BlockQ3_K*>(src), dst, nb);
    case DType::Q4_K: return dequant_q4_k(static_cast<const BlockQ4_K*>(src), dst, nb);
    case DType::Q5_K: return dequant_q5_k(static_cast<const BlockQ5_K*>(src), dst, nb);
    case DType::Q6_K: return dequant_q6_k(static_cast<const BlockQ6_K*>(src), dst, nb);
    case DType::Q8_K: return dequant_q8_k(static_cast<const BlockQ8_K*>(src), dst, nb);
    default: RBEE_THROW(ErrorCode::Unsupported, "dequantize: {} is not a block type", dtype_name(type));
  }
}

}  // namespace rbee::cpu::quant
