// Blocked GEMM for the convolution kernels (contract in conv_gemm.h), compiled for every Highway target and
// dispatched once per call.
//
// BLIS-style loops around a register-tiled micro-kernel: B is packed in KC x NC blocks as panels of NR columns,
// A in MC x KC blocks as panels of MR rows; the micro-kernel multiplies one MR x KC panel of A by one KC x NR
// panel of B (both L1-resident, the A block L2-resident) into MR x NR accumulators held in registers, NR being two
// SIMD vectors. Panels are zero-padded at the edges so the micro-kernel always runs full width.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/conv_gemm.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/aligned_allocator.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/conv_gemm.h"

HWY_BEFORE_NAMESPACE();
namespace rbee::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class T>
struct ConvGemm {
  using D = hn::ScalableTag<T>;
  using V = hn::Vec<D>;
  static constexpr int64_t kMR = 6;          // rows of the register tile (12 accumulators + 3 temporaries)
  static constexpr int64_t kKC = 256;        // depth of one packed block
  static constexpr int64_t kMC = 16 * kMR;   // rows of one packed A block
  static constexpr int64_t kNCPanels = 64;   // columns of one packed B block, in NR panels
  static constexpr size_t kMaxNR = 2 * hn::MaxLanes(D());

  // bp[p][k][j] = b[k][p * nr + j] for k < kc, zero beyond column nc. nr is two vectors. Reads b row by row
  // (sequential, prefetcher-friendly: b is usually a column buffer larger than L2).
  static void pack_b(int64_t kc, int64_t nc, int64_t nr, const T* b, int64_t ldb, T* HWY_RESTRICT bp) {
    const D d;
    const int64_t L = (int64_t)hn::Lanes(d);
    const int64_t full = nc / nr * nr, panel = kc * nr;
    for (int64_t k = 0; k < kc; ++k) {
      const T* src = b + k * ldb;
      T* dst = bp + k * nr;
      for (int64_t p = 0; p < full; p += nr, dst += panel) {
        hn::Store(hn::LoadU(d, src + p), d, dst);
        hn::Store(hn::LoadU(d, src + p + L), d, dst + L);
      }
      if (full < nc) {
        for (int64_t j = 0; j < nr; ++j) dst[j] = full + j < nc ? src[full + j] : T(0);
      }
    }
  }

  // ap[p][k][r] = a[p * MR + r][k] for k < kc, zero beyond row mc.
  static void pack_a(int64_t mc, int64_t kc, const T* a, int64_t lda, T* HWY_RESTRICT ap) {
    for (int64_t p = 0; p < mc; p += kMR) {
      const int64_t h = std::min(kMR, mc - p);
      for (int64_t r = 0; r < h; ++r) {
        const T* src = a + (p + r) * lda;
        for (int64_t k = 0; k < kc; ++k) ap[k * kMR + r] = src[k];
      }
      for (int64_t r = h; r < kMR; ++r) {
        for (int64_t k = 0; k < kc; ++k) ap[k * kMR + r] = T(0);
      }
      ap += kc * kMR;
    }
  }

  // c[0:mr, 0:nr] (=|+=) ap (MR x kc panel) . bp (kc x NR panel).
  static HWY_INLINE void micro_kernel(int64_t kc, const T* HWY_RESTRICT ap, const T* HWY_RESTRICT bp, T* c,
                                      int64_t ldc, int64_t mr, int64_t nr, bool accumulate) {
    const D d;
    const int64_t L = (int64_t)hn::Lanes(d);
    V c00 = hn::Zero(d), c01 = hn::Zero(d), c10 = hn::Zero(d), c11 = hn::Zero(d), c20 = hn::Zero(d),
      c21 = hn::Zero(d), c30 = hn::Zero(d), c31 = hn::Zero(d), c40 = hn::Zero(d), c41 = hn::Zero(d),
      c50 = hn::Zero(d), c51 = hn::Zero(d);
    for (int64_t k = 0; k < kc; ++k) {
      const V b0 = hn::Load(d, bp), b1 = hn::Load(d, bp + L);
      V a = hn::Set(d, ap[0]);
      c00 = hn::MulAdd(a, b0, c00), c01 = hn::MulAdd(a, b1, c01);
      a = hn::Set(d, ap[1]);
      c10 = hn::MulAdd(a, b0, c10), c11 = hn::MulAdd(a, b1, c11);
      a = hn::Set(d, ap[2]);
      c20 = hn::MulAdd(a, b0, c20), c21 = hn::MulAdd(a, b1, c21);
      a = hn::Set(d, ap[3]);
      c30 = hn::MulAdd(a, b0, c30), c31 = hn::MulAdd(a, b1, c31);
      a = hn::Set(d, ap[4]);
      c40 = hn::MulAdd(a, b0, c40), c41 = hn::MulAdd(a, b1, c41);
      a = hn::Set(d, ap[5]);
      c50 = hn::MulAdd(a, b0, c50), c51 = hn::MulAdd(a, b1, c51);
      ap += kMR;
      bp += 2 * L;
    }
    const bool full = mr == kMR && nr == 2 * L;
    HWY_ALIGN T tile[kMR * kMaxNR];
    // Row r of the register tile goes straight to c when the tile is whole, through `tile` at the edges.
    auto put = [&](int64_t r, V v0, V v1) {
      T* row = c + r * ldc;
      if (!full) {
        hn::Store(v0, d, tile + r * 2 * L);
        hn::Store(v1, d, tile + r * 2 * L + L);
      } else if (accumulate) {
        hn::StoreU(hn::Add(hn::LoadU(d, row), v0), d, row);
        hn::StoreU(hn::Add(hn::LoadU(d, row + L), v1), d, row + L);
      } else {
        hn::StoreU(v0, d, row);
        hn::StoreU(v1, d, row + L);
      }
    };
    put(0, c00, c01);
    put(1, c10, c11);
    put(2, c20, c21);
    put(3, c30, c31);
    put(4, c40, c41);
    put(5, c50, c51);
    if (full) return;
    for (int64_t r = 0; r < mr; ++r) {
      T* row = c + r * ldc;
      const T* t = tile + r * 2 * L;
      if (accumulate) {
        for (int64_t j = 0; j < nr; ++j) row[j] += t[j];
      } else {
        for (int64_t j = 0; j < nr; ++j) row[j] = t[j];
      }
    }
  }

  static void run(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
                  int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
      return;
    }
    const int64_t nr = 2 * (int64_t)hn::Lanes(D());
    const int64_t nc_max = kNCPanels * nr;
    const int64_t kc_alloc = std::min(k, kKC);
    const int64_t nc_alloc = std::min((n + nr - 1) / nr * nr, nc_max);
    const int64_t mc_alloc = std::min((m + kMR - 1) / kMR * kMR, kMC);
    auto bp = hwy::AllocateAligned<T>((size_t)(kc_alloc * nc_alloc));
    auto ap = hwy::AllocateAligned<T>((size_t)(kc_alloc * mc_alloc));
    for (int64_t jc = 0; jc < n; jc += nc_max) {
      const int64_t nc = std::min(nc_max, n - jc);
      for (int64_t pc = 0; pc < k; pc += kKC) {
        const int64_t kc = std::min(kKC, k - pc);
        pack_b(kc, nc, nr, b + pc * ldb + jc, ldb, bp.get());
        for (int64_t ic = 0; ic < m; ic += kMC) {
          const int64_t mc = std::min(kMC, m - ic);
          pack_a(mc, kc, a + ic * lda + pc, lda, ap.get());
          for (int64_t jr = 0; jr < nc; jr += nr) {
            const T* b_panel = bp.get() + (jr / nr) * kc * nr;
            for (int64_t ir = 0; ir < mc; ir += kMR) {
              micro_kernel(kc, ap.get() + (ir / kMR) * kc * kMR, b_panel, c + (ic + ir) * ldc + jc + jr, ldc,
                           std::min(kMR, mc - ir), std::min(nr, nc - jr), pc > 0);
            }
          }
        }
      }
    }
  }
};

void GemmF32(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
             int64_t ldc) {
  ConvGemm<float>::run(m, n, k, a, lda, b, ldb, c, ldc);
}
void GemmF64(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb,
             double* c, int64_t ldc) {
  ConvGemm<double>::run(m, n, k, a, lda, b, ldb, c, ldc);
}

}  // namespace rbee::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rbee::cpu {
HWY_EXPORT(GemmF32);
HWY_EXPORT(GemmF64);

void conv_gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
               int64_t ldc) {
  HWY_DYNAMIC_DISPATCH(GemmF32)(m, n, k, a, lda, b, ldb, c, ldc);
}
void conv_gemm(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb, double* c,
               int64_t ldc) {
  HWY_DYNAMIC_DISPATCH(GemmF64)(m, n, k, a, lda, b, ldb, c, ldc);
}
}  // namespace rbee::cpu
#endif
