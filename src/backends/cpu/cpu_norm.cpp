// CPU normalizations: rms_norm, layer_norm, group_norm (and group_norm_silu) and the fused add_rms_norm.
//
// Each row (or group) is reduced and rescaled by f32 SIMD row functions (Highway, dispatched at run time);
// f16/bf16 rows are widened to f32 first, f64 rows use plain double loops. Rows run in parallel.
// Layer and group norm take the variance as the mean of squared deviations from the mean (two passes),
// which keeps precision when |mean| is large against the spread.
// Attribution: the f32 rms_norm follows the order of operations of ggml / llama.cpp (MIT License; NOTICE).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/cpu_norm.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_nn_util.h"

HWY_BEFORE_NAMESPACE();
namespace rbee::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// sum of (x[i] - shift)^2; shift = 0 gives the sum of squares.
float SumSqDevF32(const float* x, int64_t n, float shift) {
  const hn::ScalableTag<float> d;
  const int64_t N = (int64_t)hn::Lanes(d);
  const auto vs = hn::Set(d, shift);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    const auto v0 = hn::Sub(hn::LoadU(d, x + i), vs);
    const auto v1 = hn::Sub(hn::LoadU(d, x + i + N), vs);
    const auto v2 = hn::Sub(hn::LoadU(d, x + i + 2 * N), vs);
    const auto v3 = hn::Sub(hn::LoadU(d, x + i + 3 * N), vs);
    a0 = hn::MulAdd(v0, v0, a0);
    a1 = hn::MulAdd(v1, v1, a1);
    a2 = hn::MulAdd(v2, v2, a2);
    a3 = hn::MulAdd(v3, v3, a3);
  }
  for (; i + N <= n; i += N) {
    const auto v = hn::Sub(hn::LoadU(d, x + i), vs);
    a0 = hn::MulAdd(v, v, a0);
  }
  float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) s += (x[i] - shift) * (x[i] - shift);
  return s;
}

float SumF32(const float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = (int64_t)hn::Lanes(d);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    a0 = hn::Add(a0, hn::LoadU(d, x + i));
    a1 = hn::Add(a1, hn::LoadU(d, x + i + N));
    a2 = hn::Add(a2, hn::LoadU(d, x + i + 2 * N));
    a3 = hn::Add(a3, hn::LoadU(d, x + i + 3 * N));
  }
  for (; i + N <= n; i += N) a0 = hn::Add(a0, hn::LoadU(d, x + i));
  float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) s += x[i];
  return s;
}

template <bool kWeight, bool kBias>
HWY_INLINE void NormRowImpl(const float* x, float shift, float scale, const float* w, const float* b, float* out,
                            int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = (int64_t)hn::Lanes(d);
  const auto vshift = hn::Set(d, shift), vscale = hn::Set(d, scale);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    auto v = hn::Mul(hn::Sub(hn::LoadU(d, x + i), vshift), vscale);
    if constexpr (kWeight) v = hn::Mul(v, hn::LoadU(d, w + i));
    if constexpr (kBias) v = hn::Add(v, hn::LoadU(d, b + i));
    hn::StoreU(v, d, out + i);
  }
  for (; i < n; ++i) {
    float v = (x[i] - shift) * scale;
    if constexpr (kWeight) v *= w[i];
    if constexpr (kBias) v += b[i];
    out[i] = v;
  }
}

// out = (x - shift) * scale [* w] [+ b]; w and b may be null. out may alias x.
void NormRowF32(const float* x, float shift, float scale, const float* w, const float* b, float* out, int64_t n) {
  if (w && b) NormRowImpl<true, true>(x, shift, scale, w, b, out, n);
  else if (w) NormRowImpl<true, false>(x, shift, scale, w, b, out, n);
  else if (b) NormRowImpl<false, true>(x, shift, scale, w, b, out, n);
  else NormRowImpl<false, false>(x, shift, scale, w, b, out, n);
}

// out = (x - shift) * a + b with scalar a, b (one group-norm channel). out may alias x.
void ShiftScaleAddF32(const float* x, float shift, float a, float b, float* out, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = (int64_t)hn::Lanes(d);
  const auto vs = hn::Set(d, shift), va = hn::Set(d, a), vb = hn::Set(d, b);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::MulAdd(hn::Sub(hn::LoadU(d, x + i), vs), va, vb), d, out + i);
  for (; i < n; ++i) out[i] = (x[i] - shift) * a + b;
}

// out = x + r. out may alias x or r.
void AddF32(const float* x, const float* r, float* out, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = (int64_t)hn::Lanes(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Add(hn::LoadU(d, x + i), hn::LoadU(d, r + i)), d, out + i);
  for (; i < n; ++i) out[i] = x[i] + r[i];
}

}  // namespace rbee::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rbee::cpu {
HWY_EXPORT(SumSqDevF32);
HWY_EXPORT(SumF32);
HWY_EXPORT(NormRowF32);
HWY_EXPORT(ShiftScaleAddF32);
HWY_EXPORT(AddF32);

namespace {

// The row primitives under one name per compute type: f32 through SIMD dispatch, f64 as plain loops.
float sum_sq_dev(const float* x, int64_t n, float shift) { return HWY_DYNAMIC_DISPATCH(SumSqDevF32)(x, n, shift); }
double sum_sq_dev(const double* x, int64_t n, double shift) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += (x[i] - shift) * (x[i] - shift);
  return s;
}
float sum(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(SumF32)(x, n); }
double sum(const double* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}
void norm_row(const float* x, float shift, float scale, const float* w, const float* b, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(NormRowF32)(x, shift, scale, w, b, out, n);
}
void norm_row(const double* x, double shift, double scale, const double* w, const double* b, double* out,
              int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] - shift) * scale * (w ? w[i] : 1.0) + (b ? b[i] : 0.0);
}
void shift_scale_add(const float* x, float shift, float a, float b, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ShiftScaleAddF32)(x, shift, a, b, out, n);
}
void shift_scale_add(const double* x, double shift, double a, double b, double* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] - shift) * a + b;
}
void add(const float* x, const float* r, float* out, int64_t n) { HWY_DYNAMIC_DISPATCH(AddF32)(x, r, out, n); }
void add(const double* x, const double* r, double* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] + r[i];
}

// 1 / sqrt(mean(x^2) + eps) of one row. f32 rows follow ggml's CPU rms_norm (llama.cpp's numerics): the f32
// squares summed in order in double, the mean rounded to f32, then 1 / sqrtf in f32. The row is short (the
// hidden size) against the matmuls around every norm, so the serial double sum costs nothing measurable.
float rms_rstd(const float* x, int64_t n, float eps) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += (double)(x[i] * x[i]);
  const float mean = (float)(s / (double)n);
  return 1.0f / std::sqrt(mean + eps);
}
double rms_rstd(const double* x, int64_t n, float eps) { return 1.0 / std::sqrt(sum_sq_dev(x, n, 0.0) / (double)n + eps); }

// A row of T as compute-type values: the row itself for f32/f64, a widened copy in scratch `slot` for 16-bit.
template <class T>
const nn_compute_t<T>* input_row(const T* src, int64_t n, int slot) {
  if constexpr (is_half_v<T>) {
    float* buf = scratch<float>(slot, (size_t)n);
    load_row(src, buf, n);
    return buf;
  } else {
    return src;
  }
}
// Where a kernel writes an output row: the destination itself, or scratch `slot` to be narrowed by finish_row.
template <class T>
nn_compute_t<T>* output_row(T* dst, int64_t n, int slot) {
  if constexpr (is_half_v<T>) return scratch<float>(slot, (size_t)n);
  else return dst;
}
template <class T>
void finish_row(const nn_compute_t<T>* row, T* dst, int64_t n) {
  if constexpr (is_half_v<T>) store_row(row, dst, n);
}

// x, out [rows, n] contiguous (n = last dim). Each row: out = (x - mean) * rstd * w + b, where mean is 0 for
// the RMS variant and rstd = 1 / sqrt(mean((x - mean)^2) + eps).
template <class T>
void normalize_rows(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps, bool rms, Tensor& out) {
  using C = nn_compute_t<T>;
  const int64_t n = x.rank() == 0 ? 1 : x.dim(-1);
  if (n == 0 || x.numel() == 0) return;
  const int64_t rows = x.numel() / n;
  const T* px = static_cast<const T*>(x.data());
  T* po = static_cast<T*>(out.data());
  const std::vector<C> w = widened_vector<T>(weight), b = widened_vector<T>(bias);
  const C* pw = w.empty() ? nullptr : w.data();
  const C* pb = b.empty() ? nullptr : b.data();
  parallel_rows(rows, n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const C* xr = input_row(px + r * n, n, 0);
      C* orow = output_row(po + r * n, n, 0);  // the same slot: norm_row works in place
      const C mean = rms ? C(0) : sum(xr, n) / C(n);
      const C rstd = rms ? rms_rstd(xr, n, eps) : C(1) / std::sqrt(sum_sq_dev(xr, n, mean) / C(n) + C(eps));
      norm_row(xr, mean, rstd, pw, pb, orow, n);
      finish_row(orow, po + r * n, n);
    }
  });
}

// x, out [N, C, S] contiguous; each of N * groups groups is (C / groups) * S consecutive values.
// silu: out = silu(normalized value), applied in the compute type before the row is stored.
template <class T>
void group_normalize(const Tensor& x, int groups, const Tensor* weight, const Tensor* bias, float eps, bool silu,
                     Tensor& out) {
  using C = nn_compute_t<T>;
  const int64_t batch = x.dim(0), channels = x.dim(1), spatial = x.dim(2);
  const int64_t per_group = channels / groups;
  const int64_t chunk = per_group * spatial;
  if (chunk == 0 || batch == 0) return;
  const T* px = static_cast<const T*>(x.data());
  T* po = static_cast<T*>(out.data());
  const std::vector<C> w = widened_vector<T>(weight), b = widened_vector<T>(bias);
  parallel_rows(batch * groups, chunk, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const C* xg = input_row(px + t * chunk, chunk, 0);
      C* og = output_row(po + t * chunk, chunk, 0);
      const C mean = sum(xg, chunk) / C(chunk);
      const C rstd = C(1) / std::sqrt(sum_sq_dev(xg, chunk, mean) / C(chunk) + C(eps));
      const int64_t first_channel = (t % groups) * per_group;
      for (int64_t c = 0; c < per_group; ++c) {
        const C a = rstd * (w.empty() ? C(1) : w[first_channel + c]);
        const C shift_b = b.empty() ? C(0) : b[first_channel + c];
        shift_scale_add(xg + c * spatial, mean, a, shift_b, og + c * spatial, spatial);
      }
      if (silu) {
        for (int64_t i = 0; i < chunk; ++i) og[i] = og[i] / (C(1) + std::exp(-og[i]));
      }
      finish_row(og, po + t * chunk, chunk);
    }
  });
}

// All [rows, n] contiguous: sum = x + residual (stored as T), norm = rms_norm(stored sum) * weight.
template <class T>
void add_rms_rows(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps, Tensor& sum_out,
                  Tensor& norm_out) {
  using C = nn_compute_t<T>;
  const int64_t n = x.rank() == 0 ? 1 : x.dim(-1);
  if (n == 0 || x.numel() == 0) return;
  const int64_t rows = x.numel() / n;
  const T* px = static_cast<const T*>(x.data());
  const T* pr = static_cast<const T*>(residual.data());
  T* ps = static_cast<T*>(sum_out.data());
  T* pn = static_cast<T*>(norm_out.data());
  const std::vector<C> w = widened_vector<T>(&weight);
  parallel_rows(rows, n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const C* xr = input_row(px + r * n, n, 0);
      const C* rr = input_row(pr + r * n, n, 1);
      C* sr = output_row(ps + r * n, n, 0);
      add(xr, rr, sr, n);
      finish_row(sr, ps + r * n, n);
      // The norm reads the sum as stored, so it matches rms_norm applied to sum_out.
      const C* stored = input_row(ps + r * n, n, 0);
      C* nr = output_row(pn + r * n, n, 1);
      const C rstd = rms_rstd(stored, n, eps);
      norm_row(stored, C(0), rstd, w.data(), nullptr, nr, n);
      finish_row(nr, pn + r * n, n);
    }
  });
}

}  // namespace

void CpuKernels::rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) {
  visit_float_dtype(x.dtype(), [&](auto tag) { normalize_rows<decltype(tag)>(x, weight, nullptr, eps, true, out); });
}

void CpuKernels::layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps, Tensor& out) {
  visit_float_dtype(x.dtype(), [&](auto tag) { normalize_rows<decltype(tag)>(x, weight, bias, eps, false, out); });
}

void CpuKernels::group_norm(const Tensor& x, int groups, const Tensor* weight, const Tensor* bias, float eps,
                            Tensor& out) {
  visit_float_dtype(x.dtype(),
                    [&](auto tag) { group_normalize<decltype(tag)>(x, groups, weight, bias, eps, false, out); });
}

void CpuKernels::group_norm_silu(const Tensor& x, int groups, const Tensor* weight, const Tensor* bias, float eps,
                                 Tensor& out) {
  visit_float_dtype(x.dtype(),
                    [&](auto tag) { group_normalize<decltype(tag)>(x, groups, weight, bias, eps, true, out); });
}

void CpuKernels::add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps,
                              Tensor& sum_out, Tensor& norm_out) {
  visit_float_dtype(x.dtype(),
                    [&](auto tag) { add_rms_rows<decltype(tag)>(x, residual, weight, eps, sum_out, norm_out); });
}

}  // namespace rbee::cpu
#endif  // HWY_ONCE
