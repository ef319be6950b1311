// CUDA's side of the 16-bit matrix tile contract (backends/gpu/platform.h): mma.sync.aligned.m16n8k16 with
// f32 accumulation (sm_80 and later; our archs are 80, 86, 89, 90), fragments loaded with ldmatrix.
//
// A 16 x 16 tile is two m16n8k16 products (columns 0-7 and 8-15). With g = lane / 4, t = lane % 4 (PTX ISA,
// "Matrix Fragments for mma.m16n8k16 with floating point type"):
//   A regs  a0: (g, 2t..2t+1)  a1: (g+8, 2t..)  a2: (g, 2t+8..)  a3: (g+8, 2t+8..)          (row, k)
//   B regs  b0: (2t..2t+1, g)  b1: (2t+8.., g)  per 8-column half                            (k, column)
//   C       c0, c1: (g, 2t..2t+1)  c2, c3: (g+8, 2t..2t+1)  per half; MmaAcc v[0..3] half 0, v[4..7] half 1
// ldmatrix .x4 loads four 8 x 8 matrices, lanes 8j .. 8j+7 giving the row addresses of matrix j, and hands
// lane l the pair at row l / 4, columns 2 (l % 4) .. +1 of each (transposed with .trans).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
namespace rbee::gpu {

enum class MmaElem { F16, BF16 };
inline constexpr int kMmaAccPerLane = 8;
inline constexpr int kMmaRowsPerLane = 2;

struct MmaA {
  uint32_t r[4];
};
struct MmaB {
  uint32_t r[4];  // r[0], r[1]: columns 0-7 (k 0-7, k 8-15); r[2], r[3]: columns 8-15
};
struct MmaAcc {
  float v[kMmaAccPerLane];
};

// Element i: half i / 4, register j = i % 4 of that half.
__device__ __forceinline__ int mma_acc_row(int i) { return (lane_id() >> 2) + 8 * ((i >> 1) & 1); }
__device__ __forceinline__ int mma_acc_col(int i) { return 8 * (i >> 2) + 2 * (lane_id() & 3) + (i & 1); }
constexpr int mma_acc_slot(int i) { return (i >> 1) & 1; }
__device__ __forceinline__ int mma_slot_row(int s) { return (lane_id() >> 2) + 8 * s; }

__device__ __forceinline__ void mma_zero(MmaAcc& c) {
#pragma unroll
  for (int i = 0; i < kMmaAccPerLane; ++i) c.v[i] = 0.f;
}

__device__ __forceinline__ unsigned mma_smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mma_ldmatrix_x4(uint32_t (&r)[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(mma_smem_addr(p))
               : "memory");
}
__device__ __forceinline__ void mma_ldmatrix_x4_trans(uint32_t (&r)[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(mma_smem_addr(p))
               : "memory");
}

// Matrices: rows 0-7 / 8-15 x k 0-7, then rows 0-7 / 8-15 x k 8-15 = a0, a1, a2, a3.
__device__ __forceinline__ void mma_load_a(MmaA& a, const uint16_t* s, int ld) {
  const int l = lane_id();
  mma_ldmatrix_x4(a.r, s + (l & 15) * ld + 8 * (l >> 4));
}
// s holds B^T (row n = column n of B). Matrices: n 0-7 x k 0-7, n 0-7 x k 8-15, n 8-15 x k 0-7, n 8-15 x k 8-15.
__device__ __forceinline__ void mma_load_b_nk(MmaB& b, const uint16_t* s, int ld) {
  const int l = lane_id();
  mma_ldmatrix_x4(b.r, s + ((l & 7) + 8 * (l >> 4)) * ld + 8 * ((l >> 3) & 1));
}
// s holds B (row k); transposed loads. Matrices: k 0-7 x n 0-7, k 8-15 x n 0-7, k 0-7 x n 8-15, k 8-15 x n 8-15.
__device__ __forceinline__ void mma_load_b_kn(MmaB& b, const uint16_t* s, int ld) {
  const int l = lane_id();
  mma_ldmatrix_x4_trans(b.r, s + ((l & 7) + 8 * ((l >> 3) & 1)) * ld + 8 * (l >> 4));
}

template <MmaElem E>
__device__ __forceinline__ void mma(MmaAcc& c, const MmaA& a, const MmaB& b) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float* d = c.v + 4 * h;
    if constexpr (E == MmaElem::F16) {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
          "{%0, %1, %2, %3};\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[2 * h]), "r"(b.r[2 * h + 1]));
    } else {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
          "{%0, %1, %2, %3};\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[2 * h]), "r"(b.r[2 * h + 1]));
    }
  }
}

// Two adjacent columns rounded to E and packed (lower address = first).
template <MmaElem E>
__device__ __forceinline__ uint32_t mma_pack2(float x, float y) {
  if constexpr (E == MmaElem::F16) {
    const __half2 h = __floats2half2_rn(x, y);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}
template <MmaElem E>
__device__ __forceinline__ void mma_store(const MmaAcc& c, uint16_t* s, int ld) {
  const int l = lane_id(), g = l >> 2, t = l & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    *reinterpret_cast<uint32_t*>(s + g * ld + 8 * h + 2 * t) = mma_pack2<E>(c.v[4 * h], c.v[4 * h + 1]);
    *reinterpret_cast<uint32_t*>(s + (g + 8) * ld + 8 * h + 2 * t) = mma_pack2<E>(c.v[4 * h + 2], c.v[4 * h + 3]);
  }
}

// The accumulator layout of the two halves is the A layout of one k16 fragment: a0 = (v0, v1) at (g, 2t..),
// a1 = (v2, v3) at (g+8, 2t..), a2 = (v4, v5) at (g, 2t+8..), a3 = (v6, v7) at (g+8, 2t+8..). No shared memory.
inline constexpr bool kMmaAccToARegisters = true;
template <MmaElem E>
__device__ __forceinline__ void mma_acc_to_a(MmaA& a, const MmaAcc& c, uint16_t*, int) {
#pragma unroll
  for (int j = 0; j < 4; ++j) a.r[j] = mma_pack2<E>(c.v[2 * j], c.v[2 * j + 1]);
}

// A row's 16 columns sit in the 4 lanes of a quad (same g), 4 per lane.
__device__ __forceinline__ void mma_rows_max(float (&x)[kMmaRowsPerLane]) {
#pragma unroll
  for (int s = 0; s < kMmaRowsPerLane; ++s) {
    x[s] = fmaxf(x[s], __shfl_xor_sync(0xffffffffu, x[s], 1));
    x[s] = fmaxf(x[s], __shfl_xor_sync(0xffffffffu, x[s], 2));
  }
}
__device__ __forceinline__ void mma_rows_sum(float (&x)[kMmaRowsPerLane]) {
#pragma unroll
  for (int s = 0; s < kMmaRowsPerLane; ++s) {
    x[s] += __shfl_xor_sync(0xffffffffu, x[s], 1);
    x[s] += __shfl_xor_sync(0xffffffffu, x[s], 2);
  }
}

}  // namespace rbee::gpu
#endif
