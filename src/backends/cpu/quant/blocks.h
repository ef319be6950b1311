// GGUF/ggml block layouts, byte for byte as ggml stores them in model files (ggml-common.h).
//
// Every block type packs `kBlock` consecutive elements of one row. Legacy types use 32-element blocks with one
// f16 scale (and a min for the _1 types); K-quants use 256-element super-blocks split into 16 or 32 sub-blocks
// whose scales are themselves quantized against an f16 super-scale. Q8_1 and Q8_K are activation formats:
// Q8_1 also stores d * sum(qs), Q8_K stores sums of each 16 quants, so dot products can fold in a weight
// type's min or offset term without touching the activations again.
//
// Scales are raw f16 bits (uint16_t): the structs are plain bytes with alignment 2 (4 for Q8_K's float), the
// same as ggml's, so arrays of them map a GGUF tensor's bytes directly.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/common/kquant_pack.h"
#include "rbee/core/half.h"

namespace rbee::cpu::quant {

inline constexpr int kQK = 32;    // elements per legacy block
inline constexpr int kQKK = 256;  // elements per K-quant super-block
inline constexpr int kKScaleBytes = kquant::kScaleMinBytes;  // packed 6-bit scales and mins of Q4_K / Q5_K

inline float f16_to_f32(uint16_t h) { return f16_bits_to_f32(h); }
inline uint16_t f32_to_f16(float f) { return f32_to_f16_bits(f); }

// x = d * (q - 8); element j < 16 is the low nibble of qs[j], element j + 16 its high nibble.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
// x = d * q + m; nibbles as Q4_0.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};
// x = d * (q - 16); q = nibble (as Q4_0) | bit j of little-endian qh << 4.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// x = d * q + m; q as Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// x = d * qs[j].
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
// x = d * qs[j]; s = d * sum(qs) (f16).
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK];
};

// 16 sub-blocks of 16. scales[i]: low nibble scale, high nibble min of sub-block i.
// Element 128n + 32j + l (n < 2, j < 4, l < 32) is bits 2j..2j+1 of qs[32n + l], sub-block 8n + 2j + l/16.
// x = d * scale * q - dmin * min.
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d;
  uint16_t dmin;
};
// 16 sub-blocks of 16 with signed 6-bit scales (stored + 32): low 4 bits of scale i in nibble i/8 of
// scales[i % 8], high 2 bits at bit 2(i/4) of scales[8 + i % 4]. Element 128n + 32j + l: low 2 bits as Q2_K,
// bit (4n + j) of hmask[l] set means q in 0..3, clear means q - 4. x = d * (scale - 32) * q.
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;
};
// 8 sub-blocks of 32 with 6-bit scale and min (see unpack_scale_min_k4). Element 64p + l (l < 32) is the low
// nibble of qs[32p + l] (sub-block 2p), element 64p + 32 + l its high nibble (sub-block 2p + 1).
// x = d * scale * q - dmin * min.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQKK / 2];
};
// As Q4_K plus a fifth bit: bit 2p of qh[l] for element 64p + l, bit 2p + 1 for element 64p + 32 + l.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
// 16 sub-blocks of 16 with int8 scales. In half n (128 elements) with ql' = ql + 64n, qh' = qh + 32n:
// element 128n + 32g + l (g < 4, l < 32) has low 4 bits from ql'[l + 32(g & 1)] (low nibble for g < 2, high
// for g >= 2) and high 2 bits at bit 2g of qh'[l]; sub-block 8n + 2g + l/16. x = d * scale * (q - 32).
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
// x = d * qs[j]; bsums[i] = sum of qs[16i .. 16i + 15].
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};

static_assert(sizeof(BlockQ4_0) == 18 && alignof(BlockQ4_0) == 2);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

// Sub-block j (< 8) of the 12 packed scale and min bytes of Q4_K / Q5_K (layout: backends/common/kquant_pack.h).
using kquant::unpack_scale_min_k4;

// Signed scale i (< 16) of Q3_K, in -32..31.
inline int q3k_scale(const uint8_t* s, int i) {
  const int low = i < 8 ? (s[i] & 0x0F) : (s[i - 8] >> 4);
  const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
  return (low | (high << 4)) - 32;
}

}  // namespace rbee::cpu::quant
