// The scales of one K-quant super-block (Q2_K .. Q6_K) in the one form the CPU's K-quant dot products
// (dot_kquants.cpp, portable kernel) and its prompt GEMM panels (qgemm_avx512.cpp) compute with:
//   element e = d * sc[e / 16] * u[e] - dc * c[e / 16], u the unsigned level of e (0..63),
// so dot(w, x) over a super-block = d_x * (d * sum_e sc[e/16] u[e] q_x[e] - dc * sum_i c[i] bsums_x[i]). Per type:
//   Q2_K: sc = 4-bit scale, c = 4-bit min, dc = dmin     Q3_K: u = q + 4, sc = signed 6-bit scale, c = 4 sc, dc = d
//   Q4_K / Q5_K: sc, c = the 6-bit scale and min of the 32-group (each covers two entries), dc = dmin
//   Q6_K: u = q + 32, sc = signed 8-bit scale, c = 32 sc, dc = d
#pragma once

#include <cstdint>

#include "backends/cpu/quant/blocks.h"

namespace rbee::cpu::quant {

struct KScales {
  alignas(32) int16_t sc[16];
  alignas(32) int16_t c[16];
  float d, dc;
};

inline void k_scales(const BlockQ2_K& b, KScales& s) {
  for (int i = 0; i < 16; ++i) {
    s.sc[i] = (int16_t)(b.scales[i] & 0x0F);
    s.c[i] = (int16_t)(b.scales[i] >> 4);
  }
  s.d = f16_to_f32(b.d);
  s.dc = f16_to_f32(b.dmin);
}

inline void k_scales(const BlockQ3_K& b, KScales& s) {
  for (int i = 0; i < 16; ++i) {
    s.sc[i] = (int16_t)q3k_scale(b.scales, i);
    s.c[i] = (int16_t)(4 * s.sc[i]);
  }
  s.d = s.dc = f16_to_f32(b.d);
}

// Q4_K and Q5_K share the packed 6-bit scales and mins (kquant_pack.h).
template <class Block>
inline void k_scales_k4(const Block& b, KScales& s) {
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, mn;
    unpack_scale_min_k4(b.scales, j, sc, mn);
    s.sc[2 * j] = s.sc[2 * j + 1] = sc;
    s.c[2 * j] = s.c[2 * j + 1] = mn;
  }
  s.d = f16_to_f32(b.d);
  s.dc = f16_to_f32(b.dmin);
}
inline void k_scales(const BlockQ4_K& b, KScales& s) { k_scales_k4(b, s); }
inline void k_scales(const BlockQ5_K& b, KScales& s) { k_scales_k4(b, s); }

inline void k_scales(const BlockQ6_K& b, KScales& s) {
  for (int i = 0; i < 16; ++i) {
    s.sc[i] = b.scales[i];
    s.c[i] = (int16_t)(32 * b.scales[i]);
  }
  s.d = s.dc = f16_to_f32(b.d);
}

}  // namespace rbee::cpu::quant
