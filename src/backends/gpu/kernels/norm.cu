// GPU layer_norm and group_norm (rms_norm and add_rms_norm: rms_norm.cu).
//
// Semantics are the CPU's (cpu_norm.cpp): f16/bf16/f32 compute in f32 and round once, f64 in f64.
// layer norm: out = (x - mean) * rstd [* w] [+ b], rstd = 1 / sqrt(mean((x - mean)^2) + eps); the variance is
// taken from the deviations (two passes over the row, kept in shared memory when it fits). group_norm, whose
// groups can hold millions of values, splits each group over many blocks: partial sums of (x - s) and (x - s)^2
// in f64 with the group's first value as the shift s (numerically safe as the mean of shifted data), merged in a
// fixed order, then one elementwise pass.
#include <cmath>

#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/ops_common.cuh"

namespace rbee::gpu {

namespace {

constexpr int kThreads = 256;
constexpr size_t kRowCacheBytes = 32 << 10;
// Elements of one group that one block of the group-norm statistics pass reduces.
constexpr int64_t kGroupSlice = 8192;

template <class C>
struct Plus {
  __device__ C operator()(C a, C b) const { return a + b; }
};

// Row launch shape shared by the row kernels: threads per row, and whether rows fit the shared-memory cache.
struct RowPlan {
  int group, per_block;
  bool cache;
  size_t smem;
};
template <class C>
RowPlan row_plan(int64_t n) {
  RowPlan p;
  p.group = row_group_size(n, 8);
  p.per_block = kThreads / p.group;
  p.cache = (size_t)(p.per_block * n) * sizeof(C) <= kRowCacheBytes;
  p.smem = (kThreads + (p.cache ? p.per_block * n : 0)) * sizeof(C);
  return p;
}

// x, out [rows, n]; w, b [n] or null.
template <class T>
__global__ void norm_rows_kernel(const T* x, const T* w, const T* b, int64_t rows, int64_t n, float eps, int group,
                                 bool cache, T* out) {
  using C = compute_t<T>;
  C* scratch = dynamic_smem<C>();
  const int lane = threadIdx.x & (group - 1), slot = threadIdx.x / group, per_block = blockDim.x / group;
  C* row_cache = scratch + blockDim.x + (int64_t)slot * n;
  for (int64_t base = (int64_t)blockIdx.x * per_block; base < rows; base += (int64_t)gridDim.x * per_block) {
    const int64_t r = base + slot;
    const bool active = r < rows;
    const T* xr = x + r * n;
    C s = 0;
    if (active) {
      for (int64_t j = lane; j < n; j += group) {
        const C v = load(xr + j);
        if (cache) row_cache[j] = v;
        s += v;
      }
    }
    const C mean = group_reduce(s, Plus<C>{}, scratch, group) / C(n);
    C ss = 0;
    if (active) {
      for (int64_t j = lane; j < n; j += group) {
        const C v = cache ? row_cache[j] : load(xr + j);
        const C d = v - mean;
        ss += d * d;
      }
    }
    ss = group_reduce(ss, Plus<C>{}, scratch, group);
    const C rstd = C(1) / sqrt(ss / C(n) + C(eps));
    if (active) {
      T* yr = out + r * n;
      for (int64_t j = lane; j < n; j += group) {
        C v = ((cache ? row_cache[j] : load(xr + j)) - mean) * rstd;
        if (w) v *= load(w + j);
        if (b) v += load(b + j);
        store(yr + j, v);
      }
    }
  }
}

// ---- group norm ----

struct ShiftedSums {
  double s1, s2;  // sum of (x - shift), sum of (x - shift)^2
};
struct AddSums {
  __device__ ShiftedSums operator()(const ShiftedSums& a, const ShiftedSums& b) const {
    return {a.s1 + b.s1, a.s2 + b.s2};
  }
};

// x [groups_total, chunk]: block (g, slice) sums slice `slice` of group g into partial[g * slices + slice].
template <class T>
__global__ void group_stats_kernel(const T* x, int64_t groups_total, int64_t chunk, int64_t slices,
                                   ShiftedSums* partial) {
  ShiftedSums* scratch = dynamic_smem<ShiftedSums>();
  for (int64_t item = blockIdx.x; item < groups_total * slices; item += gridDim.x) {
    const int64_t g = item / slices, slice = item % slices;
    const T* xg = x + g * chunk;
    const double shift = (double)load(xg);
    const int64_t begin = slice * kGroupSlice, end = chunk < begin + kGroupSlice ? chunk : begin + kGroupSlice;
    ShiftedSums acc{0, 0};
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const double d = (double)load(xg + i) - shift;
      acc.s1 += d;
      acc.s2 += d * d;
    }
    acc = group_reduce(acc, AddSums{}, scratch, blockDim.x);
    if (threadIdx.x == 0) partial[item] = acc;
  }
}

// stats[g] = (mean, rstd) of group g from its slices' partial sums (added in slice order).
template <class T>
__global__ void group_finalize_kernel(const T* x, const ShiftedSums* partial, int64_t groups_total, int64_t chunk,
                                      int64_t slices, float eps, compute_t<T>* stats) {
  for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < groups_total;
       g += (int64_t)gridDim.x * blockDim.x) {
    double s1 = 0, s2 = 0;
    for (int64_t s = 0; s < slices; ++s) {
      s1 += partial[g * slices + s].s1;
      s2 += partial[g * slices + s].s2;
    }
    const double count = (double)chunk;
    const double var = fmax((s2 - s1 * s1 / count) / count, 0.0);
    stats[2 * g] = (compute_t<T>)((double)load(x + g * chunk) + s1 / count);
    stats[2 * g + 1] = (compute_t<T>)(1.0 / sqrt(var + (double)eps));
  }
}

// x, out [batch, channels, spatial]; group g of image i covers channels [g * per_group, (g + 1) * per_group).
// SILU: out = silu(normalized value) in the compute type, rounded once (group_norm_silu).
template <class T, bool SILU>
__global__ void group_apply_kernel(const T* x, const compute_t<T>* stats, const T* w, const T* b, int64_t total,
                                   int64_t channels, int64_t spatial, int64_t per_group, T* out) {
  using C = compute_t<T>;
  const bool small = total <= 0x7fffffff;  // then the index math below runs in 32 bits
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ch = small ? (int64_t)((uint32_t)e / (uint32_t)spatial % (uint32_t)channels) : e / spatial % channels;
    // image * groups + group
    const int64_t g = small ? (int64_t)((uint32_t)e / (uint32_t)(spatial * per_group)) : e / (spatial * per_group);
    const C mean = stats[2 * g], rstd = stats[2 * g + 1];
    const C a = w ? rstd * load(w + ch) : rstd;
    const C shift_b = b ? load(b + ch) : C(0);
    C v = (load(x + e) - mean) * a + shift_b;
    if constexpr (SILU) v = v / (C(1) + exp(-v));
    store(out + e, v);
  }
}

template <class T>
const T* data_or_null(const Tensor* t) {
  return t ? static_cast<const T*>(t->data()) : nullptr;
}

}  // namespace

void GpuKernels::layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps, Tensor& out) {
  device_.activate();
  const int64_t n = x.dim(-1);
  if (n == 0 || x.numel() == 0) return;
  const int64_t rows = x.numel() / n;
  visit_float_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const RowPlan p = row_plan<compute_t<T>>(n);
    norm_rows_kernel<T><<<blocks_for(rows, p.per_block), kThreads, p.smem, device_.stream()>>>(
        static_cast<const T*>(x.data()), data_or_null<T>(weight), data_or_null<T>(bias), rows, n, eps, p.group,
        p.cache, static_cast<T*>(out.data()));
    RBEE_GPU_CHECK_LAUNCH();
  });
}

namespace {

// group_norm (SILU false) and group_norm_silu: statistics in f64 partial sums, then one apply pass.
template <bool SILU>
void group_norm_impl(GpuDevice& device_, const Tensor& x, int groups, const Tensor* weight, const Tensor* bias,
                     float eps, Tensor& out) {
  device_.activate();
  const int64_t batch = x.dim(0), channels = x.dim(1), spatial = x.dim(2);
  const int64_t per_group = channels / groups, chunk = per_group * spatial, groups_total = batch * groups;
  if (chunk == 0 || batch == 0) return;
  const int64_t slices = ceil_div(chunk, kGroupSlice);
  const Tensor partial = Tensor::empty({groups_total * slices * 2}, DType::F64, device_);
  visit_float_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const Tensor stats = Tensor::empty({groups_total * 2}, std::is_same_v<C, double> ? DType::F64 : DType::F32,
                                       device_);
    const T* px = static_cast<const T*>(x.data());
    auto* sums = static_cast<ShiftedSums*>(partial.data());
    group_stats_kernel<T><<<blocks_for(groups_total * slices, 1), kThreads, kThreads * sizeof(ShiftedSums),
                            device_.stream()>>>(px, groups_total, chunk, slices, sums);
    RBEE_GPU_CHECK_LAUNCH();
    group_finalize_kernel<T><<<grid_for(groups_total, kThreads), kThreads, 0, device_.stream()>>>(
        px, sums, groups_total, chunk, slices, eps, static_cast<C*>(stats.data()));
    RBEE_GPU_CHECK_LAUNCH();
    const int64_t total = x.numel();
    group_apply_kernel<T, SILU><<<grid_for(total, kThreads), kThreads, 0, device_.stream()>>>(
        px, static_cast<const C*>(stats.data()), data_or_null<T>(weight), data_or_null<T>(bias), total, channels,
        spatial, per_group, static_cast<T*>(out.data()));
    RBEE_GPU_CHECK_LAUNCH();
  });
}

}  // namespace

void GpuKernels::group_norm(const Tensor& x, int groups, const Tensor* weight, const Tensor* bias, float eps,
                            Tensor& out) {
  group_norm_impl<false>(device_, x, groups, weight, bias, eps, out);
}

void GpuKernels::group_norm_silu(const Tensor& x, int groups, const Tensor* weight, const Tensor* bias, float eps,
                                 Tensor& out) {
  group_norm_impl<true>(device_, x, groups, weight, bias, eps, out);
}

}  // namespace rbee::gpu
