// The split path of group_norm_nhwc (op_table.def GroupNormNhwc; the one-block path is in norm.cu), three launches
// that read x row by row, so every warp loads whole 16-byte vectors of consecutive channels:
//  1. statistics: block (chunk, image) sums rows [chunk * rows, (chunk + 1) * rows) of the image per channel:
//     s1 = sum of (v - p_c), s2 = sum of (v - p_c)^2 with v = x + shift[image, c] and p_c the channel's v on row 0
//     (v - p_c = x - x[row 0]: the shift cancels; per thread in f32 for 16-bit x, else f64), into
//     partial[image][chunk][c];
//  2. finalize: one block per image turns each channel's chunks (added in chunk order, in f64) into its mean and sum
//     of squared deviations, then each group's into (mean, rstd): mean = the channels' mean, M2 = sum of their M2 +
//     S * sum of (m_c - mean)^2 (the exact merge of equal-count parts);
//  3. apply: act((v - mean) * rstd * w[c] + b[c]) per element, rounded once.
// Included by norm.cu only.
#pragma once

namespace rbee::gpu::gn_nhwc {

template <class Acc>
struct Sums {
  Acc s1, s2;
};

// grid (chunks, batch); blockDim.x threads as lanes x row_lanes: lane l takes vector columns l, l + lanes, ... (V
// channels each), row lane r rows r, r + row_lanes, ... of the chunk. Dynamic shared memory: blockDim.x * V Sums.
template <class T, int V>
__global__ void stats_kernel(const T* x, int64_t spatial, int64_t channels, int64_t rows_per_chunk,
                             int lanes, Sums<std::conditional_t<sizeof(T) == 2, float, double>>* partial) {
  using C = compute_t<T>;
  using Acc = std::conditional_t<sizeof(T) == 2, float, double>;
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
__global__ void finalize_kernel(const T* x, const T* shift, const Sums<std::conditional_t<sizeof(T) == 2, float, double>>* partial,
                                int64_t spatial, int64_t channels, int64_t chunks, int64_t groups, float eps,
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

}  // namespace rbee::gpu::gn_nhwc
