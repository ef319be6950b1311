// GPU group_norm_nhwc (op_table.def GroupNormNhwc): group norm (+ SiLU, + a [N, C] shift) over channels-last maps
// x, out [N, S, C]; the channels-first group_norm is in norm.cu. Two paths:
//  - one block per (image, group) (default): the group's S strips of C/groups channels summed and normalized by one
//    block, group_norm_block_kernel's arithmetic;
//  - split (RBEE_GROUP_NORM_NHWC_SPLIT=1, not yet timed on a GPU), three launches that read x row by row, so every
//    warp loads whole 16-byte vectors of consecutive channels:
//    1. statistics: block (chunk, image) sums rows [chunk * rows, (chunk + 1) * rows) of the image per channel:
//       s1 = sum of (v - p_c), s2 = sum of (v - p_c)^2 with v = x + shift[image, c] and p_c the channel's v on
//       row 0 (v - p_c = x - x[row 0]: the shift cancels; per thread in f32 for 16-bit x, else f64), into
//       partial[image][chunk][c];
//    2. finalize: one block per image turns each channel's chunks (added in chunk order, in f64) into its mean and
//       sum of squared deviations, then each group's into (mean, rstd): mean = the channels' mean, M2 = sum of their
//       M2 + S * sum of (m_c - mean)^2 (the exact merge of equal-count parts);
//    3. apply: act((v - mean) * rstd * w[c] + b[c]) per element, rounded once.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <type_traits>

#include "backends/gpu/gpu_device.h"
#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/ops_common.cuh"
#include "backends/gpu/kernels/vec.cuh"
#include "rbee/core/env.h"

namespace rbee::gpu {

namespace {

constexpr int kThreads = 256;
constexpr int kGroupBlockThreads = 1024;

template <class T>
const T* data_or_null(const Tensor* t) {
  return t ? static_cast<const T*>(t->data()) : nullptr;
}

// group_norm_nhwc: x, out [batch, spatial, channels] (channels last), shift [batch, channels] or null. Block `item`
// = image * groups + group owns the group's `spatial` strips of per_group consecutive channels (stride `channels`
// between strips), read as V-element vectors (V divides per_group; x, out 16-byte aligned and channels % V == 0 when
// V > 1). With v = x + shift[image, ch] in the compute type, the arithmetic is group_norm_block_kernel's: pass 1
// sums (v - p) and (v - p)^2 with p the group's first v (per thread in f32 for 16-bit x, else f64; across the block
// in f64), pass 2 re-reads the strips (L2 hits) and writes act((v - mean) * rstd * w[ch] + b[ch]) rounded once.
// blockDim.x a multiple of the warp size, <= 1024; dynamic shared memory: 32 doubles.
template <class T, int V, bool SILU>
__global__ void group_norm_nhwc_kernel(const T* x, const T* w, const T* b, const T* shift, int64_t spatial,
                                       int64_t channels, int64_t per_group, int64_t groups, float eps, T* out) {
  using C = compute_t<T>;
  using Acc = std::conditional_t<sizeof(T) == 2, float, double>;
  double* scratch = dynamic_smem<double>();
  const int64_t item = blockIdx.x, img = item / groups, ch0 = (item % groups) * per_group;
  const T* xg = x + img * spatial * channels + ch0;
  T* yg = out + img * spatial * channels + ch0;
  const int64_t vecs_per_strip = per_group / V, nvec = spatial * vecs_per_strip;
  const T* sg = shift ? shift + img * channels + ch0 : nullptr;  // this image's shift of the group's channels
  const Acc pivot = (Acc)load(xg) + (sg ? (Acc)load(sg) : Acc(0));
  Acc s1 = 0, s2 = 0;
  for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
    const int64_t s = i / vecs_per_strip, j = (i - s * vecs_per_strip) * V;
    C v[V];
    load_vec<T, V>(xg + s * channels + j, v);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if (sg) v[k] += load(sg + j + k);
      const Acc d = (Acc)v[k] - pivot;
      s1 += d;
      s2 += d * d;
    }
  }
  const double t1 = group_sum<double>((double)s1, scratch, (int)blockDim.x);
  const double t2 = group_sum<double>((double)s2, scratch, (int)blockDim.x);
  const double count = (double)(spatial * per_group);
  const double var = fmax((t2 - t1 * t1 / count) / count, 0.0);
  const C mean = (C)((double)pivot + t1 / count);
  const C rstd = (C)(1.0 / sqrt(var + (double)eps));
  for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
    const int64_t s = i / vecs_per_strip, j = (i - s * vecs_per_strip) * V;
    C v[V];
    load_vec<T, V>(xg + s * channels + j, v);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if (sg) v[k] += load(sg + j + k);
      const int64_t ch = ch0 + j + k;
      const C a = w ? rstd * load(w + ch) : rstd;
      C y = (v[k] - mean) * a + (b ? (C)load(b + ch) : C(0));
      if constexpr (SILU) y = y / (C(1) + exp(-y));
      v[k] = y;
    }
    store_vec<T, V>(yg + s * channels + j, v);
  }
}

namespace gn_nhwc {

template <class Acc>
struct Sums {
  Acc s1, s2;
};
// The per-thread accumulator of T's statistics: f32 for 16-bit x, else f64.
template <class T>
using AccOf = std::conditional_t<sizeof(T) == 2, float, double>;

// grid (chunks, batch); blockDim.x threads as lanes x row_lanes: lane l takes vector columns l, l + lanes, ... (V
// channels each), row lane r rows r, r + row_lanes, ... of the chunk. Dynamic shared memory: blockDim.x * V Sums.
template <class T, int V>
__global__ void stats_kernel(const T* x, int64_t spatial, int64_t channels, int64_t rows_per_chunk,
                             int lanes, Sums<AccOf<T>>* partial) {
  using C = compute_t<T>;
  using Acc = AccOf<T>;
  Sums<Acc>* red = dynamic_smem<Sums<Acc>>();
  const int64_t img = blockIdx.y, chunk = blockIdx.x, chunks = gridDim.x;
  const int64_t r0 = chunk * rows_per_chunk, r1 = r0 + rows_per_chunk < spatial ? r0 + rows_per_chunk : spatial;
  const int row_lanes = (int)blockDim.x / lanes, lane = (int)threadIdx.x % lanes, rl = (int)threadIdx.x / lanes;
  const int64_t vcols = channels / V;
  const T* xi = x + img * spatial * channels;
  for (int64_t base = 0; base < vcols; base += lanes) {  // every thread runs every pass (barriers below)
    const int64_t vc = base + lane;
    const bool active = rl < row_lanes && vc < vcols;
    Acc s1[V], s2[V];
    C piv[V];
#pragma unroll
    for (int k = 0; k < V; ++k) s1[k] = s2[k] = Acc(0);
    if (active) {
      load_vec<T, V>(xi + vc * V, piv);  // row 0
      for (int64_t r = r0 + rl; r < r1; r += row_lanes) {
        C v[V];
        load_vec<T, V>(xi + r * channels + vc * V, v);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const Acc d = (Acc)v[k] - (Acc)piv[k];  // (x + shift) - (x0 + shift): the shift cancels
          s1[k] += d;
          s2[k] += d * d;
        }
      }
    }
    __syncthreads();  // the previous pass's readers of red are done
#pragma unroll
    for (int k = 0; k < V; ++k) red[threadIdx.x * V + k] = {s1[k], s2[k]};
    __syncthreads();
    if (rl == 0 && vc < vcols) {
      for (int k = 0; k < V; ++k) {
        Sums<Acc> t = red[lane * V + k];
        for (int q = 1; q < row_lanes; ++q) {
          const Sums<Acc> u = red[(q * lanes + lane) * V + k];
          t.s1 += u.s1;
          t.s2 += u.s2;
        }
        partial[(img * chunks + chunk) * channels + vc * V + k] = t;
      }
    }
  }
}

// One block per image. chan [batch][channels] scratch (f64 mean and M2 per channel); stats [batch][groups] (mean,
// rstd) in the compute type.
template <class T>
__global__ void finalize_kernel(const T* x, const T* shift, const Sums<AccOf<T>>* partial, int64_t spatial,
                                int64_t channels, int64_t chunks, int64_t groups, float eps,
                                Sums<double>* chan, compute_t<T>* stats) {
  const int64_t img = blockIdx.x, per_group = channels / groups;
  const double n = (double)spatial;
  for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
    double s1 = 0, s2 = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      s1 += (double)partial[(img * chunks + k) * channels + c].s1;
      s2 += (double)partial[(img * chunks + k) * channels + c].s2;
    }
    const double pivot = (double)load(x + img * spatial * channels + c) +
                         (shift ? (double)load(shift + img * channels + c) : 0.0);
    chan[img * channels + c] = {pivot + s1 / n, fmax(s2 - s1 * s1 / n, 0.0)};
  }
  __syncthreads();
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
    const Sums<double>* cg = chan + img * channels + g * per_group;
    double mean = 0;
    for (int64_t j = 0; j < per_group; ++j) mean += cg[j].s1;
    mean /= (double)per_group;
    double m2 = 0;
    for (int64_t j = 0; j < per_group; ++j) m2 += cg[j].s2 + n * (cg[j].s1 - mean) * (cg[j].s1 - mean);
    const double var = m2 / (n * (double)per_group);
    stats[2 * (img * groups + g)] = (compute_t<T>)mean;
    stats[2 * (img * groups + g) + 1] = (compute_t<T>)(1.0 / sqrt(var + (double)eps));
  }
}

// out = act((x + shift - mean) * rstd * w + b) over [batch, spatial, channels] in V-vectors (V divides channels).
template <class T, int V, bool SILU>
__global__ void apply_kernel(const T* x, const T* shift, const compute_t<T>* stats, const T* w, const T* b,
                             int64_t batch, int64_t spatial, int64_t channels, int64_t per_group, T* out) {
  using C = compute_t<T>;
  const int64_t groups = channels / per_group, total = batch * spatial * channels / V, vcols = channels / V;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t c0 = i % vcols * V, img = i / (vcols * spatial);
    C v[V];
    load_vec<T, V>(x + i * V, v);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int64_t c = c0 + k, g = img * groups + c / per_group;
      C y = v[k] + (shift ? (C)load(shift + img * channels + c) : C(0));
      y = (y - stats[2 * g]) * stats[2 * g + 1] * (w ? (C)load(w + c) : C(1)) + (b ? (C)load(b + c) : C(0));
      if constexpr (SILU) y = y / (C(1) + exp(-y));
      v[k] = y;
    }
    store_vec<T, V>(out + i * V, v);
  }
}

}  // namespace gn_nhwc

// RBEE_GROUP_NORM_NHWC_SPLIT=1: group_norm_nhwc through the statistics / finalize / apply kernels of
// this file (whole-row vector loads, about one block per SM) instead of one block per (image, group)
// (strips of C/groups channels, 64 blocks on SD's maps: 2.5x the channels-first kernel's time there, H100).
bool group_norm_nhwc_split() {
  static const bool on = env::flag_or("RBEE_GROUP_NORM_NHWC_SPLIT", false);
  return on;
}

// The split path for x, out [batch, spatial, channels] with V-element vectors (V divides channels, pointers aligned).
template <class T, int V>
void group_norm_nhwc_split_launch(GpuDevice& dev, const T* x, const T* w, const T* b, const T* shift, int64_t batch,
                                  int64_t spatial, int64_t channels, int64_t groups, float eps, bool silu, T* out) {
  using C = compute_t<T>;
  using Acc = std::conditional_t<sizeof(T) == 2, float, double>;
  constexpr int kStatsThreads = 256;
  const int64_t sms = std::max(1, dev.props().multiprocessors);
  const int64_t want = std::max<int64_t>(1, std::min<int64_t>(spatial, sms / std::max<int64_t>(1, batch)));
  const int64_t rows = ceil_div(spatial, want), chunks = ceil_div(spatial, rows), vcols = channels / V;
  const int lanes = (int)std::min<int64_t>(vcols, kStatsThreads);
  const int64_t partial_bytes = batch * chunks * channels * (int64_t)sizeof(gn_nhwc::Sums<Acc>);
  const Tensor partial = Tensor::empty({partial_bytes}, DType::U8, dev);
  const Tensor chan = Tensor::empty({batch * channels * 2}, DType::F64, dev);
  const Tensor stats = Tensor::empty({batch * groups * 2}, std::is_same_v<C, double> ? DType::F64 : DType::F32, dev);
  auto* pp = static_cast<gn_nhwc::Sums<Acc>*>(partial.data());
  auto* pc = static_cast<gn_nhwc::Sums<double>*>(chan.data());
  auto* ps = static_cast<C*>(stats.data());
  gn_nhwc::stats_kernel<T, V><<<dim3((unsigned)chunks, (unsigned)batch), kStatsThreads,
                                 kStatsThreads * V * sizeof(gn_nhwc::Sums<Acc>), dev.stream()>>>(
      x, spatial, channels, rows, lanes, pp);
  RBEE_GPU_CHECK_LAUNCH();
  gn_nhwc::finalize_kernel<T><<<(unsigned)batch, 256, 0, dev.stream()>>>(x, shift, pp, spatial, channels, chunks,
                                                                          groups, eps, pc, ps);
  RBEE_GPU_CHECK_LAUNCH();
  const int64_t total = batch * spatial * channels / V;
  if (silu) {
    gn_nhwc::apply_kernel<T, V, true><<<grid_for(total, kThreads), kThreads, 0, dev.stream()>>>(
        x, shift, ps, w, b, batch, spatial, channels, channels / groups, out);
  } else {
    gn_nhwc::apply_kernel<T, V, false><<<grid_for(total, kThreads), kThreads, 0, dev.stream()>>>(
        x, shift, ps, w, b, batch, spatial, channels, channels / groups, out);
  }
  RBEE_GPU_CHECK_LAUNCH();
}

}  // namespace

void GpuKernels::group_norm_nhwc(const Tensor& x, int groups, const Tensor* weight, const Tensor* bias,
                                 const Tensor* shift, float eps, bool silu, Tensor& out) {
  device_.activate();
  const int64_t batch = x.dim(0), spatial = x.dim(1), channels = x.dim(2), per_group = channels / groups;
  if (batch == 0 || spatial == 0 || per_group == 0) return;
  visit_float_storage(x.dtype(), [&](auto tag) {
    if (group_norm_nhwc_split()) {
      using T = decltype(tag);
      const T* px = static_cast<const T*>(x.data());
      T* po = static_cast<T*>(out.data());
      const T* pw = data_or_null<T>(weight);
      const T* pb = data_or_null<T>(bias);
      const T* ps = data_or_null<T>(shift);
      constexpr int V16 = kVec16<T>;
      if (vec16_ok({px, po}, {channels}, V16)) {
        group_norm_nhwc_split_launch<T, V16>(device_, px, pw, pb, ps, batch, spatial, channels, groups, eps, silu, po);
      } else {
        group_norm_nhwc_split_launch<T, 1>(device_, px, pw, pb, ps, batch, spatial, channels, groups, eps, silu, po);
      }
      return;
    }
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data());
    T* po = static_cast<T*>(out.data());
    const T* pw = data_or_null<T>(weight);
    const T* pb = data_or_null<T>(bias);
    const T* ps = data_or_null<T>(shift);
    const unsigned grid = (unsigned)(batch * groups);
    constexpr size_t smem = 32 * sizeof(double);
    auto launch = [&](auto v_tag) {
      constexpr int V = decltype(v_tag)::value;
      if (silu) {
        group_norm_nhwc_kernel<T, V, true><<<grid, kGroupBlockThreads, smem, device_.stream()>>>(
            px, pw, pb, ps, spatial, channels, per_group, (int64_t)groups, eps, po);
      } else {
        group_norm_nhwc_kernel<T, V, false><<<grid, kGroupBlockThreads, smem, device_.stream()>>>(
            px, pw, pb, ps, spatial, channels, per_group, (int64_t)groups, eps, po);
      }
      RBEE_GPU_CHECK_LAUNCH();
    };
    // The widest vector (up to 16 bytes) that divides a strip and keeps every strip start aligned.
    constexpr int V16 = kVec16<T>;
    auto fits = [&](int v) { return V16 >= v && vec16_ok({px, po}, {per_group, channels}, v); };
    if (fits(8)) launch(std::integral_constant<int, V16 >= 8 ? 8 : 1>{});
    else if (fits(4)) launch(std::integral_constant<int, V16 >= 4 ? 4 : 1>{});
    else if (fits(2)) launch(std::integral_constant<int, V16 >= 2 ? 2 : 1>{});
    else launch(std::integral_constant<int, 1>{});
  });
}

}  // namespace rbee::gpu
