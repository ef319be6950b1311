// CUDA's warp-level int8 tile product (re-exported by backends/gpu/platform.h): the contract every vendor's
// mma_i8 header implements, here on mma.sync (sm_80 and later: IMMA in the SASS).
//
// Contract (all vendors; the shared kernels rely on nothing else):
//   A: 16 rows of 32 int8 at a + i * lda, B: 16 rows of 32 int8 at b + j * ldb, both in shared memory, with a, b,
//   lda and ldb multiples of 16 bytes. All lanes of a warp call every function together (uniform control flow).
//   mma_i8_load_a / mma_i8_load_b(frag, ptr, ld, lane) prepare the operands; the tile must stay unchanged from the
//   load until the mma that uses the fragment returns (a vendor may read shared memory at either point).
//   mma_i8_k32(c, a, b):        C[i][j] = sum_{k < 32} A[i][k] * B[j][k]                      (exact, int32)
//   mma_i8_k16x2(c0, c1, a, b): C0 over k in [0, 16), C1 over k in [16, 32) (two scales per 32 elements)
//   mma_i8_k32_acc(c, a, b):    C[i][j] += sum_{k < 32} A[i][k] * B[j][k]   (integer sums over several tiles)
//   mma_i8_k32_bias(c, a, b, z): C[i][j] = z + sum_{k < 32} A[i][k] * B[j][k]   (z the same for every element: the
//                               caller keeps the sum from overflowing; MMQ adds the bits of 1.5 * 2^23 so that
//                               sums below 2^22 in magnitude read as floats without a conversion instruction)
//   Lane `lane` holds kMmaI8Rows * kMmaI8Cols elements of C: element r * kMmaI8Cols + c (r < kMmaI8Rows,
//   c < kMmaI8Cols) is C[mma_i8_row(lane, r)][mma_i8_col(lane, c)]; over the warp every (i, j) appears once.
//
// Here (m16n8k32 and m16n8k16, .s8.s8.s32): the 16 columns are two n8 halves. Fragments come from ldmatrix.x4
// (four 8 x 16-byte matrices; the PTX fragment layouts of A (row g / g + 8, bytes 4t..4t+3 and +16) and of B
// (column g, bytes 4t..4t+3 and +16) are exactly ldmatrix's, g = lane / 4, t = lane % 4). C: rows g and g + 8,
// columns 2t, 2t + 1 of each half.
#pragma once

#include <cstdint>

namespace rbee::gpu {

inline constexpr int kMmaI8Rows = 2;  // distinct rows per lane
inline constexpr int kMmaI8Cols = 4;  // distinct columns per lane
inline constexpr int kMmaI8AccPerLane = kMmaI8Rows * kMmaI8Cols;

struct MmaI8A {
  uint32_t r[4];  // rows g, g + 8 x bytes 4t..4t+3; then the same at +16 bytes
};
struct MmaI8B {
  uint32_t r[4];  // half 0 (rows 0-7): bytes 4t.., 16+4t..; half 1 (rows 8-15): the same
};
struct MmaI8Acc {
  int32_t v[kMmaI8AccPerLane];
};

#if defined(__CUDACC__)

__device__ __forceinline__ int mma_i8_row(int lane, int r) { return (lane >> 2) + 8 * r; }
__device__ __forceinline__ int mma_i8_col(int lane, int c) { return 2 * (lane & 3) + (c & 1) + 8 * (c >> 1); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  const uint32_t addr = (uint32_t)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// Matrix q of ldmatrix.x4 takes its row addresses from lanes 8q .. 8q + 7.
__device__ __forceinline__ void mma_i8_load_a(MmaI8A& f, const int8_t* a, int lda, int lane) {
  // Matrices: (rows 0-7, k 0-15), (rows 8-15, k 0-15), (rows 0-7, k 16-31), (rows 8-15, k 16-31).
  ldmatrix_x4(f.r, a + (lane & 15) * lda + (lane >> 4) * 16);
}
__device__ __forceinline__ void mma_i8_load_b(MmaI8B& f, const int8_t* b, int ldb, int lane) {
  // Matrices: (rows 0-7, k 0-15), (rows 0-7, k 16-31), (rows 8-15, k 0-15), (rows 8-15, k 16-31).
  ldmatrix_x4(f.r, b + ((lane & 7) + ((lane >> 4) << 3)) * ldb + ((lane >> 3) & 1) * 16);
}

// d = z + a . b with the same z for the four accumulators (one register, no copies).
__device__ __forceinline__ void mma_m16n8k32(int32_t (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1, int32_t z = 0) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(z));
}
// d += a . b (accumulating form of the above).
__device__ __forceinline__ void mma_m16n8k32_acc(int32_t& d0, int32_t& d1, int32_t& d2, int32_t& d3, uint32_t a0,
                                                 uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+r"(d0), "+r"(d1), "+r"(d2), "+r"(d3)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_m16n8k16(int32_t (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %7, %7, %7};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(b0), "r"(0));
}

// n8 results d0 (columns 0-7) and d1 (8-15) in the contract's element order (row slot major).
__device__ __forceinline__ void mma_i8_gather(MmaI8Acc& c, const int32_t (&d0)[4], const int32_t (&d1)[4]) {
  c.v[0] = d0[0];
  c.v[1] = d0[1];
  c.v[2] = d1[0];
  c.v[3] = d1[1];
  c.v[4] = d0[2];
  c.v[5] = d0[3];
  c.v[6] = d1[2];
  c.v[7] = d1[3];
}

__device__ __forceinline__ void mma_i8_k32(MmaI8Acc& c, const MmaI8A& a, const MmaI8B& b) {
  int32_t d0[4], d1[4];
  mma_m16n8k32(d0, a.r[0], a.r[1], a.r[2], a.r[3], b.r[0], b.r[1]);
  mma_m16n8k32(d1, a.r[0], a.r[1], a.r[2], a.r[3], b.r[2], b.r[3]);
  mma_i8_gather(c, d0, d1);
}
__device__ __forceinline__ void mma_i8_k32_bias(MmaI8Acc& c, const MmaI8A& a, const MmaI8B& b, int32_t z) {
  int32_t d0[4], d1[4];
  mma_m16n8k32(d0, a.r[0], a.r[1], a.r[2], a.r[3], b.r[0], b.r[1], z);
  mma_m16n8k32(d1, a.r[0], a.r[1], a.r[2], a.r[3], b.r[2], b.r[3], z);
  mma_i8_gather(c, d0, d1);
}
__device__ __forceinline__ void mma_i8_k32_acc(MmaI8Acc& c, const MmaI8A& a, const MmaI8B& b) {
  // Element order (see mma_i8_gather): half 0 holds v0, v1, v4, v5; half 1 v2, v3, v6, v7.
  mma_m16n8k32_acc(c.v[0], c.v[1], c.v[4], c.v[5], a.r[0], a.r[1], a.r[2], a.r[3], b.r[0], b.r[1]);
  mma_m16n8k32_acc(c.v[2], c.v[3], c.v[6], c.v[7], a.r[0], a.r[1], a.r[2], a.r[3], b.r[2], b.r[3]);
}
__device__ __forceinline__ void mma_i8_k16x2(MmaI8Acc& c0, MmaI8Acc& c1, const MmaI8A& a, const MmaI8B& b) {
  int32_t d0[4], d1[4];
  mma_m16n8k16(d0, a.r[0], a.r[1], b.r[0]);
  mma_m16n8k16(d1, a.r[0], a.r[1], b.r[2]);
  mma_i8_gather(c0, d0, d1);
  mma_m16n8k16(d0, a.r[2], a.r[3], b.r[1]);
  mma_m16n8k16(d1, a.r[2], a.r[3], b.r[3]);
  mma_i8_gather(c1, d0, d1);
}

#endif  // __CUDACC__

}  // namespace rbee::gpu
