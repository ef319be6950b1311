// Per-target GEMM for a small M (the decode case: one to a few rows against a large B), without packing B.
// Included once per Highway target by gemm_kernels.cpp.
//
// Packing B would cost as much memory traffic as the whole product, so B is streamed once, in place:
//   dot form  (B's rows step 1 along K, e.g. the transpose of a [N, K] weight): C[i, j] = dot(A row i, B col j)
//   axpy form (B's columns adjacent, a row-major [K, N] B): C row i += A[i, p] * B row p, in K blocks
// A (M x K, small) is read as contiguous f32 rows; the caller converts it first when it is not.

#if defined(RBEE_GEMM_SMALL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RBEE_GEMM_SMALL_INL_H_
#undef RBEE_GEMM_SMALL_INL_H_
#else
#define RBEE_GEMM_SMALL_INL_H_
#endif

#include <algorithm>

#include "backends/cpu/gemm_convert-inl.h"

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

// R rows x NV vectors of columns over steps [p0, p1), adding to the f32 partial sums at part (row r at
// part + r * ldp) unless `first`.
template <size_t R, size_t NV, class TB, class TC>
HWY_INLINE void AxpyTile(const SmallProblem<TB, TC>& q, size_t i0, size_t j0, size_t p0, size_t p1,
                         float* HWY_RESTRICT part, size_t ldp, bool first) {
  const DF df;
  VF acc[R][NV];
  for (size_t r = 0; r < R; ++r) {
    for (size_t v = 0; v < NV; ++v) acc[r][v] = first ? hn::Zero(df) : hn::LoadU(df, part + r * ldp + v * kLanes);
  }
  const float* a = q.a + (int64_t)i0 * q.lda;
  const TB* b = q.b + (int64_t)p0 * q.b_rs + (int64_t)j0;
  for (size_t p = p0; p < p1; ++p, b += q.b_rs) {
    VF bv[NV];
    for (size_t v = 0; v < NV; ++v) bv[v] = LoadF32(df, b + v * kLanes);
    for (size_t r = 0; r < R; ++r) {
      const VF av = hn::Set(df, a[r * q.lda + p]);
      for (size_t v = 0; v < NV; ++v) acc[r][v] = hn::MulAdd(av, bv[v], acc[r][v]);
    }
  }
  for (size_t r = 0; r < R; ++r) {
    for (size_t v = 0; v < NV; ++v) hn::StoreU(acc[r][v], df, part + r * ldp + v * kLanes);
  }
}

// Rows [i0, i0 + R) x columns [j0, j1) over steps [p0, p1); part holds these rows' sums for columns from j0.
template <size_t R, size_t NV, class TB, class TC>
HWY_INLINE void AxpyRows(const SmallProblem<TB, TC>& q, size_t i0, size_t j0, size_t j1, size_t p0, size_t p1,
                         float* HWY_RESTRICT part, size_t ldp, bool first) {
  size_t j = j0;
  for (; j + NV * kLanes <= j1; j += NV * kLanes) AxpyTile<R, NV>(q, i0, j, p0, p1, part + (j - j0), ldp, first);
  for (; j + kLanes <= j1; j += kLanes) AxpyTile<R, 1>(q, i0, j, p0, p1, part + (j - j0), ldp, first);
  // fewer than a vector of columns left: scalar
  for (size_t r = 0; r < R; ++r) {
    const float* a = q.a + (int64_t)(i0 + r) * q.lda;
    for (size_t jj = j; jj < j1; ++jj) {
      float sum = first ? 0.0f : part[r * ldp + (jj - j0)];
      for (size_t p = p0; p < p1; ++p) sum += a[p] * ToF32(q.b[(int64_t)p * q.b_rs + (int64_t)jj]);
      part[r * ldp + (jj - j0)] = sum;
    }
  }
}

// Columns [j0, j1) of every row. `part` (m rows of ldp >= j1 - j0 floats) receives the f32 sums; when C is
// f32 with adjacent columns and is not accumulated into, the caller passes C itself.
template <class TB, class TC>
HWY_NOINLINE void AxpyColumns(const SmallProblem<TB, TC>& q, size_t j0, size_t j1, float* HWY_RESTRICT part,
                              size_t ldp) {
  constexpr size_t kBlockK = 256;  // B rows per pass: their pages stay in the TLB across the column strips
  for (size_t p0 = 0; p0 < q.k; p0 += kBlockK) {
    const size_t p1 = std::min(q.k, p0 + kBlockK);
    const bool first = p0 == 0;
    size_t i = 0;
    for (; i + 4 <= q.m; i += 4) AxpyRows<4, 3>(q, i, j0, j1, p0, p1, part + i * ldp, ldp, first);
    switch (q.m - i) {
      case 3: AxpyRows<3, 4>(q, i, j0, j1, p0, p1, part + i * ldp, ldp, first); break;
      case 2: AxpyRows<2, 4>(q, i, j0, j1, p0, p1, part + i * ldp, ldp, first); break;
      case 1: AxpyRows<1, 8>(q, i, j0, j1, p0, p1, part + i * ldp, ldp, first); break;
      default: break;
    }
  }
}

}  // namespace rbee::cpu::gemm_detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // RBEE_GEMM_SMALL_INL_H_ toggle
