// The 16-bit matrix tile contract of backends/gpu/platform.h on plain FMA: for GPUs without a matrix unit
// (gfx1030 and other RDNA2 targets) and for the CPU emulator (tools/gpu_emu). Included by a vendor's
// *_mma_f16.h after its platform header (uses lane_id, shfl_xor, half, half_to_float, float_to_half).
//
// Fragments are views of shared memory (pointer + strides): mma reads A and B there. Accumulator layout, for
// warp width W: lane l holds column l % 16 of rows l / 16 + (W / 16) i, i < 256 / W (each element its own row
// slot). This is neither NVIDIA's nor AMD's layout, so the emulator shows whether a kernel assumes one.
#pragma once

#include <cstdint>
#include <cstring>

#include "rbee/core/half.h"

namespace rbee::gpu {

enum class MmaElem { F16, BF16 };
inline constexpr int kMmaAccPerLane = 256 / RBEE_DEVICE_WARP_SIZE;
inline constexpr int kMmaRowsPerLane = kMmaAccPerLane;

struct MmaA {
  const uint16_t* p;
  int ld;
};
struct MmaB {
  const uint16_t* p;
  int sk, sn;  // B[k][n] = p[k * sk + n * sn]
};
struct MmaAcc {
  float v[kMmaAccPerLane];
};

__device__ __forceinline__ int mma_acc_row(int i) { return (lane_id() >> 4) + (RBEE_DEVICE_WARP_SIZE / 16) * i; }
__device__ __forceinline__ int mma_acc_col(int) { return lane_id() & 15; }
constexpr int mma_acc_slot(int i) { return i; }
__device__ __forceinline__ int mma_slot_row(int s) { return mma_acc_row(s); }

__device__ __forceinline__ void mma_zero(MmaAcc& c) {
#pragma unroll
  for (int i = 0; i < kMmaAccPerLane; ++i) c.v[i] = 0.f;
}
__device__ __forceinline__ void mma_load_a(MmaA& a, const uint16_t* s, int ld) { a = MmaA{s, ld}; }
__device__ __forceinline__ void mma_load_b_nk(MmaB& b, const uint16_t* s, int ld) { b = MmaB{s, 1, ld}; }
__device__ __forceinline__ void mma_load_b_kn(MmaB& b, const uint16_t* s, int ld) { b = MmaB{s, ld, 1}; }

template <MmaElem E>
__device__ __forceinline__ float mma_elem_to_float(uint16_t bits) {
  if constexpr (E == MmaElem::BF16) {
    const uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  } else {
    half h;
    memcpy(&h, &bits, 2);
    return half_to_float(h);
  }
}
template <MmaElem E>
__device__ __forceinline__ uint16_t mma_float_to_elem(float f) {
  if constexpr (E == MmaElem::BF16) {
    return ::rbee::f32_to_bf16_bits(f);
  } else {
    const half h = float_to_half(f);
    uint16_t bits;
    memcpy(&bits, &h, 2);
    return bits;
  }
}

template <MmaElem E>
__device__ __forceinline__ void mma(MmaAcc& c, const MmaA& a, const MmaB& b) {
#pragma unroll
  for (int i = 0; i < kMmaAccPerLane; ++i) {
    const uint16_t* ar = a.p + mma_acc_row(i) * a.ld;
    const uint16_t* bc = b.p + mma_acc_col(i) * b.sn;
    float s = c.v[i];
#pragma unroll
    for (int k = 0; k < 16; ++k) s = fmaf(mma_elem_to_float<E>(ar[k]), mma_elem_to_float<E>(bc[k * b.sk]), s);
    c.v[i] = s;
  }
}

template <MmaElem E>
__device__ __forceinline__ void mma_store(const MmaAcc& c, uint16_t* s, int ld) {
#pragma unroll
  for (int i = 0; i < kMmaAccPerLane; ++i) s[mma_acc_row(i) * ld + mma_acc_col(i)] = mma_float_to_elem<E>(c.v[i]);
}

// Through the scratch tile: the fragment is a view of it (mma reads it there).
inline constexpr bool kMmaAccToARegisters = false;
template <MmaElem E>
__device__ __forceinline__ void mma_acc_to_a(MmaA& a, const MmaAcc& c, uint16_t* s, int ld) {
  mma_store<E>(c, s, ld);
  warp_sync();
  mma_load_a(a, s, ld);
}

// A row's 16 columns sit in the 16 lanes that share lane / 16.
__device__ __forceinline__ void mma_rows_max(float (&x)[kMmaRowsPerLane]) {
#pragma unroll
  for (int s = 0; s < kMmaRowsPerLane; ++s) {
#pragma unroll
    for (int j = 0; j < 4; ++j) x[s] = fmaxf(x[s], shfl_xor(x[s], 1 << j));
  }
}
__device__ __forceinline__ void mma_rows_sum(float (&x)[kMmaRowsPerLane]) {
#pragma unroll
  for (int s = 0; s < kMmaRowsPerLane; ++s) {
#pragma unroll
    for (int j = 0; j < 4; ++j) x[s] += shfl_xor(x[s], 1 << j);
  }
}

}  // namespace rbee::gpu
