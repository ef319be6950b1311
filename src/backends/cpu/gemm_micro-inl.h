// Per-target GEMM micro-kernel: one MR x NR tile of C from packed panels of A and B.
// Included once per Highway target by gemm_kernels.cpp.

#if defined(RBEE_GEMM_MICRO_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RBEE_GEMM_MICRO_INL_H_
#undef RBEE_GEMM_MICRO_INL_H_
#else
#define RBEE_GEMM_MICRO_INL_H_
#endif

#include <hwy/cache_control.h>

#include "backends/cpu/gemm_convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rbee::cpu::gemm_detail::HWY_NAMESPACE {

// Tile shape: MR rows of C by NV vectors of columns, MR * NV accumulators held in registers. AVX-512 has 32
// vector registers (24 accumulators), the others 16 (12 accumulators, 2 B vectors, 1 broadcast A value).
#if HWY_TARGET <= HWY_AVX3
inline constexpr size_t kMR = 12;
#else
inline constexpr size_t kMR = 6;
#endif
inline constexpr size_t kNV = 2;
inline constexpr size_t kNR = kNV * kLanes;

// C[0:MR, 0:NR] (+)= A_panel * B_panel over kc steps.
//   a: packed A panel, a[p * MR + r];  b: packed B panel, b[p * NR + j] (aligned to a vector);
//   c: row r at c + r * ldc.
// The k loop is unrolled by 4; the accumulators stay in registers for the whole loop.
HWY_NOINLINE void MicroKernel(size_t kc, const float* HWY_RESTRICT a, const float* HWY_RESTRICT b,
                            float* HWY_RESTRICT c, int64_t ldc, bool accumulate) {
  const DF df;
  // C is read or written only after the loop: start bringing its rows in now.
#pragma GCC unroll 32
  for (size_t r = 0; r < kMR; ++r) {
    hwy::Prefetch(c + (int64_t)r * ldc);
    hwy::Prefetch(c + (int64_t)r * ldc + kNR - 1);
  }
  VF acc[kMR][kNV];
#pragma GCC unroll 32
  for (size_t r = 0; r < kMR; ++r) {
#pragma GCC unroll 4
    for (size_t v = 0; v < kNV; ++v) acc[r][v] = hn::Zero(df);
  }
#pragma GCC unroll 4
  for (size_t p = 0; p < kc; ++p) {
    VF bv[kNV];
#pragma GCC unroll 4
    for (size_t v = 0; v < kNV; ++v) bv[v] = hn::Load(df, b + v * kLanes);
#pragma GCC unroll 32
    for (size_t r = 0; r < kMR; ++r) {
      const VF av = hn::Set(df, a[r]);
#pragma GCC unroll 4
      for (size_t v = 0; v < kNV; ++v) acc[r][v] = hn::MulAdd(av, bv[v], acc[r][v]);
    }
    a += kMR;
    b += kNR;
  }
#pragma GCC unroll 32
  for (size_t r = 0; r < kMR; ++r) {
#pragma GCC unroll 4
    for (size_t v = 0; v < kNV; ++v) {
      float* dst = c + (int64_t)r * ldc + v * kLanes;
      hn::StoreU(accumulate ? hn::Add(acc[r][v], hn::LoadU(df, dst)) : acc[r][v], df, dst);
    }
  }
}

// An edge tile: only rows < mr and columns < nr of C exist. The full tile is computed into a buffer first.
HWY_NOINLINE void MicroKernelEdge(size_t kc, const float* HWY_RESTRICT a, const float* HWY_RESTRICT b,
                                float* HWY_RESTRICT c, int64_t ldc, bool accumulate, size_t mr, size_t nr) {
  HWY_ALIGN float tile[kMR * kNR];
  MicroKernel(kc, a, b, tile, kNR, false);
  for (size_t r = 0; r < mr; ++r) {
    float* dst = c + (int64_t)r * ldc;
    const float* src = tile + r * kNR;
    if (accumulate) {
      for (size_t j = 0; j < nr; ++j) dst[j] += src[j];
    } else {
      for (size_t j = 0; j < nr; ++j) dst[j] = src[j];
    }
  }
}

}  // namespace rbee::cpu::gemm_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // RBEE_GEMM_MICRO_INL_H_ toggle
