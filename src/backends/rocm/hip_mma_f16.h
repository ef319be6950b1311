// HIP's side of the 16-bit matrix tile contract (backends/gpu/platform.h).
//  - gfx908, gfx90a, gfx942 (wave64, matrix cores): one MFMA 16x16x16 per tile product. f16:
//    __builtin_amdgcn_mfma_f32_16x16x16f16; bf16: __builtin_amdgcn_mfma_f32_16x16x16bf16_1k (gfx90a, gfx942),
//    on gfx908 two __builtin_amdgcn_mfma_f32_16x16x8bf16 (k pairs 4q + 0..1, then 4q + 2..3, of lane group q:
//    the same k for A and B, which is all a product needs).
//    Layouts (lane l, q = l / 16): A: row l % 16, k 4q .. 4q + 3; B: column l % 16, k 4q .. 4q + 3;
//    C: column l % 16, rows 4q + i for v[i], i < 4.
//  - other targets (gfx1030: no matrix unit): the FMA implementation of backends/gpu/fma_mma_f16.h.
#pragma once

#include <cstdint>

#include "rbee/core/half.h"

#if defined(__HIPCC__)
#if defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx942__)
namespace rbee::gpu {

enum class MmaElem { F16, BF16 };
inline constexpr int kMmaAccPerLane = 4;
inline constexpr int kMmaRowsPerLane = 4;

typedef short rbee_mma_short4 __attribute__((ext_vector_type(4)));
typedef short rbee_mma_short2 __attribute__((ext_vector_type(2)));
typedef _Float16 rbee_mma_half4 __attribute__((ext_vector_type(4)));
typedef float rbee_mma_float4 __attribute__((ext_vector_type(4)));

struct MmaA {
  rbee_mma_short4 v;
};
struct MmaB {
  rbee_mma_short4 v;
};
struct MmaAcc {
  float v[kMmaAccPerLane];
};

__device__ __forceinline__ int mma_acc_row(int i) { return 4 * (lane_id() >> 4) + i; }
__device__ __forceinline__ int mma_acc_col(int) { return lane_id() & 15; }
constexpr int mma_acc_slot(int i) { return i; }
__device__ __forceinline__ int mma_slot_row(int s) { return 4 * (lane_id() >> 4) + s; }

__device__ __forceinline__ void mma_zero(MmaAcc& c) {
#pragma unroll
  for (int i = 0; i < kMmaAccPerLane; ++i) c.v[i] = 0.f;
}
// 4 consecutive elements of row (or B^T row) l % 16: one 8-byte LDS read.
__device__ __forceinline__ void mma_load_a(MmaA& a, const uint16_t* s, int ld) {
  const int l = lane_id();
  a.v = *reinterpret_cast<const rbee_mma_short4*>(s + (l & 15) * ld + 4 * (l >> 4));
}
__device__ __forceinline__ void mma_load_b_nk(MmaB& b, const uint16_t* s, int ld) {
  const int l = lane_id();
  b.v = *reinterpret_cast<const rbee_mma_short4*>(s + (l & 15) * ld + 4 * (l >> 4));
}
__device__ __forceinline__ void mma_load_b_kn(MmaB& b, const uint16_t* s, int ld) {
  const int l = lane_id();
  const uint16_t* p = s + 4 * (l >> 4) * ld + (l & 15);
  b.v = rbee_mma_short4{(short)p[0], (short)p[ld], (short)p[2 * ld], (short)p[3 * ld]};
}

template <MmaElem E>
__device__ __forceinline__ void mma(MmaAcc& c, const MmaA& a, const MmaB& b) {
  rbee_mma_float4 acc = {c.v[0], c.v[1], c.v[2], c.v[3]};
  if constexpr (E == MmaElem::F16) {
    acc = __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(rbee_mma_half4, a.v),
                                                __builtin_bit_cast(rbee_mma_half4, b.v), acc, 0, 0, 0);
  } else {
#if defined(__gfx908__)
    acc = __builtin_amdgcn_mfma_f32_16x16x8bf16(rbee_mma_short2{a.v.x, a.v.y}, rbee_mma_short2{b.v.x, b.v.y}, acc,
                                                0, 0, 0);
    acc = __builtin_amdgcn_mfma_f32_16x16x8bf16(rbee_mma_short2{a.v.z, a.v.w}, rbee_mma_short2{b.v.z, b.v.w}, acc,
                                                0, 0, 0);
#else
    acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a.v, b.v, acc, 0, 0, 0);
#endif
  }
  c.v[0] = acc[0];
  c.v[1] = acc[1];
  c.v[2] = acc[2];
  c.v[3] = acc[3];
}

template <MmaElem E>
__device__ __forceinline__ uint16_t mma_float_to_elem(float f) {
  if constexpr (E == MmaElem::BF16) {
    return ::rbee::f32_to_bf16_bits(f);
  } else {
    return __half_as_ushort(__float2half(f));
  }
}
template <MmaElem E>
__device__ __forceinline__ void mma_store(const MmaAcc& c, uint16_t* s, int ld) {
  const int l = lane_id();
#pragma unroll
  for (int i = 0; i < kMmaAccPerLane; ++i) s[(4 * (l >> 4) + i) * ld + (l & 15)] = mma_float_to_elem<E>(c.v[i]);
}

// C holds columns per lane, A rows per lane: through the scratch tile (store, warp_sync, load).
inline constexpr bool kMmaAccToARegisters = false;
template <MmaElem E>
__device__ __forceinline__ void mma_acc_to_a(MmaA& a, const MmaAcc& c, uint16_t* s, int ld) {
  mma_store<E>(c, s, ld);
  warp_sync();
  mma_load_a(a, s, ld);
}

// A row's 16 columns sit in the 16 lanes of a lane group (same l / 16), one per lane.
__device__ __forceinline__ void mma_rows_max(float (&x)[kMmaRowsPerLane]) {
#pragma unroll
  for (int s = 0; s < kMmaRowsPerLane; ++s) {
#pragma unroll
    for (int j = 0; j < 4; ++j) x[s] = fmaxf(x[s], __shfl_xor(x[s], 1 << j));
  }
}
__device__ __forceinline__ void mma_rows_sum(float (&x)[kMmaRowsPerLane]) {
#pragma unroll
  for (int s = 0; s < kMmaRowsPerLane; ++s) {
#pragma unroll
    for (int j = 0; j < 4; ++j) x[s] += __shfl_xor(x[s], 1 << j);
  }
}

}  // namespace rbee::gpu
#else
#include "backends/gpu/fma_mma_f16.h"
#endif
#endif
