// SIMD row kernels for softmax and sums (declared in simd_reduce.h). Compiled once per Highway target through
// foreach_target; the exported entry points pick the best target at run time, once per call (not per row).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/simd_reduce.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backends/cpu/simd_reduce.h"

HWY_BEFORE_NAMESPACE();
namespace rbee::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace {

// Elements per block whose exponentials are summed in vector lanes of T before the block's total joins the
// double accumulator: short enough that f32 lane sums of values in [0, 1] stay accurate to a few ulp.
constexpr int64_t kSumBlock = 1024;

template <class T>
void softmax_rows_impl(const T* x, T* out, int64_t rows, int64_t n) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t lanes = (int64_t)hn::Lanes(d);
  const int64_t body = n - n % lanes;  // elements handled as whole vectors
  const int64_t tail = n - body;       // the rest goes through `buf`, padded with -inf (exp(-inf) = 0)
  HWY_ALIGN T buf[HWY_MAX_BYTES / sizeof(T)];
  const T neg_inf = -std::numeric_limits<T>::infinity();

  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    T* yr = out + r * n;

    V vtail = hn::Set(d, neg_inf);
    if (tail) {
      hn::Store(vtail, d, buf);
      std::memcpy(buf, xr + body, (size_t)tail * sizeof(T));
      vtail = hn::Load(d, buf);
    }
    // Pass 1: the row maximum, and whether any NaN is present (Max does not propagate NaN on every target).
    V vmax = vtail;
    auto has_nan = hn::IsNaN(vtail);
    for (int64_t i = 0; i < body; i += lanes) {
      const V v = hn::LoadU(d, xr + i);
      vmax = hn::Max(vmax, v);
      has_nan = hn::Or(has_nan, hn::IsNaN(v));
    }
    const T m = hn::GetLane(hn::MaxOfLanes(d, vmax));
    if (!hn::AllFalse(d, has_nan) || !std::isfinite(m)) {
      for (int64_t i = 0; i < n; ++i) yr[i] = std::numeric_limits<T>::quiet_NaN();
      continue;
    }

    // Pass 2: e = exp(x - m) (every e <= 1, the maximum gives exactly 1), stored to out and summed.
    const V vm = hn::Set(d, m);
    double total = 0.0;
    for (int64_t b = 0; b < body; b += kSumBlock) {
      const int64_t end = std::min(body, b + kSumBlock);
      V acc0 = hn::Zero(d), acc1 = hn::Zero(d);
      int64_t i = b;
      for (; i + 2 * lanes <= end; i += 2 * lanes) {
        const V e0 = hn::Exp(d, hn::Sub(hn::LoadU(d, xr + i), vm));
        const V e1 = hn::Exp(d, hn::Sub(hn::LoadU(d, xr + i + lanes), vm));
        hn::StoreU(e0, d, yr + i);
        hn::StoreU(e1, d, yr + i + lanes);
        acc0 = hn::Add(acc0, e0);
        acc1 = hn::Add(acc1, e1);
      }
      for (; i < end; i += lanes) {
        const V e = hn::Exp(d, hn::Sub(hn::LoadU(d, xr + i), vm));
        hn::StoreU(e, d, yr + i);
        acc0 = hn::Add(acc0, e);
      }
      total += (double)hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0, acc1)));
    }
    if (tail) {
      const V e = hn::Exp(d, hn::Sub(vtail, vm));
      hn::Store(e, d, buf);
      std::memcpy(yr + body, buf, (size_t)tail * sizeof(T));
      total += (double)hn::GetLane(hn::SumOfLanes(d, e));
    }

    // Pass 3: normalize (total >= 1, so the reciprocal is finite).
    const T scale = (T)(1.0 / total);
    const V vs = hn::Set(d, scale);
    for (int64_t i = 0; i < body; i += lanes) hn::StoreU(hn::Mul(hn::LoadU(d, yr + i), vs), d, yr + i);
    for (int64_t i = body; i < n; ++i) yr[i] *= scale;
  }
}

// Sum of n floats in double lanes: each f32 vector half is widened exactly, so only the final rounding is lost.
double sum_f32_in_f64(const float* x, int64_t n) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;  // as many floats as dd has doubles
  const int64_t lanes = (int64_t)hn::Lanes(dd);
  auto acc0 = hn::Zero(dd), acc1 = hn::Zero(dd);
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    acc0 = hn::Add(acc0, hn::PromoteTo(dd, hn::LoadU(df, x + i)));
    acc1 = hn::Add(acc1, hn::PromoteTo(dd, hn::LoadU(df, x + i + lanes)));
  }
  double total = hn::GetLane(hn::SumOfLanes(dd, hn::Add(acc0, acc1)));
  for (; i < n; ++i) total += (double)x[i];
  return total;
}

double sum_f64(const double* x, int64_t n) {
  const hn::ScalableTag<double> dd;
  const int64_t lanes = (int64_t)hn::Lanes(dd);
  auto acc0 = hn::Zero(dd), acc1 = hn::Zero(dd);
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    acc0 = hn::Add(acc0, hn::LoadU(dd, x + i));
    acc1 = hn::Add(acc1, hn::LoadU(dd, x + i + lanes));
  }
  double total = hn::GetLane(hn::SumOfLanes(dd, hn::Add(acc0, acc1)));
  for (; i < n; ++i) total += x[i];
  return total;
}

// Rows are taken four at a time so that the accumulators are read and written once per four rows.
template <class T>
void add_rows_impl(const T* x, int64_t rows, int64_t stride, int64_t len, double* acc) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<T, decltype(dd)> dt;  // as many T as dd has doubles
  const int64_t lanes = (int64_t)hn::Lanes(dd);
  const int64_t body = len - len % lanes;
  auto widen = [&](const T* p) {
    if constexpr (std::is_same_v<T, float>) return hn::PromoteTo(dd, hn::LoadU(dt, p));
    else return hn::LoadU(dd, p);
  };
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const T* r0 = x + r * stride;
    const T* r1 = r0 + stride;
    const T* r2 = r1 + stride;
    const T* r3 = r2 + stride;
    for (int64_t c = 0; c < body; c += lanes) {
      const auto sum4 = hn::Add(hn::Add(widen(r0 + c), widen(r1 + c)), hn::Add(widen(r2 + c), widen(r3 + c)));
      hn::StoreU(hn::Add(hn::LoadU(dd, acc + c), sum4), dd, acc + c);
    }
    for (int64_t c = body; c < len; ++c) {
      acc[c] += ((double)r0[c] + (double)r1[c]) + ((double)r2[c] + (double)r3[c]);
    }
  }
  for (; r < rows; ++r) {
    const T* row = x + r * stride;
    for (int64_t c = 0; c < body; c += lanes) hn::StoreU(hn::Add(hn::LoadU(dd, acc + c), widen(row + c)), dd, acc + c);
    for (int64_t c = body; c < len; ++c) acc[c] += (double)row[c];
  }
}

}  // namespace

void ReduceSoftmaxRowsF32(const float* x, float* out, int64_t rows, int64_t n) { softmax_rows_impl(x, out, rows, n); }
void ReduceSoftmaxRowsF64(const double* x, double* out, int64_t rows, int64_t n) {
  softmax_rows_impl(x, out, rows, n);
}
void ReduceSumRowsF32(const float* x, int64_t rows, int64_t n, float* out) {
  for (int64_t r = 0; r < rows; ++r) out[r] = (float)sum_f32_in_f64(x + r * n, n);
}
void ReduceSumRowsF64(const double* x, int64_t rows, int64_t n, double* out) {
  for (int64_t r = 0; r < rows; ++r) out[r] = sum_f64(x + r * n, n);
}

void ReduceAddRowsF32(const float* x, int64_t rows, int64_t stride, int64_t len, double* acc) {
  add_rows_impl(x, rows, stride, len, acc);
}
void ReduceAddRowsF64(const double* x, int64_t rows, int64_t stride, int64_t len, double* acc) {
  add_rows_impl(x, rows, stride, len, acc);
}

}  // namespace rbee::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rbee::cpu {
HWY_EXPORT(ReduceSoftmaxRowsF32);
HWY_EXPORT(ReduceSoftmaxRowsF64);
HWY_EXPORT(ReduceSumRowsF32);
HWY_EXPORT(ReduceSumRowsF64);
HWY_EXPORT(ReduceAddRowsF32);
HWY_EXPORT(ReduceAddRowsF64);

void softmax_rows(const float* x, float* out, int64_t rows, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ReduceSoftmaxRowsF32)(x, out, rows, n);
}
void softmax_rows(const double* x, double* out, int64_t rows, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ReduceSoftmaxRowsF64)(x, out, rows, n);
}
void sum_rows(const float* x, int64_t rows, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(ReduceSumRowsF32)(x, rows, n, out);
}
void sum_rows(const double* x, int64_t rows, int64_t n, double* out) {
  HWY_DYNAMIC_DISPATCH(ReduceSumRowsF64)(x, rows, n, out);
}
void add_rows(const float* x, int64_t rows, int64_t stride, int64_t len, double* acc) {
  HWY_DYNAMIC_DISPATCH(ReduceAddRowsF32)(x, rows, stride, len, acc);
}
void add_rows(const double* x, int64_t rows, int64_t stride, int64_t len, double* acc) {
  HWY_DYNAMIC_DISPATCH(ReduceAddRowsF64)(x, rows, stride, len, acc);
}
}  // namespace rbee::cpu
#endif
