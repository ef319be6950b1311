// Per-target GEMM for a small M (the decode case: one to a few rows against a large B), without packing B.
// Included once per Highway target by gemm_kernels.cpp.
//
// Packing B would cost as much memory traffic as the whole product, so B is streamed once, in place:
//   dot form  (B's rows step 1 along K, e.g. the transpose of a [N, K] weight): C[i, j] = dot(A row i, B col j)
//   axpy form (B's columns adjacent, a row-major [K, N] B): C row i += A[i, p] * B row p, four B rows a pass
// A (M x K, small) is read as contiguous f32 rows; the caller converts it first when it is not.

#if defined(RBEE_GEMM_SMALL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RBEE_GEMM_SMALL_INL_H_
#undef RBEE_GEMM_SMALL_INL_H_
#else
#define RBEE_GEMM_SMALL_INL_H_
#endif

#include <algorithm>

#include "backends/cpu/gemm_convert-inl.h"
#include "rbee/core/error.h"

HWY_BEFORE_NAMESPACE();
namespace rbee::cpu::gemm_detail::HWY_NAMESPACE {

// Largest M the small path takes.
inline constexpr int64_t kSmallM = 8;

// The small problem: A rows at a + i * lda (f32, contiguous along K); B element (p, j) at b + p * b_rs + j * b_cs;
// C element (i, j) at c + i * c_rs + j * c_cs. M <= kSmallM.
template <class TB, class TC>
struct SmallProblem {
  size_t m, n, k;
  const float* a;
  int64_t lda;
  const TB* b;
  int64_t b_rs, b_cs;
  TC* c;
  int64_t c_rs, c_cs;
  bool accumulate;
};

template <class TC>
HWY_INLINE void StoreOne(TC* dst, float v, bool accumulate) {
  *dst = FromF32<TC>(accumulate ? ToF32(*dst) + v : v);
}

// ---- dot form: B column j is contiguous along K at b + j * b_cs ----

// R rows x CN columns of C, each a full dot product over K; B columns are read once per tile.
template <size_t R, size_t CN, class TB, class TC>
HWY_INLINE void DotTile(const SmallProblem<TB, TC>& q, size_t i0, size_t j0) {
  const DF df;
  VF acc[R][CN];
  for (size_t r = 0; r < R; ++r) {
    for (size_t j = 0; j < CN; ++j) acc[r][j] = hn::Zero(df);
  }
  const float* a = q.a + (int64_t)i0 * q.lda;
  const TB* b = q.b + (int64_t)j0 * q.b_cs;
  size_t p = 0;
  for (; p + kLanes <= q.k; p += kLanes) {
    VF av[R];
    for (size_t r = 0; r < R; ++r) av[r] = hn::LoadU(df, a + r * q.lda + p);
    for (size_t j = 0; j < CN; ++j) {
      const VF bv = LoadF32(df, b + (int64_t)j * q.b_cs + p);
      for (size_t r = 0; r < R; ++r) acc[r][j] = hn::MulAdd(av[r], bv, acc[r][j]);
    }
  }
  for (size_t r = 0; r < R; ++r) {
    for (size_t j = 0; j < CN; ++j) {
      float sum = hn::GetLane(hn::SumOfLanes(df, acc[r][j]));
      for (size_t t = p; t < q.k; ++t) sum += a[r * q.lda + t] * ToF32(b[(int64_t)j * q.b_cs + t]);
      StoreOne(q.c + (int64_t)(i0 + r) * q.c_rs + (int64_t)(j0 + j) * q.c_cs, sum, q.accumulate);
    }
  }
}

// Rows [0, m) x columns [j0, j1) in tiles of R rows (R <= 4) by CN columns.
template <size_t R, size_t CN, class TB, class TC>
HWY_INLINE void DotRows(const SmallProblem<TB, TC>& q, size_t i0, size_t j0, size_t j1) {
  size_t j = j0;
  for (; j + CN <= j1; j += CN) DotTile<R, CN>(q, i0, j);
  for (; j < j1; ++j) DotTile<R, 1>(q, i0, j);
}

template <class TB, class TC>
HWY_NOINLINE void DotColumns(const SmallProblem<TB, TC>& q, size_t j0, size_t j1) {
  // Column blocks small enough that their B columns stay in L2 while each row group reads them.
  const size_t block = std::max<size_t>(12, (size_t)(256 * 1024) / std::max<size_t>(1, q.k * sizeof(TB)));
  for (size_t jb = j0; jb < j1; jb += block) {
    const size_t je = std::min(j1, jb + block);
    size_t i = 0;
    for (; i + 4 <= q.m; i += 4) DotRows<4, 2>(q, i, jb, je);
    switch (q.m - i) {
      case 3: DotRows<3, 3>(q, i, jb, je); break;
      case 2: DotRows<2, 4>(q, i, jb, je); break;
      case 1: DotRows<1, 8>(q, i, jb, je); break;
      default: break;
    }
  }
}

// ---- axpy form: B row p is contiguous along N at b + p * b_rs ----

// One pass over B rows [p, p + S) (S <= 4) for R rows of A: part[i][j] += sum_s a[i][p + s] * B[p + s][j0 + j]
// for j < n. B is read as S sequential streams; the partial sums (R x n f32) stay in L1/L2.
template <size_t R, size_t S, class TB, class TC>
HWY_INLINE void AxpyStep(const SmallProblem<TB, TC>& q, size_t p, size_t j0, size_t n, float* HWY_RESTRICT part,
                         size_t ldp) {
  const DF df;
  const TB* b[S];
  for (size_t s = 0; s < S; ++s) b[s] = q.b + (int64_t)(p + s) * q.b_rs + (int64_t)j0;
  VF av[R][S];
  for (size_t i = 0; i < R; ++i) {
    for (size_t s = 0; s < S; ++s) av[i][s] = hn::Set(df, q.a[(int64_t)i * q.lda + (int64_t)(p + s)]);
  }
  size_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    VF bv[S];
    for (size_t s = 0; s < S; ++s) bv[s] = LoadF32(df, b[s] + j);
    for (size_t i = 0; i < R; ++i) {
      VF acc = hn::LoadU(df, part + i * ldp + j);
      for (size_t s = 0; s < S; ++s) acc = hn::MulAdd(av[i][s], bv[s], acc);
      hn::StoreU(acc, df, part + i * ldp + j);
    }
  }
  for (; j < n; ++j) {
    for (size_t i = 0; i < R; ++i) {
      float sum = part[i * ldp + j];
      for (size_t s = 0; s < S; ++s) sum += q.a[(int64_t)i * q.lda + (int64_t)(p + s)] * ToF32(b[s][j]);
      part[i * ldp + j] = sum;
    }
  }
}

// R rows of C (R <= kSmallM), columns [j0, j0 + n): part[i][j] = sum over all K of a[i][p] * B[p][j0 + j].
template <size_t R, class TB, class TC>
HWY_INLINE void AxpyRows(const SmallProblem<TB, TC>& q, size_t j0, size_t n, float* HWY_RESTRICT part, size_t ldp) {
  for (size_t i = 0; i < R; ++i) std::fill(part + i * ldp, part + i * ldp + n, 0.0f);
  size_t p = 0;
  for (; p + 4 <= q.k; p += 4) AxpyStep<R, 4>(q, p, j0, n, part, ldp);
  for (; p < q.k; ++p) AxpyStep<R, 1>(q, p, j0, n, part, ldp);
}

// Columns [j0, j1) of every row into `part` (m rows of ldp >= j1 - j0 f32 sums); when C is f32 with adjacent
// columns and is not accumulated into, the caller passes C itself. All m (<= 8) rows go in one pass, so B is
// read once.
template <class TB, class TC>
HWY_NOINLINE void AxpyColumns(const SmallProblem<TB, TC>& q, size_t j0, size_t j1, float* HWY_RESTRICT part,
                              size_t ldp) {
  const size_t n = j1 - j0;
  switch (q.m) {
    case 1: return AxpyRows<1>(q, j0, n, part, ldp);
    case 2: return AxpyRows<2>(q, j0, n, part, ldp);
    case 3: return AxpyRows<3>(q, j0, n, part, ldp);
    case 4: return AxpyRows<4>(q, j0, n, part, ldp);
    case 5: return AxpyRows<5>(q, j0, n, part, ldp);
    case 6: return AxpyRows<6>(q, j0, n, part, ldp);
    case 7: return AxpyRows<7>(q, j0, n, part, ldp);
    case 8: return AxpyRows<8>(q, j0, n, part, ldp);
    default: RBEE_ASSERT(false, "gemm small path: {} rows", q.m);
  }
}

}  // namespace rbee::cpu::gemm_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // RBEE_GEMM_SMALL_INL_H_ toggle
