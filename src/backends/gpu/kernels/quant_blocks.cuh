// GGUF block layouts on the GPU: one decoder per block type that turns 32 elements of a packed block (an
// "item") into int8 levels and per-half float factors. Dequantization, the quantized matvec and the int8
// tensor-core qmatmul (MMQ) all decode through decode_item, so the bit layouts live in one place (the CPU's are in
// backends/cpu/quant/blocks.h, byte offsets below follow them).
//
// An item is 32 elements in two halves of 16 consecutive elements each (at element offsets e[0] and e[1] of
// the block). Element i of half h has level q (signed byte i % 4 of q[4h + i / 4]) and value
//   a[h] * q + b[h]     (b is the min term; zero, and not added, for types without mins)
// computed as one rounded multiply and one rounded add: exactly the CPU's (and gguf-py's) float operations,
// so dequantization is bit-exact. Offsets of the symmetric types (q - 8, q - 16, q - 4, q - 32) are applied
// to the levels here, so they stay signed bytes for the 4-way int8 dot products.
//
// Items of a block: legacy types (32 elements) have one; K-quants and Q8_K (256) have eight.
//
// For the 256-element types the decoder also returns the factors in integer form (what the int8 tensor-core
// qmatmul multiplies in integers): a[h] = d * sc[h] and b[h] = -(dmin * mn[h]) with integer sub-block scale sc
// and min mn, and the super-block's d and dmin (Q8_K: sc = 1, no min).
#pragma once

#include <cstdint>
#include <cstring>

#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/platform.h"

namespace rbee::gpu::quant {

template <DType T> struct BlockTraits;
// kQK elements per block, kTS bytes per block, kItems items of 32 per block, kHasMin: b is non-zero.
template <> struct BlockTraits<DType::Q4_0> { static constexpr int kQK = 32, kTS = 18, kItems = 1; static constexpr bool kHasMin = false; };
template <> struct BlockTraits<DType::Q4_1> { static constexpr int kQK = 32, kTS = 20, kItems = 1; static constexpr bool kHasMin = true; };
template <> struct BlockTraits<DType::Q5_0> { static constexpr int kQK = 32, kTS = 22, kItems = 1; static constexpr bool kHasMin = false; };
template <> struct BlockTraits<DType::Q5_1> { static constexpr int kQK = 32, kTS = 24, kItems = 1; static constexpr bool kHasMin = true; };
template <> struct BlockTraits<DType::Q8_0> { static constexpr int kQK = 32, kTS = 34, kItems = 1; static constexpr bool kHasMin = false; };
template <> struct BlockTraits<DType::Q8_1> { static constexpr int kQK = 32, kTS = 36, kItems = 1; static constexpr bool kHasMin = false; };
template <> struct BlockTraits<DType::Q2_K> { static constexpr int kQK = 256, kTS = 84, kItems = 8; static constexpr bool kHasMin = true; };
template <> struct BlockTraits<DType::Q3_K> { static constexpr int kQK = 256, kTS = 110, kItems = 8; static constexpr bool kHasMin = false; };
template <> struct BlockTraits<DType::Q4_K> { static constexpr int kQK = 256, kTS = 144, kItems = 8; static constexpr bool kHasMin = true; };
template <> struct BlockTraits<DType::Q5_K> { static constexpr int kQK = 256, kTS = 176, kItems = 8; static constexpr bool kHasMin = true; };
template <> struct BlockTraits<DType::Q6_K> { static constexpr int kQK = 256, kTS = 210, kItems = 8; static constexpr bool kHasMin = false; };
template <> struct BlockTraits<DType::Q8_K> { static constexpr int kQK = 256, kTS = 292, kItems = 8; static constexpr bool kHasMin = false; };

// Calls f(std::integral_constant<DType, T>{}) for a block dtype; throws Unsupported for others.
template <class F> void visit_block_type(DType t, F&& f) {
  switch (t) {
    case DType::Q4_0: return f(std::integral_constant<DType, DType::Q4_0>{});
    case DType::Q4_1: return f(std::integral_constant<DType, DType::Q4_1>{});
    case DType::Q5_0: return f(std::integral_constant<DType, DType::Q5_0>{});
    case DType::Q5_1: return f(std::integral_constant<DType, DType::Q5_1>{});
    case DType::Q8_0: return f(std::integral_constant<DType, DType::Q8_0>{});
    case DType::Q8_1: return f(std::integral_constant<DType, DType::Q8_1>{});
    case DType::Q2_K: return f(std::integral_constant<DType, DType::Q2_K>{});
    case DType::Q3_K: return f(std::integral_constant<DType, DType::Q3_K>{});
    case DType::Q4_K: return f(std::integral_constant<DType, DType::Q4_K>{});
    case DType::Q5_K: return f(std::integral_constant<DType, DType::Q5_K>{});
    case DType::Q6_K: return f(std::integral_constant<DType, DType::Q6_K>{});
    case DType::Q8_K: return f(std::integral_constant<DType, DType::Q8_K>{});
    default: RBEE_THROW(ErrorCode::Unsupported, "gpu: {} is not a block type", dtype_name(t));
  }
}

#if defined(__CUDACC__) || defined(__HIPCC__)

struct Item {
  uint32_t q[8];  // int8x4 levels: q[0..3] elements e[0] .. e[0]+15, q[4..7] elements e[1] .. e[1]+15
  float a[2];     // per-half scale
  float b[2];     // per-half min term (0 for types without mins)
  int e[2];       // element offset of each half from the block start
  // 256-element types only: a[h] = d * sc[h], b[h] = -(dmin * mn[h]) (mn and dmin 0 for types without mins).
  int sc[2], mn[2];
  float d, dmin;
};

// 16 bytes as four little-endian words.
struct Bytes16 {
  uint32_t w[4];
};

// Loads at 2-byte-aligned addresses (every block field is, since every block size is even).
__device__ __forceinline__ uint32_t ld_u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
__device__ __forceinline__ uint32_t ld_u32(const uint8_t* p) { return ld_u16(p) | (ld_u16(p + 2) << 16); }
__device__ __forceinline__ float ld_f16(const uint8_t* p) { return f16_to_float((uint16_t)ld_u16(p)); }

// 16 bytes at any address, from the aligned 16-byte segments covering them and funnel shifts. Blocks of 18, 22,
// 34... bytes make a warp's loads scattered 2-byte-aligned pieces; aligned 16-byte loads keep each warp
// instruction on few cache lines. Branch-free, so the loads of consecutive calls issue back to back: the second
// load reads the next segment when p is not 16-byte aligned and the first one again when it is, so nothing is
// read from a segment that holds none of the requested bytes (no access past the end of an allocation).
// Split in two so that a kernel can issue the loads early and shift later (MMQ prefetches a step ahead):
// ld_16B_raw issues the loads, bytes16 shifts; ld_16B does both.
struct Raw16 {
  uint4 v0, v1;  // the aligned segments (v1 unused when p is aligned: bytes16 then takes v0 alone)
  int shift;     // p % 16
};
__device__ __forceinline__ Raw16 ld_16B_raw(const uint8_t* p) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  const uint4* base = reinterpret_cast<const uint4*>(addr & ~uintptr_t(15));
  Raw16 r;
  r.shift = (int)(addr & 15);
  r.v0 = base[0];
  r.v1 = base[r.shift != 0 ? 1 : 0];
  return r;
}
// 16 bytes at a 16-byte aligned address: one load (shift 0 known at compile time, so bytes16 is free).
__device__ __forceinline__ Raw16 ld_16B_raw_aligned(const uint8_t* p) {
  Raw16 r;
  r.v0 = *reinterpret_cast<const uint4*>(p);
  r.v1 = make_uint4(0, 0, 0, 0);
  r.shift = 0;
  return r;
}
__device__ __forceinline__ Bytes16 bytes16(const Raw16& raw) {
  const int shift = raw.shift;
  uint32_t w[8] = {raw.v0.x, raw.v0.y, raw.v0.z, raw.v0.w, raw.v1.x, raw.v1.y, raw.v1.z, raw.v1.w};
  // Word shift by (shift / 4) in two constant-index steps (no dynamic register indexing), then byte shift.
  if (shift & 8) {
#pragma unroll
    for (int i = 0; i < 6; ++i) w[i] = w[i + 2];
  }
  if (shift & 4) {
#pragma unroll
    for (int i = 0; i < 5; ++i) w[i] = w[i + 1];
  }
  const int bits = (shift & 3) * 8;
  Bytes16 r;
#pragma unroll
  for (int i = 0; i < 4; ++i) r.w[i] = (uint32_t)((((uint64_t)w[i + 1] << 32) | w[i]) >> bits);
  return r;
}
__device__ __forceinline__ Bytes16 ld_16B(const uint8_t* p) { return bytes16(ld_16B_raw(p)); }

// Per-byte x - c for bytes x in [0, 127] and c <= 128 (two's complement result in each byte, no borrows).
__device__ __forceinline__ uint32_t sub_bytes(uint32_t x, uint32_t c) {
  return ((x | 0x80808080u) - c * 0x01010101u) ^ 0x80808080u;
}
// Bits 0..3 of h to bit 4 of bytes 0..3.
__device__ __forceinline__ uint32_t spread4_to_bit4(uint32_t h) {
  return ((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25);
}

// Byte b (< 16, run-time) of 16 loaded bytes, by selects (a run-time index into a register array would
// spill it to local memory).
__device__ __forceinline__ int byte_at(const Bytes16& v, int b) {
  const int w = b >> 2;
  const uint32_t word = w == 0 ? v.w[0] : w == 1 ? v.w[1] : w == 2 ? v.w[2] : v.w[3];
  return (int)((word >> (8 * (b & 3))) & 0xFFu);
}

// Scales and mins 2p and 2p + 1 (p < 4) of Q4_K / Q5_K, whose 12 packed bytes are bytes 4..15 of the block
// header `hdr` (the CPU's unpack_scale_min_k4 for j = 2p, 2p + 1). All eight 6-bit scales and mins are unpacked
// with word operations (scales j < 4: low 6 bits of bytes 4..7; mins j < 4: of bytes 8..11; j >= 4: the low /
// high nibbles of bytes 12..15 with the top 2 bits of bytes 4..7 / 8..11 above them), then two bytes selected.
__device__ __forceinline__ void scale_min_k4_pair(const Bytes16& hdr, int p, int (&sc)[2], int (&mn)[2]) {
  const uint32_t a = hdr.w[1], b = hdr.w[2], c = hdr.w[3];
  const uint32_t sc_w = p < 2 ? (a & 0x3F3F3F3Fu) : ((c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u));
  const uint32_t mn_w = p < 2 ? (b & 0x3F3F3F3Fu) : (((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u));
  const int shift = 16 * (p & 1);
  sc[0] = (int)((sc_w >> shift) & 0xFFu);
  sc[1] = (int)((sc_w >> (shift + 8)) & 0xFFu);
  mn[0] = (int)((mn_w >> shift) & 0xFFu);
  mn[1] = (int)((mn_w >> (shift + 8)) & 0xFFu);
}
// Signed 6-bit scale i (< 16) of Q3_K, in -32..31; its 12 scale bytes start at byte `at` of `v`.
__device__ __forceinline__ int q3k_scale(const Bytes16& v, int at, int i) {
  const int low = i < 8 ? (byte_at(v, at + i) & 0x0F) : (byte_at(v, at + i - 8) >> 4);
  const int high = (byte_at(v, at + 8 + i % 4) >> (2 * (i / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// Low / high nibbles of 16 bytes as levels of two halves.
__device__ __forceinline__ void split_nibbles(const Bytes16& v, Item& o) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    o.q[i] = v.w[i] & 0x0F0F0F0Fu;
    o.q[4 + i] = (v.w[i] >> 4) & 0x0F0F0F0Fu;
  }
}

// What decoding an item reads from its block, as loaded: load_item issues the loads, decode_raw turns them
// into the item (decode_item does both). A kernel can hold a RawItem in registers while other work runs and
// decode it later (MMQ prefetches the next K step's weights this way). `it` must be the same for both.
template <DType T>
struct RawItem {
  uint32_t h0 = 0, h1 = 0;  // 2- or 4-byte header fields (f16 scales, Q5 high bits, Q8_K's f32 scale, Q6_K's
                            // two int8 scales)
  Raw16 v[3];               // up to three 16-byte pieces (levels, high bits, K-quant scale headers)
};

// Issues the loads of item `it` (< kItems) of the block at `blk`. kAligned16: the caller guarantees that blk is
// 16-byte aligned; Q4_K and Q5_K (144- and 176-byte blocks, every 16-byte field at a multiple of 16) then load
// their fields with single aligned loads. Other types ignore it.
template <DType T, bool kAligned16 = false>
__device__ __forceinline__ void load_item(const uint8_t* blk, int it, RawItem<T>& r) {
  if constexpr (T == DType::Q4_0 || T == DType::Q4_1) {
    constexpr int qs = T == DType::Q4_0 ? 2 : 4;
    r.h0 = ld_u16(blk);
    if constexpr (T == DType::Q4_1) r.h1 = ld_u16(blk + 2);
    r.v[0] = ld_16B_raw(blk + qs);
  } else if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {
    constexpr int qh_at = T == DType::Q5_0 ? 2 : 4;
    r.h0 = T == DType::Q5_0 ? ld_u16(blk) : ld_u32(blk);  // d (and m in the high half for Q5_1)
    r.h1 = ld_u32(blk + qh_at);                            // qh
    r.v[0] = ld_16B_raw(blk + qh_at + 4);
  } else if constexpr (T == DType::Q8_0 || T == DType::Q8_1) {
    constexpr int qs = T == DType::Q8_0 ? 2 : 4;
    r.h0 = ld_u16(blk);
    r.v[0] = ld_16B_raw(blk + qs);
    r.v[1] = ld_16B_raw(blk + qs + 16);
  } else if constexpr (T == DType::Q2_K || T == DType::Q3_K) {
    const int n = it >> 2, h = (it >> 1) & 1;
    constexpr int qs_at = T == DType::Q2_K ? 16 : 32;
    r.v[0] = ld_16B_raw(blk + qs_at + 32 * n + 16 * h);
    if constexpr (T == DType::Q2_K) {
      r.v[1] = ld_16B_raw(blk);  // the 16 scale bytes
      r.h0 = ld_u32(blk + 80);   // d, dmin
    } else {
      r.v[1] = ld_16B_raw(blk + 16 * h);  // hmask
      r.v[2] = ld_16B_raw(blk + 94);      // bytes 94..109: 2 bytes of qs, scales[12] at 2, d at 14
    }
  } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    const int p = it >> 1, h = it & 1;
    constexpr int qs_at = T == DType::Q4_K ? 16 : 48;
    auto ld = [](const uint8_t* q) { return kAligned16 ? ld_16B_raw_aligned(q) : ld_16B_raw(q); };
    r.v[0] = ld(blk);  // d, dmin, scales[12]
    r.v[1] = ld(blk + qs_at + 32 * p + 16 * h);
    if constexpr (T == DType::Q5_K) r.v[2] = ld(blk + 16 + 16 * h);
  } else if constexpr (T == DType::Q6_K) {
    const int n = it >> 2, s = (it >> 1) & 1, lh = it & 1;
    r.v[0] = ld_16B_raw(blk + 64 * n + 32 * s + 16 * lh);
    r.v[1] = ld_16B_raw(blk + 128 + 32 * n + 16 * lh);
    // The two int8 scales of the item (sub-blocks 8n + 2g + lh, g = s and s + 2), one byte each, instead of the
    // 16 scale bytes: h1 = scale(g = s) | scale(g = s + 2) << 8.
    const uint8_t* sc = blk + 192 + 8 * n + 2 * s + lh;
    r.h1 = (uint32_t)sc[0] | ((uint32_t)sc[4] << 8);
    r.h0 = ld_u16(blk + 208);
  } else {
    static_assert(T == DType::Q8_K, "load_item: unhandled block type");
    r.h0 = ld_u32(blk);
    r.v[0] = ld_16B_raw(blk + 4 + 32 * it);
    r.v[1] = ld_16B_raw(blk + 4 + 32 * it + 16);
  }
}

// Decodes item `it` from what load_item(blk, it, r) read.
template <DType T>
__device__ __forceinline__ void decode_raw(const RawItem<T>& r, int it, Item& o) {
  o.b[0] = o.b[1] = 0.f;
  if constexpr (T == DType::Q4_0 || T == DType::Q4_1) {
    // Q4_0: d, qs[16]   Q4_1: d, m, qs[16]; element j < 16 low nibble of qs[j], j + 16 its high nibble.
    const float d = f16_to_float((uint16_t)r.h0);
    split_nibbles(bytes16(r.v[0]), o);
    if constexpr (T == DType::Q4_0) {
#pragma unroll
      for (int i = 0; i < 8; ++i) o.q[i] = sub_bytes(o.q[i], 8);
    } else {
      o.b[0] = o.b[1] = f16_to_float((uint16_t)r.h1);
    }
    o.a[0] = o.a[1] = d;
    o.e[0] = 0;
    o.e[1] = 16;
  } else if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {
    // Q5_0: d, qh[4], qs[16]   Q5_1: d, m, qh[4], qs[16]; bit j of qh is bit 4 of element j.
    const float d = f16_to_float((uint16_t)(r.h0 & 0xFFFFu));
    const uint32_t qh = r.h1;
    split_nibbles(bytes16(r.v[0]), o);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      o.q[i] |= spread4_to_bit4(qh >> (4 * i));
      o.q[4 + i] |= spread4_to_bit4(qh >> (16 + 4 * i));
    }
    if constexpr (T == DType::Q5_0) {
#pragma unroll
      for (int i = 0; i < 8; ++i) o.q[i] = sub_bytes(o.q[i], 16);
    } else {
      o.b[0] = o.b[1] = f16_to_float((uint16_t)(r.h0 >> 16));
    }
    o.a[0] = o.a[1] = d;
    o.e[0] = 0;
    o.e[1] = 16;
  } else if constexpr (T == DType::Q8_0 || T == DType::Q8_1) {
    // Q8_0: d, qs[32]   Q8_1: d, s, qs[32] (s is not part of the value).
    const Bytes16 lo = bytes16(r.v[0]), hi = bytes16(r.v[1]);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      o.q[i] = lo.w[i];
      o.q[4 + i] = hi.w[i];
    }
    o.a[0] = o.a[1] = f16_to_float((uint16_t)r.h0);
    o.e[0] = 0;
    o.e[1] = 16;
  } else if constexpr (T == DType::Q2_K || T == DType::Q3_K) {
    // Item (n, h, jp): qs bytes [32n + 16h, +16) hold element 128n + 32j + 16h + l (l < 16) at bits 2j of byte l;
    // the halves are j = 2jp and 2jp + 1, sub-blocks 8n + 2j + h.
    // Q2_K: scales[16] (4-bit scale | 4-bit min << 4), qs[64], d, dmin.   Q3_K: hmask[32], qs[64], scales[12], d.
    const int n = it >> 2, h = (it >> 1) & 1, jp = it & 1;
    const Bytes16 v = bytes16(r.v[0]);
    Bytes16 hm, hdr;
    float d, dmin = 0.f;
    if constexpr (T == DType::Q2_K) {
      hdr = bytes16(r.v[1]);
      d = f16_to_float((uint16_t)(r.h0 & 0xFFFFu));
      dmin = f16_to_float((uint16_t)(r.h0 >> 16));
    } else {
      hm = bytes16(r.v[1]);  // hmask[l] bit 4n + j: level q (set) or q - 4 (clear)
      hdr = bytes16(r.v[2]);
      d = f16_to_float((uint16_t)(hdr.w[3] >> 16));
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int j = 2 * jp + half, sub = 8 * n + 2 * j + h;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint32_t q = (v.w[i] >> (2 * j)) & 0x03030303u;
        if constexpr (T == DType::Q3_K) q = sub_bytes(q | (((hm.w[i] >> (4 * n + j)) & 0x01010101u) << 2), 4);
        o.q[4 * half + i] = q;
      }
      if constexpr (T == DType::Q2_K) {
        const int sc = byte_at(hdr, sub);
        o.sc[half] = sc & 0x0F;
        o.mn[half] = sc >> 4;
        o.a[half] = mul_rn(d, (float)o.sc[half]);
        o.b[half] = -mul_rn(dmin, (float)o.mn[half]);
      } else {
        o.sc[half] = q3k_scale(hdr, 2, sub);
        o.mn[half] = 0;
        o.a[half] = mul_rn(d, (float)o.sc[half]);
      }
      o.e[half] = 128 * n + 32 * j + 16 * h;
    }
    o.d = d;
    o.dmin = dmin;
  } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    // Item (p, h): qs bytes [32p + 16h, +16); low nibbles are elements 64p + 16h + l (sub-block 2p), high
    // nibbles 64p + 32 + 16h + l (sub-block 2p + 1). Header (16 bytes): d, dmin, scales[12]; then
    // Q4_K: qs[128].   Q5_K: qh[32], qs[128]; bit 2p (low) / 2p + 1 (high) of qh[16h + l] is bit 4.
    const int p = it >> 1, h = it & 1;
    const Bytes16 hdr = bytes16(r.v[0]);
    split_nibbles(bytes16(r.v[1]), o);
    if constexpr (T == DType::Q5_K) {
      const Bytes16 qh = bytes16(r.v[2]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        o.q[i] |= ((qh.w[i] >> (2 * p)) & 0x01010101u) << 4;
        o.q[4 + i] |= ((qh.w[i] >> (2 * p + 1)) & 0x01010101u) << 4;
      }
    }
    const float d = f16_to_float((uint16_t)(hdr.w[0] & 0xFFFFu)), dmin = f16_to_float((uint16_t)(hdr.w[0] >> 16));
    int sc[2], mn[2];
    scale_min_k4_pair(hdr, p, sc, mn);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      o.sc[half] = sc[half];
      o.mn[half] = mn[half];
      o.a[half] = mul_rn(d, (float)sc[half]);
      o.b[half] = -mul_rn(dmin, (float)mn[half]);
      o.e[half] = 64 * p + 32 * half + 16 * h;
    }
    o.d = d;
    o.dmin = dmin;
  } else if constexpr (T == DType::Q6_K) {
    // ql[128], qh[64], scales[16] (int8), d. Item (n, s, lh): element 128n + 32g + l, g in {s, s + 2},
    // l in [16lh, 16lh + 16): low 4 bits from ql[64n + 32s + l] (low nibble for g = s, high for g = s + 2),
    // high 2 bits at bit 2g of qh[32n + l]; sub-block 8n + 2g + lh; level q - 32.
    const int n = it >> 2, s = (it >> 1) & 1, lh = it & 1;
    const Bytes16 ql = bytes16(r.v[0]), qh = bytes16(r.v[1]);
    const float d = f16_to_float((uint16_t)r.h0);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int g = s + 2 * half;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t low = (ql.w[i] >> (4 * half)) & 0x0F0F0F0Fu;
        const uint32_t high = ((qh.w[i] >> (2 * g)) & 0x03030303u) << 4;
        o.q[4 * half + i] = sub_bytes(low | high, 32);
      }
      o.sc[half] = (int8_t)(uint8_t)(r.h1 >> (8 * half));  // scales[16] at 192 (load_item)
      o.mn[half] = 0;
      o.a[half] = mul_rn(d, (float)o.sc[half]);
      o.e[half] = 128 * n + 32 * g + 16 * lh;
    }
    o.d = d;
    o.dmin = 0.f;
  } else {
    static_assert(T == DType::Q8_K, "decode_raw: unhandled block type");
    // d (f32), qs[256], bsums[16]; item it is elements 32it .. 32it + 31.
    float d;
    memcpy(&d, &r.h0, 4);
    const Bytes16 lo = bytes16(r.v[0]), hi = bytes16(r.v[1]);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      o.q[i] = lo.w[i];
      o.q[4 + i] = hi.w[i];
    }
    o.a[0] = o.a[1] = d;
    o.e[0] = 32 * it;
    o.e[1] = 32 * it + 16;
    o.sc[0] = o.sc[1] = 1;
    o.mn[0] = o.mn[1] = 0;
    o.d = d;
    o.dmin = 0.f;
  }
}

// Decodes item `it` (< kItems) of the block at `blk` (kAligned16: as for load_item).
template <DType T, bool kAligned16 = false>
__device__ __forceinline__ void decode_item(const uint8_t* blk, int it, Item& o) {
  RawItem<T> r;
  load_item<T, kAligned16>(blk, it, r);
  decode_raw<T>(r, it, o);
}

// Items 2p and 2p + 1 (p < 4) of a Q4_K / Q5_K block: the two 16-byte halves of qs bytes [32p, 32p + 32), whose
// elements lie in the same sub-blocks 2p and 2p + 1, so one header load and one scale unpack serve both (the
// header's registers are shared; decode_raw's header arithmetic on them is the same for both items). Equal to
// decode_item(blk, 2p, o0) and decode_item(blk, 2p + 1, o1).
template <DType T, bool kAligned16 = false>
__device__ __forceinline__ void decode_item_pair(const uint8_t* blk, int p, Item& o0, Item& o1) {
  static_assert(T == DType::Q4_K || T == DType::Q5_K, "decode_item_pair: Q4_K / Q5_K only");
  constexpr int qs_at = T == DType::Q4_K ? 16 : 48;
  auto ld = [](const uint8_t* q) { return kAligned16 ? ld_16B_raw_aligned(q) : ld_16B_raw(q); };
  RawItem<T> r0, r1;
  r0.v[0] = ld(blk);  // d, dmin, scales[12]
  r1.v[0] = r0.v[0];
  r0.v[1] = ld(blk + qs_at + 32 * p);
  r1.v[1] = ld(blk + qs_at + 32 * p + 16);
  if constexpr (T == DType::Q5_K) {
    r0.v[2] = ld(blk + 16);  // qh[0..15]
    r1.v[2] = ld(blk + 32);  // qh[16..31]
  }
  decode_raw<T>(r0, 2 * p, o0);
  decode_raw<T>(r1, 2 * p + 1, o1);
}

// Signed byte k (< 4) of a packed word.
__device__ __forceinline__ int level_of(uint32_t w, int k) { return (int)(int8_t)(uint8_t)(w >> (8 * k)); }

// The value of element i (< 16) of half h, as the CPU's dequantization computes it.
template <DType T>
__device__ __forceinline__ float item_value(const Item& it, int h, int i) {
  const float v = mul_rn(it.a[h], (float)level_of(it.q[4 * h + i / 4], i % 4));
  if constexpr (BlockTraits<T>::kHasMin) return add_rn(v, it.b[h]);
  else return v;
}

#endif  // device compilation

}  // namespace rbee::gpu::quant
