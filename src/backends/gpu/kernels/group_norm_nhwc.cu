// GPU group_norm_nhwc (op_table.def GroupNormNhwc): group norm (+ SiLU, + a [N, C] shift) over channels-last maps
// x, out [N, S, C]; the channels-first group_norm is in norm.cu. Two paths:
//  - row chunks (maps of more than kOneBlockMaxSpatial positions): three kernels that read x as whole rows of
//    16-byte vectors of consecutive channels, the first and last with about RBEE_GROUP_NORM_NHWC_BLOCKS blocks a
//    multiprocessor (SD's maps have only 64 (image, group) pairs):
//    1. statistics: block (chunk, image) sums its chunk of rows per channel, around each group's pivot p_g (the
//       group's first v on row 0 of the image, v = x + shift[image, c]): s1 = sum of (v - p_g), s2 = sum of
//       (v - p_g)^2 per thread in f32 for 16-bit x (a thread sees a few hundred rows at most on SD's maps), else
//       f64; then in f64 in a fixed order over the block's threads and the group's channels, into
//       partial[image][chunk][group];
//    2. finalize: one warp per (image, group) adds the group's partials in a fixed order (f64): mean = p_g + s1 / n,
//       var = (s2 - s1^2 / n) / n (shifted data: exact in exact arithmetic; with p_g a value of the group, rounding
//       grows only with (p_g - mean)^2 / var);
//    3. apply: block (chunk, image) writes act((v - mean) * rstd * w[c] + b[c]) over its chunk of rows, rounded
//       once.
//    No counters, no atomics: the result does not depend on the blocks' order, and a graph replays it as it is.
//  - one block per (image, group) (maps of up to kOneBlockMaxSpatial positions; every map with
//    RBEE_GROUP_NORM_NHWC_ONE_BLOCK=1; channel counts whose per-row-lane sums exceed the statistics kernel's shared
//    memory): the group's S strips of C/groups channels summed and normalized by one block,
//    group_norm_block_kernel's arithmetic. One launch: on SD's 8x8 and 16x16 maps the row chunks' three launches
//    cost more than they save (H100, docs/perf-notes/sd-speed.md, session 11).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
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

namespace gn_rows {

// Threads a block of the statistics and apply kernels (at most; the launch rounds lanes x row lanes up to whole
// warps).
constexpr int kMaxThreads = 256;

template <class Acc>
struct Sums {
  Acc s1, s2;
};
// The per-thread accumulator of T's statistics: f32 for 16-bit x, else f64.
template <class T>
using AccOf = std::conditional_t<sizeof(T) == 2, float, double>;

// The launch shape the statistics and apply kernels share. A block's threads are lanes x row_lanes (+ idle threads
// up to a whole warp): lane l owns vector columns l, l + lanes, ... (V channels each) of the row, row lane r the rows
// r0 + r, r0 + r + row_lanes, ... of the block's chunk. `sub` threads (a power of two dividing the warp) add up one
// group in the statistics block.
struct Plan {
  int lanes, row_lanes, threads, sub;
  int64_t stat_rows, stat_chunks;    // statistics: rows per chunk, chunks per image (grid.x)
  int64_t apply_rows, apply_chunks;  // apply: the same for the apply kernel
  size_t stat_smem, apply_smem;      // dynamic shared memory of each kernel
};

// v = x + shift of channel c in the compute type (the value the statistics and the output see).
template <class T>
__device__ inline compute_t<T> shifted(const T* xi, const T* si, int c) {
  using C = compute_t<T>;
  return (C)load(xi + c) + (si ? (C)load(si + c) : C(0));
}

// Statistics. grid (stat_chunks, batch). x [batch, spatial, channels], shift [batch, channels] or null; partial
// [batch][stat_chunks][groups] gets the chunk's f64 sums of (v - p_g) and (v - p_g)^2 per group. Dynamic shared
// memory: row_lanes x channels Sums<AccOf<T>>. Every thread reaches both barriers and makes the same shuffles.
template <class T, int V>
__global__ void stats_kernel(const T* x, const T* shift, int64_t spatial, int channels, int per_group, int groups,
                             int64_t rows_per_chunk, int lanes, int row_lanes, int sub, Sums<double>* partial) {
  using C = compute_t<T>;
  using Acc = AccOf<T>;
  Sums<Acc>* red = dynamic_smem<Sums<Acc>>();  // [row_lanes][channels]
  const int tid = (int)threadIdx.x, lane = tid % lanes, rl = tid / lanes;
  const int64_t img = blockIdx.y, chunk = blockIdx.x;
  const int64_t r0 = chunk * rows_per_chunk, r1 = r0 + rows_per_chunk < spatial ? r0 + rows_per_chunk : spatial;
  const int vcols = channels / V;
  const T* xi = x + img * spatial * channels;
  const T* si = shift ? shift + img * channels : nullptr;
  if (rl < row_lanes) {
    const int64_t step = (int64_t)row_lanes * channels;
    for (int vc = lane; vc < vcols; vc += lanes) {
      Acc pivot[V], s1[V], s2[V];
      C sh[V];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int c = vc * V + k;
        pivot[k] = (Acc)shifted(xi, si, c / per_group * per_group);
        sh[k] = si ? (C)load(si + c) : C(0);
        s1[k] = s2[k] = Acc(0);
      }
      const T* p = xi + (r0 + rl) * channels + vc * V;
#pragma unroll 4
      for (int64_t r = r0 + rl; r < r1; r += row_lanes, p += step) {
        C v[V];
        load_vec<T, V>(p, v);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const Acc d = (Acc)(v[k] + sh[k]) - pivot[k];
          s1[k] += d;
          s2[k] += d * d;
        }
      }
#pragma unroll
      for (int k = 0; k < V; ++k) red[rl * channels + vc * V + k] = {s1[k], s2[k]};
    }
  }
  __syncthreads();
  // Group g: its per_group channels x row_lanes sums, item i = (row lane i / per_group, channel i % per_group);
  // sub threads take every sub-th item, then a butterfly adds their totals (the same order in every block).
  const int per_pass = (int)blockDim.x / sub, gl = tid / sub, part = tid % sub, items = per_group * row_lanes;
  for (int gb = 0; gb < groups; gb += per_pass) {
    const int g = gb + gl;
    double t1 = 0, t2 = 0;
    if (g < groups) {
      for (int i = part; i < items; i += sub) {
        const Sums<Acc> u = red[(i / per_group) * channels + g * per_group + i % per_group];
        t1 += (double)u.s1;
        t2 += (double)u.s2;
      }
    }
    for (int m = sub / 2; m > 0; m >>= 1) {
      t1 += shfl_xor(t1, m);
      t2 += shfl_xor(t2, m);
    }
    if (part == 0 && g < groups) partial[(img * gridDim.x + chunk) * groups + g] = {t1, t2};
  }
}

// Sums of group g's chunk partials pi[k * groups + g], k < chunks, in a fixed order: `sub` consecutive threads (a
// power of two dividing the warp; `part` = this thread's index among them) add every sub-th chunk, then a butterfly
// adds their totals, which every one of them gets. Every thread of the warp makes the same shuffles (a g past the
// last group reads nothing and adds zeros).
__device__ inline Sums<double> group_totals(const Sums<double>* pi, int64_t chunks, int groups, int g, int part,
                                            int sub) {
  double t1 = 0, t2 = 0;
  if (g < groups) {
    for (int64_t k = part; k < chunks; k += sub) {
      t1 += pi[k * groups + g].s1;
      t2 += pi[k * groups + g].s2;
    }
  }
  for (int m = sub / 2; m > 0; m >>= 1) {
    t1 += shfl_xor(t1, m);
    t2 += shfl_xor(t2, m);
  }
  return {t1, t2};
}

// Mean and rstd of group g of image xi (shift si or null) from its totals t over n values (file comment).
template <class T>
__device__ inline void group_mean_rstd(const T* xi, const T* si, int g, int per_group, const Sums<double>& t, double n,
                                       float eps, compute_t<T>* out2) {
  using C = compute_t<T>;
  const double pivot = (double)(AccOf<T>)shifted(xi, si, g * per_group);
  const double var = fmax((t.s2 - t.s1 * t.s1 / n) / n, 0.0);
  out2[0] = (C)(pivot + t.s1 / n);
  out2[1] = (C)(1.0 / sqrt(var + (double)eps));
}

// Finalize: one warp per (image, group), item = blockIdx.x * warps + warp;
// stats[2 * item], stats[2 * item + 1] = the group's mean and rstd.
template <class T>
__global__ void finalize_kernel(const T* x, const T* shift, const Sums<double>* partial, int64_t spatial,
                                int channels, int per_group, int groups, int64_t batch, int64_t stat_chunks,
                                float eps, compute_t<T>* stats) {
  constexpr int W = RBEE_DEVICE_WARP_SIZE;
  const int64_t item = (int64_t)blockIdx.x * (blockDim.x / W) + threadIdx.x / W;
  const bool active = item < batch * groups;
  const int64_t img = active ? item / groups : 0;
  const int g = active ? (int)(item % groups) : groups;  // past the last group: zeros
  const Sums<double> t =
      group_totals(partial + img * stat_chunks * groups, stat_chunks, groups, g, (int)threadIdx.x % W, W);
  if (active && threadIdx.x % W == 0) {
    group_mean_rstd<T>(x + img * spatial * channels, shift ? shift + img * channels : nullptr, g, per_group, t,
                       (double)spatial * (double)per_group, eps, stats + 2 * item);
  }
}

// Apply. grid (apply_chunks, batch); w, b [channels] or null; out like x; final [batch][groups][2] each group's mean
// and rstd (the finalize kernel's). Dynamic shared memory: groups x 2 compute_t<T>.
template <class T, int V, bool SILU>
__global__ void apply_kernel(const T* x, const T* w, const T* b, const T* shift, const compute_t<T>* final,
                             int64_t spatial, int channels, int per_group, int groups, int64_t rows_per_chunk,
                             int lanes, int row_lanes, T* out) {
  using C = compute_t<T>;
  C* stat = dynamic_smem<C>();  // [groups][2]: mean, rstd
  const int tid = (int)threadIdx.x;
  const int64_t img = blockIdx.y, chunk = blockIdx.x;
  const T* xi = x + img * spatial * channels;
  const T* si = shift ? shift + img * channels : nullptr;
  for (int i = tid; i < 2 * groups; i += (int)blockDim.x) stat[i] = final[img * groups * 2 + i];
  __syncthreads();
  const int lane = tid % lanes, rl = tid / lanes;
  if (rl >= row_lanes) return;
  const int64_t r0 = chunk * rows_per_chunk, r1 = r0 + rows_per_chunk < spatial ? r0 + rows_per_chunk : spatial;
  const int vcols = channels / V;
  const int64_t step = (int64_t)row_lanes * channels;
  T* yi = out + img * spatial * channels;
  for (int vc = lane; vc < vcols; vc += lanes) {
    // y = (x - (mean - shift)) * (rstd * w) + b per channel: the shift folded into the mean.
    C m[V], a[V], bb[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int c = vc * V + k, g = c / per_group;
      m[k] = stat[2 * g] - (si ? (C)load(si + c) : C(0));
      a[k] = w ? stat[2 * g + 1] * (C)load(w + c) : stat[2 * g + 1];
      bb[k] = b ? (C)load(b + c) : C(0);
    }
    const int64_t first = (r0 + rl) * channels + vc * V;
    const T* p = xi + first;
    T* q = yi + first;
    int64_t r = r0 + rl;
    // Four rows' loads in flight before their stores (x and out may not be assumed apart).
    for (; r + 3 * row_lanes < r1; r += 4 * row_lanes, p += 4 * step, q += 4 * step) {
      C v[4][V];
#pragma unroll
      for (int u = 0; u < 4; ++u) load_vec<T, V>(p + u * step, v[u]);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          C y = (v[u][k] - m[k]) * a[k] + bb[k];
          if constexpr (SILU) y = y / (C(1) + exp(-y));
          v[u][k] = y;
        }
        store_vec<T, V>(q + u * step, v[u]);
      }
    }
    for (; r < r1; r += row_lanes, p += step, q += step) {
      C v[V];
      load_vec<T, V>(p, v);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        C y = (v[k] - m[k]) * a[k] + bb[k];
        if constexpr (SILU) y = y / (C(1) + exp(-y));
        v[k] = y;
      }
      store_vec<T, V>(q, v);
    }
  }
}

// Maps of at most this many positions (S = H * W) take the one-block kernel: on the H100 it beat the row chunks on
// each of SD 1.5's 8x8 and 16x16 shapes but one (equal), and lost on every 32x32 and larger one.
constexpr int64_t kOneBlockMaxSpatial = 256;

// Blocks per multiprocessor each kernel aims at (RBEE_GROUP_NORM_NHWC_BLOCKS, 1 .. 16; default 2).
int blocks_per_sm() {
  static const int n = (int)env::integer_or("RBEE_GROUP_NORM_NHWC_BLOCKS", 2, 1, 16);
  return n;
}

// The launch shape for x [batch, spatial, channels] in V-vectors on a device with `sms` multiprocessors and warps
// of `warp` threads, or nullopt when the statistics' per-row-lane sums do not fit kMaxSmem.
template <class T, int V>
std::optional<Plan> plan_for(int64_t batch, int64_t spatial, int channels, int groups, int sms, int warp) {
  constexpr size_t kMaxSmem = 48 << 10;
  using Acc = AccOf<T>;
  using C = compute_t<T>;
  Plan p{};
  const int vcols = channels / V;
  p.lanes = std::min(vcols, kMaxThreads);
  p.row_lanes = std::max(1, kMaxThreads / p.lanes);
  p.threads = (int)ceil_div((int64_t)p.lanes * p.row_lanes, warp) * warp;
  int sub = 1;
  while (sub * 2 <= warp && sub * 2 * groups <= p.threads) sub *= 2;
  p.sub = sub;
  // Chunks per image: about blocks_per_sm() blocks a multiprocessor over the batch, whole rows, at most one a row.
  const int64_t want = std::clamp<int64_t>(ceil_div((int64_t)blocks_per_sm() * sms, batch), 1, spatial);
  p.stat_rows = p.apply_rows = ceil_div(spatial, want);
  p.stat_chunks = p.apply_chunks = ceil_div(spatial, p.stat_rows);
  p.stat_smem = (size_t)p.row_lanes * (size_t)channels * sizeof(Sums<Acc>);
  p.apply_smem = (size_t)groups * 2 * sizeof(C);
  if (p.stat_smem > kMaxSmem || p.apply_smem > kMaxSmem) return std::nullopt;
  return p;
}

// The row-chunk path (file comment) for V-element vectors: V divides channels; x, out, shift, w and b 16-byte
// aligned when V > 1. Returns false (nothing launched) when plan_for declines the shape.
template <class T, int V>
bool launch(GpuDevice& dev, const T* x, const T* w, const T* b, const T* shift, int64_t batch, int64_t spatial,
            int64_t channels, int64_t groups, float eps, bool silu, T* out) {
  const std::optional<Plan> plan =
      plan_for<T, V>(batch, spatial, (int)channels, (int)groups, std::max(1, dev.props().multiprocessors),
                     dev.props().warp_size);
  if (!plan) return false;
  const Plan& p = *plan;
  const Tensor partial = Tensor::empty({batch * p.stat_chunks * groups * 2}, DType::F64, dev);
  auto* pp = static_cast<Sums<double>*>(partial.data());
  const int per_group = (int)(channels / groups);
  stats_kernel<T, V><<<dim3((unsigned)p.stat_chunks, (unsigned)batch), p.threads, p.stat_smem, dev.stream()>>>(
      x, shift, spatial, (int)channels, per_group, (int)groups, p.stat_rows, p.lanes, p.row_lanes, p.sub, pp);
  RBEE_GPU_CHECK_LAUNCH();
  using C = compute_t<T>;
  const Tensor final_stats =
      Tensor::empty({batch * groups * 2}, std::is_same_v<C, double> ? DType::F64 : DType::F32, dev);
  C* pf = static_cast<C*>(final_stats.data());
  constexpr int kFinalizeThreads = 256;
  const int64_t per_block = kFinalizeThreads / dev.props().warp_size;
  finalize_kernel<T><<<(unsigned)ceil_div(batch * groups, per_block), kFinalizeThreads, 0, dev.stream()>>>(
      x, shift, pp, spatial, (int)channels, per_group, (int)groups, batch, p.stat_chunks, eps, pf);
  RBEE_GPU_CHECK_LAUNCH();
  const dim3 grid((unsigned)p.apply_chunks, (unsigned)batch);
  if (silu) {
    apply_kernel<T, V, true><<<grid, p.threads, p.apply_smem, dev.stream()>>>(
        x, w, b, shift, pf, spatial, (int)channels, per_group, (int)groups, p.apply_rows, p.lanes, p.row_lanes, out);
  } else {
    apply_kernel<T, V, false><<<grid, p.threads, p.apply_smem, dev.stream()>>>(
        x, w, b, shift, pf, spatial, (int)channels, per_group, (int)groups, p.apply_rows, p.lanes, p.row_lanes, out);
  }
  RBEE_GPU_CHECK_LAUNCH();
  return true;
}

}  // namespace gn_rows

// RBEE_GROUP_NORM_NHWC_ONE_BLOCK=1: every group_norm_nhwc through group_norm_nhwc_kernel (one block per (image,
// group): 64 blocks on SD's maps, 2.6x the row chunks' time on SD 1.5's 64x64 maps, H100) instead of the row-chunk
// kernels (A/B).
bool group_norm_nhwc_one_block() {
  static const bool on = env::flag_or("RBEE_GROUP_NORM_NHWC_ONE_BLOCK", false);
  return on;
}

}  // namespace

void GpuKernels::group_norm_nhwc(const Tensor& x, int groups, const Tensor* weight, const Tensor* bias,
                                 const Tensor* shift, float eps, bool silu, Tensor& out) {
  device_.activate();
  const int64_t batch = x.dim(0), spatial = x.dim(1), channels = x.dim(2), per_group = channels / groups;
  if (batch == 0 || spatial == 0 || per_group == 0) return;
  visit_float_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (!group_norm_nhwc_one_block() && spatial > gn_rows::kOneBlockMaxSpatial) {
      const T* px = static_cast<const T*>(x.data());
      T* po = static_cast<T*>(out.data());
      const T* pw = data_or_null<T>(weight);
      const T* pb = data_or_null<T>(bias);
      const T* ps = data_or_null<T>(shift);
      constexpr int V16 = kVec16<T>;
      const bool done =
          vec16_ok({px, po}, {channels}, V16)
              ? gn_rows::launch<T, V16>(device_, px, pw, pb, ps, batch, spatial, channels, groups, eps, silu, po)
              : gn_rows::launch<T, 1>(device_, px, pw, pb, ps, batch, spatial, channels, groups, eps, silu, po);
      if (done) return;
    }
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
