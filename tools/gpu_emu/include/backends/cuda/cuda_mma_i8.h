// The emulator's warp-level int8 tile product (shadows src/backends/cuda/cuda_mma_i8.h, whose contract it
// implements in scalar C++): C[16][16] = A[16 x 32] . B[16 x 32]^T from shared memory.
//
// The accumulator layout follows the vendor the warp width stands for, so the kernels are run against both:
//   warp 32: CUDA's mma.sync m16n8 layout (lane l: rows l / 4 and l / 4 + 8, columns 2 (l % 4) + {0, 1, 8, 9});
//   warp 64: AMD's MFMA 16x16x16 layout (lane l: rows 4 (l / 16) + {0..3}, column l % 16).
// Fragments copy their 16 x 32 bytes at load time and remember where they came from: an mma whose tile changed in
// shared memory since its fragments were loaded breaks the contract (a vendor may read at either point) and is
// reported as a launch error.
#pragma once

#include <cstdint>
#include <cstring>

#include "emu_runtime.h"

namespace rbee::gpu {

#if RBEE_DEVICE_WARP_SIZE == 64
inline constexpr int kMmaI8Rows = 4;
inline constexpr int kMmaI8Cols = 1;
inline int mma_i8_row(int lane, int r) { return 4 * (lane >> 4) + r; }
inline int mma_i8_col(int lane, int) { return lane & 15; }
#else
inline constexpr int kMmaI8Rows = 2;
inline constexpr int kMmaI8Cols = 4;
inline int mma_i8_row(int lane, int r) { return (lane >> 2) + 8 * r; }
inline int mma_i8_col(int lane, int c) { return 2 * (lane & 3) + (c & 1) + 8 * (c >> 1); }
#endif
inline constexpr int kMmaI8AccPerLane = kMmaI8Rows * kMmaI8Cols;

struct MmaI8Tile {
  int8_t v[16][32];
  const int8_t* src;
  int ld;
  int lane;
};
struct MmaI8A : MmaI8Tile {};
struct MmaI8B : MmaI8Tile {};
struct MmaI8Acc {
  int32_t v[kMmaI8AccPerLane];
};

inline void mma_i8_load_tile(MmaI8Tile& f, const int8_t* p, int ld, int lane) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0 || ld % 16 != 0) ::emu::fail(::emu::kMmaMisaligned);
  for (int i = 0; i < 16; ++i) std::memcpy(f.v[i], p + (size_t)i * ld, 32);
  f.src = p;
  f.ld = ld;
  f.lane = lane;
}
inline void mma_i8_load_a(MmaI8A& f, const int8_t* a, int lda, int lane) { mma_i8_load_tile(f, a, lda, lane); }
inline void mma_i8_load_b(MmaI8B& f, const int8_t* b, int ldb, int lane) { mma_i8_load_tile(f, b, ldb, lane); }

inline void mma_i8_check(const MmaI8Tile& f) {
  for (int i = 0; i < 16; ++i) {
    if (std::memcmp(f.v[i], f.src + (size_t)i * f.ld, 32) != 0) return ::emu::fail(::emu::kMmaTileChanged);
  }
}

// Element (r, c) of this lane over k in [k0, k1).
inline int32_t mma_i8_element(const MmaI8A& a, const MmaI8B& b, int r, int c, int k0, int k1) {
  const int i = mma_i8_row(a.lane, r), j = mma_i8_col(a.lane, c);
  int32_t s = 0;
  for (int k = k0; k < k1; ++k) s += (int32_t)a.v[i][k] * (int32_t)b.v[j][k];
  return s;
}

inline void mma_i8_k32(MmaI8Acc& out, const MmaI8A& a, const MmaI8B& b) {
  mma_i8_check(a);
  mma_i8_check(b);
  for (int r = 0; r < kMmaI8Rows; ++r) {
    for (int c = 0; c < kMmaI8Cols; ++c) out.v[r * kMmaI8Cols + c] = mma_i8_element(a, b, r, c, 0, 32);
  }
}
inline void mma_i8_k32_bias(MmaI8Acc& out, const MmaI8A& a, const MmaI8B& b, int32_t z) {
  mma_i8_check(a);
  mma_i8_check(b);
  for (int r = 0; r < kMmaI8Rows; ++r) {
    for (int c = 0; c < kMmaI8Cols; ++c) out.v[r * kMmaI8Cols + c] = z + mma_i8_element(a, b, r, c, 0, 32);
  }
}
inline void mma_i8_k32_acc(MmaI8Acc& out, const MmaI8A& a, const MmaI8B& b) {
  mma_i8_check(a);
  mma_i8_check(b);
  for (int r = 0; r < kMmaI8Rows; ++r) {
    for (int c = 0; c < kMmaI8Cols; ++c) out.v[r * kMmaI8Cols + c] += mma_i8_element(a, b, r, c, 0, 32);
  }
}
inline void mma_i8_k16x2(MmaI8Acc& c0, MmaI8Acc& c1, const MmaI8A& a, const MmaI8B& b) {
  mma_i8_check(a);
  mma_i8_check(b);
  for (int r = 0; r < kMmaI8Rows; ++r) {
    for (int c = 0; c < kMmaI8Cols; ++c) {
      c0.v[r * kMmaI8Cols + c] = mma_i8_element(a, b, r, c, 0, 16);
      c1.v[r * kMmaI8Cols + c] = mma_i8_element(a, b, r, c, 16, 32);
    }
  }
}

}  // namespace rbee::gpu
