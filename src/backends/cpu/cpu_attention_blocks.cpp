// Flash-attention block steps (contracts in cpu_attention_blocks.h).
//
// Scores use register tiles of 4 query rows x 2 keys: each step loads two key vectors and four query vectors
// for 8 FMAs, and the four rows' sums for a key come out of one interleave-and-add reduction (SumsOf4) instead
// of four horizontal sums. The accumulation keeps up to 4 rows x 2 vectors of output in registers while it runs over
// the block's keys, broadcasting each probability. Both read keys and values in place through their row
// strides (no packing).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/cpu_attention_blocks.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/common/attention_math.h"
#include "backends/cpu/cpu_attention_blocks.h"

HWY_BEFORE_NAMESPACE();
namespace rbee::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
// Adds the 128-bit blocks of v: 4 lanes out.
template <class D, class V>
HWY_INLINE auto AddBlocks(D, V v) {
  if constexpr (hn::MaxLanes(D()) > 4) {
    const hn::Half<D> dh;
    return AddBlocks(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  } else {
    return v;
  }
}

// The lane sums of a, b, c, e as the 4 lanes of one vector: two interleave-and-add rounds and a fold of the
// blocks, about a third of the work of four separate horizontal sums.
template <class D, class V>
HWY_INLINE auto SumsOf4(D d, V a, V b, V c, V e) {
  const auto ab = hn::Add(hn::InterleaveLower(d, a, b), hn::InterleaveUpper(d, a, b));  // a02 b02 a13 b13
  const auto ce = hn::Add(hn::InterleaveLower(d, c, e), hn::InterleaveUpper(d, c, e));
  const hn::Repartition<uint64_t, D> d64;
  const auto ab64 = hn::BitCast(d64, ab), ce64 = hn::BitCast(d64, ce);
  const auto lo = hn::BitCast(d, hn::InterleaveLower(d64, ab64, ce64));  // a02 b02 c02 e02
  const auto hi = hn::BitCast(d, hn::InterleaveUpper(d64, ab64, ce64));  // a13 b13 c13 e13
  return AddBlocks(d, hn::Add(lo, hi));
}
#endif  // HWY_TARGET != HWY_SCALAR

// kRows query rows (1..4) against keys k0 and k1 (k1 may equal k0 when only one key is left; then only
// column 0 is written).
template <int kRows>
HWY_INLINE void ScoreTile(const float* q, int64_t qs, const float* k0, const float* k1, bool two, int64_t dim,
                          float* s, int64_t ss) {
  const hn::ScalableTag<float> d;
  const int64_t N = (int64_t)hn::Lanes(d);
  auto a00 = hn::Zero(d), a01 = hn::Zero(d), a10 = hn::Zero(d), a11 = hn::Zero(d);
  auto a20 = hn::Zero(d), a21 = hn::Zero(d), a30 = hn::Zero(d), a31 = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= dim; i += N) {
    const auto v0 = hn::LoadU(d, k0 + i), v1 = hn::LoadU(d, k1 + i);
    const auto x0 = hn::LoadU(d, q + i);
    a00 = hn::MulAdd(x0, v0, a00);
    a01 = hn::MulAdd(x0, v1, a01);
    if constexpr (kRows > 1) {
      const auto x1 = hn::LoadU(d, q + qs + i);
      a10 = hn::MulAdd(x1, v0, a10);
      a11 = hn::MulAdd(x1, v1, a11);
    }
    if constexpr (kRows > 2) {
      const auto x2 = hn::LoadU(d, q + 2 * qs + i);
      a20 = hn::MulAdd(x2, v0, a20);
      a21 = hn::MulAdd(x2, v1, a21);
    }
    if constexpr (kRows > 3) {
      const auto x3 = hn::LoadU(d, q + 3 * qs + i);
      a30 = hn::MulAdd(x3, v0, a30);
      a31 = hn::MulAdd(x3, v1, a31);
    }
  }
  float r0[4], r1[4];
#if HWY_TARGET != HWY_SCALAR
  if constexpr (kRows == 4) {
    const auto sums0 = SumsOf4(d, a00, a10, a20, a30);
    const hn::DFromV<decltype(sums0)> d4;
    hn::StoreU(sums0, d4, r0);
    hn::StoreU(SumsOf4(d, a01, a11, a21, a31), d4, r1);
  } else  // NOLINT(readability/braces)
#endif
  {
    const decltype(a00) acc0[4] = {a00, a10, a20, a30}, acc1[4] = {a01, a11, a21, a31};
    for (int r = 0; r < kRows; ++r) {
      r0[r] = hn::GetLane(hn::SumOfLanes(d, acc0[r]));
      r1[r] = hn::GetLane(hn::SumOfLanes(d, acc1[r]));
    }
  }
  for (; i < dim; ++i) {
    for (int r = 0; r < kRows; ++r) {
      r0[r] += q[r * qs + i] * k0[i];
      r1[r] += q[r * qs + i] * k1[i];
    }
  }
  for (int r = 0; r < kRows; ++r) {
    s[r * ss] = r0[r];
    if (two) s[r * ss + 1] = r1[r];
  }
}

template <int kRows>
HWY_INLINE void ScoreRows(const float* q, int64_t qs, const float* k, int64_t ks, int64_t nk, int64_t dim, float* s,
                          int64_t ss) {
  int64_t j = 0;
  for (; j + 2 <= nk; j += 2) ScoreTile<kRows>(q, qs, k + j * ks, k + (j + 1) * ks, true, dim, s + j, ss);
  if (j < nk) ScoreTile<kRows>(q, qs, k + j * ks, k + j * ks, false, dim, s + j, ss);
}

void AttnScoresF32(const float* q, int64_t qs, int64_t rows, const float* k, int64_t ks, int64_t nk, int64_t dim,
                   float* s, int64_t ss) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) ScoreRows<4>(q + r * qs, qs, k, ks, nk, dim, s + r * ss, ss);
  switch (rows - r) {
    case 3: ScoreRows<3>(q + r * qs, qs, k, ks, nk, dim, s + r * ss, ss); break;
    case 2: ScoreRows<2>(q + r * qs, qs, k, ks, nk, dim, s + r * ss, ss); break;
    case 1: ScoreRows<1>(q + r * qs, qs, k, ks, nk, dim, s + r * ss, ss); break;
    default: break;
  }
}

void AttnSoftmaxStepF32(float* s, int64_t ss, int64_t rows, int64_t nk, const int32_t* lo, const int32_t* hi,
                        float softcap, float* m, float* l, float* alpha) {
  const hn::ScalableTag<float> d;
  const int64_t N = (int64_t)hn::Lanes(d);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * ss;
    const int64_t a = lo[r], b = hi[r];
    if (a >= b) {
      std::fill(row, row + nk, 0.0f);
      alpha[r] = 1.0f;
      continue;
    }
    if (softcap > 0) {
      const auto cap = hn::Set(d, softcap), inv = hn::Set(d, 1.0f / softcap);
      int64_t j = a;
      for (; j + N <= b; j += N) hn::StoreU(hn::Mul(cap, hn::Tanh(d, hn::Mul(hn::LoadU(d, row + j), inv))), d, row + j);
      for (; j < b; ++j) row[j] = softcap * std::tanh(row[j] / softcap);
    }
    auto vmax = hn::Set(d, -std::numeric_limits<float>::infinity());
    int64_t j = a;
    for (; j + N <= b; j += N) vmax = hn::Max(vmax, hn::LoadU(d, row + j));
    float block_max = hn::GetLane(hn::MaxOfLanes(d, vmax));
    for (; j < b; ++j) block_max = std::max(block_max, row[j]);
    const float m_new = std::max(m[r], block_max);
    const float scale_old = std::exp(m[r] - m_new);  // 0 while m[r] is still -inf
    const auto vm = hn::Set(d, m_new);
    auto vsum = hn::Zero(d);
    j = a;
    for (; j + N <= b; j += N) {
      const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, row + j), vm));
      hn::StoreU(e, d, row + j);
      vsum = hn::Add(vsum, e);
    }
    float block_sum = hn::GetLane(hn::SumOfLanes(d, vsum));
    for (; j < b; ++j) {
      row[j] = std::exp(row[j] - m_new);
      block_sum += row[j];
    }
    std::fill(row, row + a, 0.0f);
    std::fill(row + b, row + nk, 0.0f);
    l[r] = l[r] * scale_old + block_sum;
    m[r] = m_new;
    alpha[r] = scale_old;
  }
}

// kRows output rows (1..4) x kVecs vectors (1 or 2) starting at column c.
template <int kRows, int kVecs>
HWY_INLINE void AccumulateTile(const float* p, int64_t ps, const float* v, int64_t vs, int64_t nk, const float* alpha,
                               float* o, int64_t os, int64_t c) {
  const hn::ScalableTag<float> d;
  const int64_t N = (int64_t)hn::Lanes(d);
  auto load = [&](int r, int vec) {
    return hn::Mul(hn::LoadU(d, o + r * os + c + vec * N), hn::Set(d, alpha[r]));
  };
  auto a00 = load(0, 0), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00, a31 = a00;
  if constexpr (kVecs > 1) a01 = load(0, 1);
  if constexpr (kRows > 1) {
    a10 = load(1, 0);
    if constexpr (kVecs > 1) a11 = load(1, 1);
  }
  if constexpr (kRows > 2) {
    a20 = load(2, 0);
    if constexpr (kVecs > 1) a21 = load(2, 1);
  }
  if constexpr (kRows > 3) {
    a30 = load(3, 0);
    if constexpr (kVecs > 1) a31 = load(3, 1);
  }
  for (int64_t j = 0; j < nk; ++j) {
    const float* vj = v + j * vs + c;
    const auto v0 = hn::LoadU(d, vj);
    const auto v1 = kVecs > 1 ? hn::LoadU(d, vj + N) : v0;
    const auto p0 = hn::Set(d, p[j]);
    a00 = hn::MulAdd(p0, v0, a00);
    if constexpr (kVecs > 1) a01 = hn::MulAdd(p0, v1, a01);
    if constexpr (kRows > 1) {
      const auto p1 = hn::Set(d, p[ps + j]);
      a10 = hn::MulAdd(p1, v0, a10);
      if constexpr (kVecs > 1) a11 = hn::MulAdd(p1, v1, a11);
    }
    if constexpr (kRows > 2) {
      const auto p2 = hn::Set(d, p[2 * ps + j]);
      a20 = hn::MulAdd(p2, v0, a20);
      if constexpr (kVecs > 1) a21 = hn::MulAdd(p2, v1, a21);
    }
    if constexpr (kRows > 3) {
      const auto p3 = hn::Set(d, p[3 * ps + j]);
      a30 = hn::MulAdd(p3, v0, a30);
      if constexpr (kVecs > 1) a31 = hn::MulAdd(p3, v1, a31);
    }
  }
  hn::StoreU(a00, d, o + c);
  if constexpr (kVecs > 1) hn::StoreU(a01, d, o + c + N);
  if constexpr (kRows > 1) {
    hn::StoreU(a10, d, o + os + c);
    if constexpr (kVecs > 1) hn::StoreU(a11, d, o + os + c + N);
  }
  if constexpr (kRows > 2) {
    hn::StoreU(a20, d, o + 2 * os + c);
    if constexpr (kVecs > 1) hn::StoreU(a21, d, o + 2 * os + c + N);
  }
  if constexpr (kRows > 3) {
    hn::StoreU(a30, d, o + 3 * os + c);
    if constexpr (kVecs > 1) hn::StoreU(a31, d, o + 3 * os + c + N);
  }
}

template <int kRows>
HWY_INLINE void AccumulateRows(const float* p, int64_t ps, const float* v, int64_t vs, int64_t nk, int64_t dim_v,
                               const float* alpha, float* o, int64_t os) {
  const hn::ScalableTag<float> d;
  const int64_t N = (int64_t)hn::Lanes(d);
  int64_t c = 0;
  for (; c + 2 * N <= dim_v; c += 2 * N) AccumulateTile<kRows, 2>(p, ps, v, vs, nk, alpha, o, os, c);
  for (; c + N <= dim_v; c += N) AccumulateTile<kRows, 1>(p, ps, v, vs, nk, alpha, o, os, c);
  for (; c < dim_v; ++c) {  // columns left over when dim_v is not a multiple of the vector length
    for (int r = 0; r < kRows; ++r) {
      float acc = o[r * os + c] * alpha[r];
      for (int64_t j = 0; j < nk; ++j) acc += p[r * ps + j] * v[j * vs + c];
      o[r * os + c] = acc;
    }
  }
}

void AttnAccumulateF32(const float* p, int64_t ps, int64_t rows, const float* v, int64_t vs, int64_t nk,
                       int64_t dim_v, const float* alpha, float* o, int64_t os) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) AccumulateRows<4>(p + r * ps, ps, v, vs, nk, dim_v, alpha + r, o + r * os, os);
  switch (rows - r) {
    case 3: AccumulateRows<3>(p + r * ps, ps, v, vs, nk, dim_v, alpha + r, o + r * os, os); break;
    case 2: AccumulateRows<2>(p + r * ps, ps, v, vs, nk, dim_v, alpha + r, o + r * os, os); break;
    case 1: AccumulateRows<1>(p + r * ps, ps, v, vs, nk, dim_v, alpha + r, o + r * os, os); break;
    default: break;
  }
}

}  // namespace rbee::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rbee::cpu::attn {
HWY_EXPORT(AttnScoresF32);
HWY_EXPORT(AttnSoftmaxStepF32);
HWY_EXPORT(AttnAccumulateF32);

void scores(const float* q, int64_t q_stride, int64_t rows, const float* k, int64_t k_stride, int64_t nk,
            int64_t dim, float* s, int64_t s_stride) {
  HWY_DYNAMIC_DISPATCH(AttnScoresF32)(q, q_stride, rows, k, k_stride, nk, dim, s, s_stride);
}

void softmax_step(float* s, int64_t s_stride, int64_t rows, int64_t nk, const int32_t* lo, const int32_t* hi,
                  float softcap, float* m, float* l, float* alpha) {
  HWY_DYNAMIC_DISPATCH(AttnSoftmaxStepF32)(s, s_stride, rows, nk, lo, hi, softcap, m, l, alpha);
}

void accumulate(const float* p, int64_t p_stride, int64_t rows, const float* v, int64_t v_stride, int64_t nk,
                int64_t dim_v, const float* alpha, float* o, int64_t o_stride) {
  HWY_DYNAMIC_DISPATCH(AttnAccumulateF32)(p, p_stride, rows, v, v_stride, nk, dim_v, alpha, o, o_stride);
}

void scores(const double* q, int64_t q_stride, int64_t rows, const double* k, int64_t k_stride, int64_t nk,
            int64_t dim, double* s, int64_t s_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < nk; ++j) {
      double acc = 0;
      for (int64_t i = 0; i < dim; ++i) acc += q[r * q_stride + i] * k[j * k_stride + i];
      s[r * s_stride + j] = acc;
    }
  }
}

void softmax_step(double* s, int64_t s_stride, int64_t rows, int64_t nk, const int32_t* lo, const int32_t* hi,
                  double softcap, double* m, double* l, double* alpha) {
  for (int64_t r = 0; r < rows; ++r) {
    double* row = s + r * s_stride;
    const int64_t a = lo[r], b = hi[r];
    if (a >= b) {
      std::fill(row, row + nk, 0.0);
      alpha[r] = 1.0;
      continue;
    }
    double block_max = -std::numeric_limits<double>::infinity();
    for (int64_t j = a; j < b; ++j) {
      row[j] = attention::soft_cap(row[j], softcap);
      block_max = std::max(block_max, row[j]);
    }
    const double m_new = std::max(m[r], block_max);
    const double scale_old = std::exp(m[r] - m_new);
    double block_sum = 0;
    for (int64_t j = a; j < b; ++j) {
      row[j] = std::exp(row[j] - m_new);
      block_sum += row[j];
    }
    std::fill(row, row + a, 0.0);
    std::fill(row + b, row + nk, 0.0);
    l[r] = l[r] * scale_old + block_sum;
    m[r] = m_new;
    alpha[r] = scale_old;
  }
}

void accumulate(const double* p, int64_t p_stride, int64_t rows, const double* v, int64_t v_stride, int64_t nk,
                int64_t dim_v, const double* alpha, double* o, int64_t o_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    double* orow = o + r * o_stride;
    for (int64_t c = 0; c < dim_v; ++c) orow[c] *= alpha[r];
    for (int64_t j = 0; j < nk; ++j) {
      const double pj = p[r * p_stride + j];
      for (int64_t c = 0; c < dim_v; ++c) orow[c] += pj * v[j * v_stride + c];
    }
  }
}

}  // namespace rbee::cpu::attn
#endif  // HWY_ONCE
