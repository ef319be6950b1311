// GPU layer_norm and group_norm (rms_norm and add_rms_norm: rms_norm.cu).
//
// Semantics are the CPU's (cpu_norm.cpp): f16/bf16/f32 compute in f32 and round once, f64 in f64.
// layer norm: out = (x - mean) * rstd [* w] [+ b], rstd = 1 / sqrt(mean((x - mean)^2) + eps); the variance is
// taken from the deviations (two passes over the row, kept in shared memory when it fits). group_norm, whose
// groups can hold millions of values, splits each group over many blocks: partial sums of (x - s) and (x - s)^2
// in f64 with the group's first value as the shift s (numerically safe as the mean of shifted data), merged in a
// fixed order, then one elementwise pass. Groups of at most kGroupBlockMaxChunk values (all of SD's UNet) take one
// launch instead: one block per (image, group) sums its group and normalizes it (group_norm_block_kernel).
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <type_traits>

#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/ops_common.cuh"
#include "backends/gpu/kernels/vec.cuh"
#include "rbee/core/env.h"

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

// One warp per row for rows of at most W * VPL 16-byte vectors (SD's 320 .. 1280 features): the row stays in
// registers (VPL vectors of V elements per lane), mean by warp shuffles, then the variance from the deviations, then
// the output; no shared memory and no block barriers. x, out [rows, n], w, b [n] or null; n % V == 0 and every
// pointer 16-byte aligned when V * sizeof(T) == 16. Every warp of a block makes the same shuffles (a warp past the
// last row computes nothing but still shuffles), as tools/gpu_emu requires.
template <class T, int V, int VPL>
__global__ void norm_rows_warp_kernel(const T* x, const T* w, const T* b, int64_t rows, int n, float eps, T* out) {
  using C = compute_t<T>;
  constexpr int W = RBEE_DEVICE_WARP_SIZE;
  const int lane = threadIdx.x % W, warps = blockDim.x / W;
  const int nv = n / V;
  for (int64_t base = (int64_t)blockIdx.x * warps; base < rows; base += (int64_t)gridDim.x * warps) {
    const int64_t r = base + threadIdx.x / W;
    const int lim = r < rows ? nv : 0;  // vectors this lane's row has (none past the last row)
    const T* xr = x + r * n;
    C v[VPL][V];
    C s = 0;
#pragma unroll
    for (int j = 0; j < VPL; ++j) {
      const int c = lane + j * W;
      if (c < lim) {
        load_vec<T, V>(xr + c * V, v[j]);
#pragma unroll
        for (int k = 0; k < V; ++k) s += v[j][k];
      }
    }
    for (int m = W / 2; m > 0; m >>= 1) s += shfl_xor(s, m);
    const C mean = s / C(n);
    C ss = 0;
#pragma unroll
    for (int j = 0; j < VPL; ++j) {
      if (lane + j * W < lim) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const C d = v[j][k] - mean;
          ss += d * d;
        }
      }
    }
    for (int m = W / 2; m > 0; m >>= 1) ss += shfl_xor(ss, m);
    const C rstd = C(1) / sqrt(ss / C(n) + C(eps));
    T* yr = out + r * n;
#pragma unroll
    for (int j = 0; j < VPL; ++j) {
      const int c = lane + j * W;
      if (c < lim) {
        C wv[V], bv[V];
        if (w) load_vec<T, V>(w + c * V, wv);
        if (b) load_vec<T, V>(b + c * V, bv);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          C y = (v[j][k] - mean) * rstd;
          if (w) y *= wv[k];
          if (b) y += bv[k];
          v[j][k] = y;
        }
        store_vec<T, V>(yr + c * V, v[j]);
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

// x [groups_total, chunk]: block (g, slice) sums slice `slice` of group g into partial[g * slices + slice]. V
// elements per 16-byte load when chunk % V == 0 and x is 16-byte aligned (kGroupSlice is a multiple of every V);
// per-thread sums in f32 for 16-bit x (32 values a thread), else f64.
template <class T, int V>
__global__ void group_stats_kernel(const T* x, int64_t groups_total, int64_t chunk, int64_t slices,
                                   ShiftedSums* partial) {
  using C = compute_t<T>;
  using Acc = std::conditional_t<sizeof(T) == 2, float, double>;
  ShiftedSums* scratch = dynamic_smem<ShiftedSums>();
  for (int64_t item = blockIdx.x; item < groups_total * slices; item += gridDim.x) {
    const int64_t g = item / slices, slice = item % slices;
    const T* xg = x + g * chunk;
    const Acc shift = (Acc)load(xg);
    const int64_t begin = slice * kGroupSlice, end = chunk < begin + kGroupSlice ? chunk : begin + kGroupSlice;
    Acc s1 = 0, s2 = 0;
    for (int64_t i = begin + threadIdx.x * V; i < end; i += blockDim.x * V) {
      C v[V];
      load_vec<T, V>(xg + i, v);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const Acc d = (Acc)v[k] - shift;
        s1 += d;
        s2 += d * d;
      }
    }
    ShiftedSums acc{(double)s1, (double)s2};
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
// V elements per 16-byte vector when spatial % V == 0 and x / out are 16-byte aligned (a vector stays in one
// channel), else 1.
template <class T, bool SILU, int V>
__global__ void group_apply_kernel(const T* x, const compute_t<T>* stats, const T* w, const T* b, int64_t total,
                                   int64_t channels, int64_t spatial, int64_t per_group, T* out) {
  using C = compute_t<T>;
  const bool small = total <= 0x7fffffff;  // then the index math below runs in 32 bits
  for (int64_t e = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * V; e < total;
       e += (int64_t)gridDim.x * blockDim.x * V) {
    const int64_t ch = small ? (int64_t)((uint32_t)e / (uint32_t)spatial % (uint32_t)channels) : e / spatial % channels;
    // image * groups + group
    const int64_t g = small ? (int64_t)((uint32_t)e / (uint32_t)(spatial * per_group)) : e / (spatial * per_group);
    const C mean = stats[2 * g], rstd = stats[2 * g + 1];
    const C a = w ? rstd * load(w + ch) : rstd;
    const C shift_b = b ? load(b + ch) : C(0);
    C v[V];
    load_vec<T, V>(x + e, v);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      C y = (v[k] - mean) * a + shift_b;
      if constexpr (SILU) y = y / (C(1) + exp(-y));
      v[k] = y;
    }
    store_vec<T, V>(out + e, v);
  }
}

// One launch per group_norm(_silu) for groups of <= kGroupBlockMaxChunk values: block `item` = image * groups +
// group owns the contiguous chunk [item * chunk, (item + 1) * chunk) of x, out [batch, channels, spatial]
// (per_group channels x spatial). Pass 1 sums (x - s) and (x - s)^2 with s the group's first value (per thread in
// f32 for 16-bit x, else f64; across the block in f64, fixed order); pass 2 re-reads the chunk (an L2 hit: the
// block just read it) and writes act((x - mean) * rstd * w[ch] + b[ch]). V elements per 16-byte vector when
// spatial % V == 0 and x / out are 16-byte aligned (a vector never straddles two channels), else V = 1.
// blockDim.x a multiple of the warp size, <= 1024; dynamic shared memory: 32 doubles.
constexpr int kGroupBlockThreads = 1024;
constexpr int64_t kGroupBlockMaxChunk = 131072;

template <class T, int V, bool SILU>
__global__ void group_norm_block_kernel(const T* x, const T* w, const T* b, int64_t chunk, int64_t spatial,
                                        int64_t per_group, int64_t groups, float eps, T* out) {
  using C = compute_t<T>;
  using Acc = std::conditional_t<sizeof(T) == 2, float, double>;
  double* scratch = dynamic_smem<double>();
  const int64_t item = blockIdx.x;
  const T* xg = x + item * chunk;
  T* yg = out + item * chunk;
  const int64_t ch0 = (item % groups) * per_group;
  const uint32_t nvec = (uint32_t)(chunk / V), sp = (uint32_t)spatial;
  const Acc shift = (Acc)load(xg);
  Acc s1 = 0, s2 = 0;
#pragma unroll 4
  for (uint32_t i = threadIdx.x; i < nvec; i += blockDim.x) {
    C v[V];
    load_vec<T, V>(xg + (int64_t)i * V, v);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const Acc d = (Acc)v[k] - shift;
      s1 += d;
      s2 += d * d;
    }
  }
  const double t1 = group_sum<double>((double)s1, scratch, (int)blockDim.x);
  const double t2 = group_sum<double>((double)s2, scratch, (int)blockDim.x);
  const double count = (double)chunk;
  const double var = fmax((t2 - t1 * t1 / count) / count, 0.0);
  const C mean = (C)((double)shift + t1 / count);
  const C rstd = (C)(1.0 / sqrt(var + (double)eps));
#pragma unroll 4
  for (uint32_t i = threadIdx.x; i < nvec; i += blockDim.x) {
    const uint32_t e = i * V;
    const int64_t ch = ch0 + e / sp;
    const C a = w ? rstd * load(w + ch) : rstd;
    const C shift_b = b ? load(b + ch) : C(0);
    C v[V];
    load_vec<T, V>(xg + e, v);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      C y = (v[k] - mean) * a + shift_b;
      if constexpr (SILU) y = y / (C(1) + exp(-y));
      v[k] = y;
    }
    store_vec<T, V>(yg + e, v);
  }
}

// RBEE_LAYER_NORM_WARP=0: every layer_norm through norm_rows_kernel (A/B).
bool layer_norm_warp_enabled() {
  static const bool on = env::flag_or("RBEE_LAYER_NORM_WARP", true);
  return on;
}

// RBEE_GROUP_NORM_ONE_LAUNCH=0: every group through the statistics + finalize + apply kernels (A/B).
bool group_norm_one_launch_enabled() {
  static const bool on = env::flag_or("RBEE_GROUP_NORM_ONE_LAUNCH", true);
  return on;
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
    constexpr int V = kVec16<T>;
    const int warp = device_.props().warp_size;
    const T* px = static_cast<const T*>(x.data());
    T* po = static_cast<T*>(out.data());
    const T* pw = data_or_null<T>(weight);
    const T* pb = data_or_null<T>(bias);
    const int64_t nv = n / V;
    if (layer_norm_warp_enabled() && vec16_ok({px, po, pw, pb}, {n}, V) && nv <= 8 * warp) {
      const int rows_per_block = kThreads / warp;
      const unsigned grid = blocks_for(rows, rows_per_block);
      auto launch = [&](auto vpl_tag) {
        constexpr int VPL = decltype(vpl_tag)::value;
        norm_rows_warp_kernel<T, V, VPL><<<grid, kThreads, 0, device_.stream()>>>(px, pw, pb, rows, (int)n, eps, po);
      };
      if (nv <= warp) launch(std::integral_constant<int, 1>{});
      else if (nv <= 2 * warp) launch(std::integral_constant<int, 2>{});
      else if (nv <= 4 * warp) launch(std::integral_constant<int, 4>{});
      else launch(std::integral_constant<int, 8>{});
      RBEE_GPU_CHECK_LAUNCH();
      return;
    }
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
  if (chunk <= kGroupBlockMaxChunk && group_norm_one_launch_enabled()) {
    visit_float_storage(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      constexpr int V16 = kVec16<T>;
      const T* px = static_cast<const T*>(x.data());
      T* po = static_cast<T*>(out.data());
      const bool vec = vec16_ok({px, po}, {spatial}, V16);
      const T* pw = data_or_null<T>(weight);
      const T* pb = data_or_null<T>(bias);
      const unsigned grid = (unsigned)groups_total;
      constexpr size_t smem = 32 * sizeof(double);
      if (vec) {
        group_norm_block_kernel<T, V16, SILU><<<grid, kGroupBlockThreads, smem, device_.stream()>>>(
            px, pw, pb, chunk, spatial, per_group, (int64_t)groups, eps, po);
      } else {
        group_norm_block_kernel<T, 1, SILU><<<grid, kGroupBlockThreads, smem, device_.stream()>>>(
            px, pw, pb, chunk, spatial, per_group, (int64_t)groups, eps, po);
      }
      RBEE_GPU_CHECK_LAUNCH();
    });
    return;
  }
  const int64_t slices = ceil_div(chunk, kGroupSlice);
  const Tensor partial = Tensor::empty({groups_total * slices * 2}, DType::F64, device_);
  visit_float_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const Tensor stats = Tensor::empty({groups_total * 2}, std::is_same_v<C, double> ? DType::F64 : DType::F32,
                                       device_);
    const T* px = static_cast<const T*>(x.data());
    auto* sums = static_cast<ShiftedSums*>(partial.data());
    constexpr int V16 = kVec16<T>;
    if (vec16_ok({px}, {chunk}, V16)) {
      group_stats_kernel<T, V16><<<blocks_for(groups_total * slices, 1), kThreads, kThreads * sizeof(ShiftedSums),
                                   device_.stream()>>>(px, groups_total, chunk, slices, sums);
    } else {
      group_stats_kernel<T, 1><<<blocks_for(groups_total * slices, 1), kThreads, kThreads * sizeof(ShiftedSums),
                                 device_.stream()>>>(px, groups_total, chunk, slices, sums);
    }
    RBEE_GPU_CHECK_LAUNCH();
    group_finalize_kernel<T><<<grid_for(groups_total, kThreads), kThreads, 0, device_.stream()>>>(
        px, sums, groups_total, chunk, slices, eps, static_cast<C*>(stats.data()));
    RBEE_GPU_CHECK_LAUNCH();
    const int64_t total = x.numel();
    T* po = static_cast<T*>(out.data());
    const C* pstats = static_cast<const C*>(stats.data());
    if (vec16_ok({px, po}, {spatial}, V16)) {
      group_apply_kernel<T, SILU, V16><<<grid_for(total / V16, kThreads), kThreads, 0, device_.stream()>>>(
          px, pstats, data_or_null<T>(weight), data_or_null<T>(bias), total, channels, spatial, per_group, po);
    } else {
      group_apply_kernel<T, SILU, 1><<<grid_for(total, kThreads), kThreads, 0, device_.stream()>>>(
          px, pstats, data_or_null<T>(weight), data_or_null<T>(bias), total, channels, spatial, per_group, po);
    }
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
