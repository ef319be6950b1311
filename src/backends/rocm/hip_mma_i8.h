// HIP's warp-level int8 tile product (re-exported by backends/gpu/platform.h). The contract is the one stated in
// backends/cuda/cuda_mma_i8.h: C[16][16] (int32) = A[16 x 32] . B[16 x 32]^T (or C +=) from shared memory, one
// warp, and lane `lane` holds element r * kMmaI8Cols + c = C[mma_i8_row(lane, r)][mma_i8_col(lane, c)].
//
// Two implementations, chosen per device pass:
//  - MFMA (gfx908, gfx90a; wave64): v_mfma_i32_16x16x16i8, two per 32 k. Lane l supplies A[l % 16][4 (l / 16) ..
//    + 3] and B[l % 16][4 (l / 16) .. + 3] (one 32-bit word of each per 16 k) and receives C[4 (l / 16) + i][l % 16],
//    i < 4: one column, four rows.
//  - dot4 (every other target: gfx1030 has no matrix unit; gfx942 replaced the 16x16x16 int8 MFMA by 16x16x32 and
//    gfx1100 has WMMA, both ROCm 6 targets that Debian's hipcc 5.2 cannot compile, so they take this path until a
//    build with ROCm 6 adds theirs here): lane l computes C[R (l / 16) + r][l % 16], r < R = 256 / wave width, with
//    sdot4 over the rows, reading shared memory in the mma call (the contract allows it).
#pragma once

#include <cstdint>

#if defined(__gfx908__) || defined(__gfx90a__)
#define RBEE_HIP_MMA_I8_MFMA 1
#else
#define RBEE_HIP_MMA_I8_MFMA 0
#endif

namespace rbee::gpu {

inline constexpr int kMmaI8Cols = 1;
inline constexpr int kMmaI8Rows = 256 / RBEE_DEVICE_WARP_SIZE;  // 4 on wave64, 8 on wave32
inline constexpr int kMmaI8AccPerLane = kMmaI8Rows * kMmaI8Cols;

struct MmaI8Acc {
  int32_t v[kMmaI8AccPerLane];
};

#if defined(__HIPCC__)

__device__ __forceinline__ int mma_i8_row(int lane, int r) { return kMmaI8Rows * (lane >> 4) + r; }
__device__ __forceinline__ int mma_i8_col(int lane, int) { return lane & 15; }

#if RBEE_HIP_MMA_I8_MFMA

static_assert(RBEE_DEVICE_WARP_SIZE == 64, "MFMA int8 tiles need wave64");
typedef int rbee_v4i32 __attribute__((ext_vector_type(4)));

struct MmaI8A {
  int r[2];  // A[l % 16][4 (l / 16) .. + 3] and the same 16 bytes further
};
struct MmaI8B {
  int r[2];
};

__device__ __forceinline__ void mma_i8_load_a(MmaI8A& f, const int8_t* a, int lda, int lane) {
  const int8_t* p = a + (lane & 15) * lda + 4 * (lane >> 4);
  f.r[0] = *reinterpret_cast<const int*>(p);
  f.r[1] = *reinterpret_cast<const int*>(p + 16);
}
__device__ __forceinline__ void mma_i8_load_b(MmaI8B& f, const int8_t* b, int ldb, int lane) {
  const int8_t* p = b + (lane & 15) * ldb + 4 * (lane >> 4);
  f.r[0] = *reinterpret_cast<const int*>(p);
  f.r[1] = *reinterpret_cast<const int*>(p + 16);
}
__device__ __forceinline__ void mma_i8_k32(MmaI8Acc& c, const MmaI8A& a, const MmaI8B& b) {
  rbee_v4i32 d = {0, 0, 0, 0};
  d = __builtin_amdgcn_mfma_i32_16x16x16i8(a.r[0], b.r[0], d, 0, 0, 0);
  d = __builtin_amdgcn_mfma_i32_16x16x16i8(a.r[1], b.r[1], d, 0, 0, 0);
  for (int i = 0; i < 4; ++i) c.v[i] = d[i];
}
__device__ __forceinline__ void mma_i8_k32_bias(MmaI8Acc& c, const MmaI8A& a, const MmaI8B& b, int32_t z) {
  rbee_v4i32 d = {z, z, z, z};
  d = __builtin_amdgcn_mfma_i32_16x16x16i8(a.r[0], b.r[0], d, 0, 0, 0);
  d = __builtin_amdgcn_mfma_i32_16x16x16i8(a.r[1], b.r[1], d, 0, 0, 0);
  for (int i = 0; i < 4; ++i) c.v[i] = d[i];
}
__device__ __forceinline__ void mma_i8_k32_acc(MmaI8Acc& c, const MmaI8A& a, const MmaI8B& b) {
  rbee_v4i32 d = {c.v[0], c.v[1], c.v[2], c.v[3]};
  d = __builtin_amdgcn_mfma_i32_16x16x16i8(a.r[0], b.r[0], d, 0, 0, 0);
  d = __builtin_amdgcn_mfma_i32_16x16x16i8(a.r[1], b.r[1], d, 0, 0, 0);
  for (int i = 0; i < 4; ++i) c.v[i] = d[i];
}
__device__ __forceinline__ void mma_i8_k16x2(MmaI8Acc& c0, MmaI8Acc& c1, const MmaI8A& a, const MmaI8B& b) {
  const rbee_v4i32 z = {0, 0, 0, 0};
  const rbee_v4i32 d0 = __builtin_amdgcn_mfma_i32_16x16x16i8(a.r[0], b.r[0], z, 0, 0, 0);
  const rbee_v4i32 d1 = __builtin_amdgcn_mfma_i32_16x16x16i8(a.r[1], b.r[1], z, 0, 0, 0);
  for (int i = 0; i < 4; ++i) {
    c0.v[i] = d0[i];
    c1.v[i] = d1[i];
  }
}

#else  // dot4

struct MmaI8A {
  const int8_t* p;  // rows kMmaI8Rows * (lane / 16) ..; read in the mma call
  int ld;
};
struct MmaI8B {
  int4 w[2];  // row lane % 16: its 32 bytes
};

__device__ __forceinline__ void mma_i8_load_a(MmaI8A& f, const int8_t* a, int lda, int lane) {
  f.p = a + kMmaI8Rows * (lane >> 4) * lda;
  f.ld = lda;
}
__device__ __forceinline__ void mma_i8_load_b(MmaI8B& f, const int8_t* b, int ldb, int lane) {
  const int4* p = reinterpret_cast<const int4*>(b + (lane & 15) * ldb);
  f.w[0] = p[0];
  f.w[1] = p[1];
}
// Dot products of row r of A with the lane's B row over 16 bytes starting at byte 16 h.
__device__ __forceinline__ int mma_i8_dot16(const MmaI8A& a, const MmaI8B& b, int r, int h) {
  const int4 x = *reinterpret_cast<const int4*>(a.p + r * a.ld + 16 * h);
  const int4& y = b.w[h];
  int s = dot4_i8(x.x, y.x, 0);
  s = dot4_i8(x.y, y.y, s);
  s = dot4_i8(x.z, y.z, s);
  return dot4_i8(x.w, y.w, s);
}
__device__ __forceinline__ void mma_i8_k32(MmaI8Acc& c, const MmaI8A& a, const MmaI8B& b) {
  for (int r = 0; r < kMmaI8Rows; ++r) c.v[r] = mma_i8_dot16(a, b, r, 0) + mma_i8_dot16(a, b, r, 1);
}
__device__ __forceinline__ void mma_i8_k32_bias(MmaI8Acc& c, const MmaI8A& a, const MmaI8B& b, int32_t z) {
  for (int r = 0; r < kMmaI8Rows; ++r) c.v[r] = z + mma_i8_dot16(a, b, r, 0) + mma_i8_dot16(a, b, r, 1);
}
__device__ __forceinline__ void mma_i8_k32_acc(MmaI8Acc& c, const MmaI8A& a, const MmaI8B& b) {
  for (int r = 0; r < kMmaI8Rows; ++r) c.v[r] += mma_i8_dot16(a, b, r, 0) + mma_i8_dot16(a, b, r, 1);
}
__device__ __forceinline__ void mma_i8_k16x2(MmaI8Acc& c0, MmaI8Acc& c1, const MmaI8A& a, const MmaI8B& b) {
  for (int r = 0; r < kMmaI8Rows; ++r) {
    c0.v[r] = mma_i8_dot16(a, b, r, 0);
    c1.v[r] = mma_i8_dot16(a, b, r, 1);
  }
}

#endif  // RBEE_HIP_MMA_I8_MFMA

#endif  // __HIPCC__

}  // namespace rbee::gpu
