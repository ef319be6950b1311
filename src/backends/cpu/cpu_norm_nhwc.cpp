// CPU group_norm_nhwc: group norm (and its SiLU) over channels-last maps x, out [N, S, C] (op_table.def GroupNormNhwc).
//
// group_norm's arithmetic on the channels-first transpose (cpu_norm.cpp): values and the normalization in f32 (f64
// for f64), mean first (a sum, then a correcting sum of the deviations), then the variance as the mean of squared
// deviations (all sums in f64 here), rounded once. Each (image, group)
// gathers its S strips of C/groups consecutive channels into a per-thread buffer and runs on one thread.
#include <cmath>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_nn_util.h"

namespace rbee::cpu {

namespace {

template <class T>
void group_normalize_nhwc(const Tensor& x, int groups, const Tensor* weight, const Tensor* bias, const Tensor* shift,
                          float eps, bool silu, Tensor& out) {
  using C = nn_compute_t<T>;
  const int64_t batch = x.dim(0), spatial = x.dim(1), channels = x.dim(2);
  const int64_t per_group = channels / groups, count = spatial * per_group;
  if (count == 0 || batch == 0) return;
  const T* px = static_cast<const T*>(x.data());
  T* po = static_cast<T*>(out.data());
  const std::vector<C> w = widened_vector<T>(weight), b = widened_vector<T>(bias);
  const std::vector<C> sh = widened_vector<T>(shift);  // [batch * channels] or empty
  parallel_rows(batch * groups, count, [&](int64_t t0, int64_t t1) {
    C* vals = scratch<C>(0, (size_t)count);
    C* row = scratch<C>(1, (size_t)per_group);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t img = t / groups, c0 = (t % groups) * per_group;
      const T* xi = px + img * spatial * channels + c0;
      T* oi = po + img * spatial * channels + c0;
      for (int64_t s = 0; s < spatial; ++s) load_row(xi + s * channels, vals + s * per_group, per_group);
      if (!sh.empty()) {
        for (int64_t s = 0; s < spatial; ++s)
          for (int64_t j = 0; j < per_group; ++j) vals[s * per_group + j] += sh[img * channels + c0 + j];
      }
      // The two sums in f64 (a group holds up to millions of values; the strips are gathered, not summed by the
      // SIMD row kernels of the channels-first path).
      // The mean gets one correcting pass: a plain f64 sum of 1M values near 100 rounds by ~1e-11 of the mean.
      double total = 0;
      for (int64_t i = 0; i < count; ++i) total += (double)vals[i];
      double mean_f64 = total / (double)count, fix = 0;
      for (int64_t i = 0; i < count; ++i) fix += (double)vals[i] - mean_f64;
      mean_f64 += fix / (double)count;
      const C mean = (C)mean_f64;
      double dev = 0;
      for (int64_t i = 0; i < count; ++i) dev += (double)(vals[i] - mean) * (double)(vals[i] - mean);
      const C rstd = (C)(1.0 / std::sqrt(dev / (double)count + (double)eps));
      for (int64_t s = 0; s < spatial; ++s) {
        for (int64_t j = 0; j < per_group; ++j) {
          C v = (vals[s * per_group + j] - mean) * rstd * (w.empty() ? C(1) : w[c0 + j]) +
                (b.empty() ? C(0) : b[c0 + j]);
          if (silu) v = v / (C(1) + std::exp(-v));
          row[j] = v;
        }
        store_row<T>(row, oi + s * channels, per_group);
      }
    }
  });
}

}  // namespace

void CpuKernels::group_norm_nhwc(const Tensor& x, int groups, const Tensor* weight, const Tensor* bias,
                                 const Tensor* shift, float eps, bool silu, Tensor& out) {
  visit_float_dtype(x.dtype(), [&](auto tag) {
    group_normalize_nhwc<decltype(tag)>(x, groups, weight, bias, shift, eps, silu, out);
  });
}

}  // namespace rbee::cpu
