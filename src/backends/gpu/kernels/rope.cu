// GPU rotary position embedding, with the CPU's numerics (cpu_rope.cpp).
//
// x [N, H, D] (last axis contiguous, any strides on N and H) -> out [N, H, D] contiguous. The angle
// positions[n] * inv_freq[i] is formed in f64 and reduced to [-pi, pi] before the f32 cos/sin (f64 inputs take
// cos/sin of the unreduced f64 angle), both scaled by mscale; with RopeParams::freq_ratio the angle is
// llama.cpp's running f32 product instead (rope_cos_sin). Normal mode rotates pairs (2i, 2i+1), Neox pairs
// (i, i + rotary_dim/2); dims >= rotary_dim are copied.
//
// Work units, per (token, head): rotary units of V pairs each (pairs i0 .. i0+V-1; Normal: the 2V elements from
// 2*i0, Neox: V elements from i0 and V from i0 + half), then pass-through units of V elements. Each unit is two
// or one 16-byte accesses when V = 16 bytes of T, which needs half, rotary_dim, D and the N/H strides to be
// multiples of V and both tensors 16-byte aligned; otherwise V = 1.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/ops_common.cuh"
#include "backends/gpu/kernels/quant_launch.h"
#include "backends/gpu/kernels/vec.cuh"

namespace rbee::gpu {

namespace {

constexpr int kThreads = 256;
constexpr double kTwoPi = 6.283185307179586476925286766559;

// cos and sin of positions * inv_freq, times mscale, in the compute type C. freq_ratio > 0: of llama.cpp's angle
// for pair i instead, the running f32 product position * r * ... * r (i factors r), as the CPU's.
template <class C>
__device__ inline void rope_cos_sin(int32_t position, const float* inv_freq, int64_t i, float freq_ratio,
                                    float mscale, C& c, C& s) {
  if (freq_ratio > 0.f) {
    float angle = (float)position;
    for (int64_t k = 0; k < i; ++k) angle = mul_rn(angle, freq_ratio);
    if constexpr (std::is_same_v<C, double>) {  // f64 cos/sin of the f32 angle
      c = cos((double)angle) * (double)mscale;
      s = sin((double)angle) * (double)mscale;
    } else {
      c = cosf(angle) * mscale;
      s = sinf(angle) * mscale;
    }
    return;
  }
  if constexpr (std::is_same_v<C, double>) {
    const double angle = (double)position * (double)inv_freq[i];
    c = cos(angle) * (double)mscale;
    s = sin(angle) * (double)mscale;
  } else {
    double a = (double)position * (double)inv_freq[i];
    a -= kTwoPi * rint(a / kTwoPi);
    const float angle = (float)a;
    c = cosf(angle) * mscale;
    s = sinf(angle) * mscale;
  }
}

struct RopeGeometry {
  int64_t tokens, heads, dim, half;  // half = rotary_dim / 2
  int64_t token_stride, head_stride;
  int64_t rot_units, units;  // per (token, head): rotary units, all units
  bool neox;
  float mscale;
  float freq_ratio;  // RopeParams::freq_ratio
};

template <class T, int V>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(const T* x, const int32_t* positions, const float* inv_freq, RopeGeometry g, T* out) {
  using C = compute_t<T>;
  const int64_t total = g.tokens * g.heads * g.units;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t u = e % g.units, h = e / g.units % g.heads, n = e / (g.units * g.heads);
    const T* src = x + n * g.token_stride + h * g.head_stride;
    T* dst = out + (n * g.heads + h) * g.dim;
    if (u >= g.rot_units) {  // pass-through dims
      const int64_t d = 2 * g.half + (u - g.rot_units) * V;
      if constexpr (V * sizeof(T) == 16) {
        *reinterpret_cast<Bytes16*>(dst + d) = *reinterpret_cast<const Bytes16*>(src + d);
      } else {
#pragma unroll
        for (int k = 0; k < V; ++k) dst[d + k] = src[d + k];  // bit-exact copy
      }
      continue;
    }
    const int64_t i0 = u * V;
    // a[k], b[k]: the two elements of pair i0 + k.
    C a[V], b[V];
    const int32_t pos = positions[n];
    if (g.neox) {
      load_vec<T, V>(src + i0, a);
      load_vec<T, V>(src + i0 + g.half, b);
    } else {
      C lo[V], hi[V];  // elements 2*i0 .. 2*i0 + 2V - 1, interleaved pairs
      load_vec<T, V>(src + 2 * i0, lo);
      load_vec<T, V>(src + 2 * i0 + V, hi);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int64_t m = 2 * k;
        a[k] = m < V ? lo[m] : hi[m - V];
        b[k] = m + 1 < V ? lo[m + 1] : hi[m + 1 - V];
      }
    }
#pragma unroll
    for (int k = 0; k < V; ++k) {
      C c, s;
      rope_cos_sin<C>(pos, inv_freq, i0 + k, g.freq_ratio, g.mscale, c, s);
      // The CPU's roundings: a c - b s = fma(a, c, -(b s)), a s + b c = fma(a, s, b c).
      const C ra = fma(a[k], c, -(b[k] * s)), rb = fma(a[k], s, b[k] * c);
      a[k] = ra;
      b[k] = rb;
    }
    if (g.neox) {
      store_vec<T, V>(dst + i0, a);
      store_vec<T, V>(dst + i0 + g.half, b);
    } else {
      C lo[V], hi[V];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int64_t m = 2 * k;
        if (m < V) lo[m] = a[k];
        else hi[m - V] = a[k];
        if (m + 1 < V) lo[m + 1] = b[k];
        else hi[m + 1 - V] = b[k];
      }
      store_vec<T, V>(dst + 2 * i0, lo);
      store_vec<T, V>(dst + 2 * i0 + V, hi);
    }
  }
}

template <class T, int V>
void launch_rope(GpuDevice& dev, const T* x, const int32_t* positions, const float* inv_freq, RopeGeometry g,
                 T* out) {
  g.rot_units = g.half / V;
  g.units = g.rot_units + (g.dim - 2 * g.half) / V;
  const int64_t total = g.tokens * g.heads * g.units;
  if (total == 0) return;
  rope_kernel<T, V><<<grid_for(total, kThreads), kThreads, 0, dev.stream()>>>(x, positions, inv_freq, g, out);
  RBEE_GPU_CHECK_LAUNCH();
}

// rope_kv_cache_write: q, k, v of one step ([N, H, D] views, contiguous last axis) -> rope(q) into q_out
// [N, Hq, D], rope(k) and v into the caches at each token's slot, in one launch. Work units as in rope_kernel,
// over Hq + 2 Hkv heads per token (v heads are copied unit by unit). Slots outside the cache are skipped (the
// front-end checks host slots only).
// Blocks belong to one token each (`chunks` blocks per token): a block first writes the token's cos and sin of
// every rotary pair into shared memory (rope_cos_sin, the same values as computing them per element), then rotates
// its units from that table. Every q and k head of a token shares the table: a decode step of Llama-2-7B computes
// 64 angles a token instead of 64 per head (with llama.cpp's running-product angles, pair i costs i serial
// multiplications: per element, that chain was most of the kernel's time).
struct RopeKvGeometry {
  int64_t tokens, dim, half;
  int hq, hkv;
  int64_t q_s0, q_s1, k_s0, k_s1, v_s0, v_s1;
  int64_t rot_units, units;
  int64_t capacity;
  int64_t chunks;  // blocks per token
  bool neox;
  float mscale, freq_ratio;
};

template <class O, int V>
__global__ void __launch_bounds__(kThreads)
    rope_kv_kernel(const float* q, const float* k, const float* v, const int32_t* positions, const float* inv_freq,
                   const int32_t* slots, RopeKvGeometry g, float* q_out, O* k_cache, O* v_cache) {
  extern __shared__ unsigned char rope_table[];
  float* cos_sin = reinterpret_cast<float*>(rope_table);  // [2][half]: cos, then sin, of the block's token's pairs
  grid_dependency_trigger();
  grid_dependency_wait();  // q, k, v come from the projection just before (launch_decode_kernel)
  const int heads = g.hq + 2 * g.hkv;
  const int64_t n = blockIdx.x / g.chunks;  // the block's token
  const int64_t per_token = heads * g.units;
  const int32_t pos = positions[n];
  for (int64_t i = threadIdx.x; i < g.half; i += blockDim.x) {
    rope_cos_sin<float>(pos, inv_freq, i, g.freq_ratio, g.mscale, cos_sin[i], cos_sin[g.half + i]);
  }
  __syncthreads();
  for (int64_t w = (blockIdx.x % g.chunks) * blockDim.x + threadIdx.x; w < per_token; w += g.chunks * blockDim.x) {
    const int64_t u = w % g.units;
    const int h = (int)(w / g.units);
    const int kind = h < g.hq ? 0 : h < g.hq + g.hkv ? 1 : 2;  // q, k, v head
    const int hh = kind == 0 ? h : kind == 1 ? h - g.hq : h - g.hq - g.hkv;
    const float* src = kind == 0 ? q + n * g.q_s0 + hh * g.q_s1
                       : kind == 1 ? k + n * g.k_s0 + hh * g.k_s1
                                   : v + n * g.v_s0 + hh * g.v_s1;
    float* qdst = nullptr;
    O* cdst = nullptr;
    if (kind == 0) {
      qdst = q_out + (n * g.hq + hh) * g.dim;
    } else {
      const int64_t slot = slots[n];
      if (slot < 0 || slot >= g.capacity) continue;
      cdst = (kind == 1 ? k_cache : v_cache) + (slot * g.hkv + hh) * g.dim;
    }
    // The unit's elements: two runs of V (a, b) for rotary units, one run (a) for pass-through units.
    int64_t at_a, at_b = -1;
    if (u >= g.rot_units) {
      at_a = 2 * g.half + (u - g.rot_units) * V;
    } else if (g.neox) {
      at_a = u * V;
      at_b = u * V + g.half;
    } else {
      at_a = 2 * u * V;
      at_b = 2 * u * V + V;
    }
    float a[V], b[V];
    load_vec<float, V>(src + at_a, a);
    if (at_b >= 0) load_vec<float, V>(src + at_b, b);
    if (at_b >= 0 && kind != 2) {
      // Pairs (a[k], b[k]) for Neox; Normal interleaves them over the two runs: pair i0 + k is elements 2k, 2k + 1
      // of the 2V elements a | b.
      float x0[V], x1[V];
#pragma unroll
      for (int t = 0; t < V; ++t) {
        const int m = 2 * t;
        x0[t] = g.neox ? a[t] : (m < V ? a[m] : b[m - V]);
        x1[t] = g.neox ? b[t] : (m + 1 < V ? a[m + 1] : b[m + 1 - V]);
      }
      const int64_t i0 = u * V;
#pragma unroll
      for (int t = 0; t < V; ++t) {
        const float c = cos_sin[i0 + t], sn = cos_sin[g.half + i0 + t];
        // The CPU's roundings: a c - b s = fma(a, c, -(b s)), a s + b c = fma(a, s, b c).
        const float ra = fmaf(x0[t], c, -(x1[t] * sn)), rb = fmaf(x0[t], sn, x1[t] * c);
        x0[t] = ra;
        x1[t] = rb;
      }
#pragma unroll
      for (int t = 0; t < V; ++t) {
        const int m = 2 * t;
        if (g.neox) {
          a[t] = x0[t];
          b[t] = x1[t];
        } else {
          if (m < V) a[m] = x0[t];
          else b[m - V] = x0[t];
          if (m + 1 < V) a[m + 1] = x1[t];
          else b[m + 1 - V] = x1[t];
        }
      }
    }
    if (qdst) {
      store_vec<float, V>(qdst + at_a, a);
      if (at_b >= 0) store_vec<float, V>(qdst + at_b, b);
    } else {
#pragma unroll
      for (int t = 0; t < V; ++t) store(cdst + at_a + t, (compute_t<O>)a[t]);
      if (at_b >= 0) {
#pragma unroll
        for (int t = 0; t < V; ++t) store(cdst + at_b + t, (compute_t<O>)b[t]);
      }
    }
  }
}

template <class O, int V>
void launch_rope_kv(GpuDevice& dev, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                    const Tensor& inv_freq, const Tensor& slots, RopeKvGeometry g, Tensor& q_out, Tensor& k_cache,
                    Tensor& v_cache) {
  g.rot_units = g.half / V;
  g.units = g.rot_units + (g.dim - 2 * g.half) / V;
  const int64_t per_token = (g.hq + 2 * g.hkv) * g.units;
  if (g.tokens * per_token == 0) return;
  g.chunks = (per_token + kThreads - 1) / kThreads;
  RBEE_CHECK(g.tokens * g.chunks <= std::numeric_limits<int32_t>::max(), "rope_kv_cache_write: {} tokens", g.tokens);
  const size_t table_bytes = (size_t)(2 * std::max<int64_t>(g.half, 1)) * sizeof(float);
  quant::launch_decode_kernel(
      rope_kv_kernel<O, V>, dim3((unsigned)(g.tokens * g.chunks)), dim3(kThreads), table_bytes, dev.stream(),
      static_cast<const float*>(q.data()), static_cast<const float*>(k.data()), static_cast<const float*>(v.data()),
      static_cast<const int32_t*>(positions.data()), static_cast<const float*>(inv_freq.data()),
      static_cast<const int32_t*>(slots.data()), g, static_cast<float*>(q_out.data()), static_cast<O*>(k_cache.data()),
      static_cast<O*>(v_cache.data()));
}

}  // namespace

void GpuKernels::rope_kv_cache_write(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                                     const Tensor& inv_freq, const RopeParams& params, const Tensor& slots,
                                     Tensor& k_cache, Tensor& v_cache, Tensor& q_out) {
  device_.activate();
  RopeKvGeometry g{};
  g.tokens = q.dim(0);
  g.dim = q.dim(2);
  g.half = params.rotary_dim / 2;
  g.hq = (int)q.dim(1);
  g.hkv = (int)k.dim(1);
  g.q_s0 = q.stride(0);
  g.q_s1 = q.stride(1);
  g.k_s0 = k.stride(0);
  g.k_s1 = k.stride(1);
  g.v_s0 = v.stride(0);
  g.v_s1 = v.stride(1);
  g.capacity = k_cache.dim(0) * k_cache.dim(1);
  g.neox = params.mode == RopeMode::Neox;
  g.mscale = params.mscale;
  g.freq_ratio = params.freq_ratio;
  if (g.tokens * g.dim == 0) return;
  constexpr int kV = kVec16<float>;
  const bool vec = vec16_ok({q.data(), k.data(), v.data(), q_out.data()},
                            {g.half, g.dim, g.q_s0, g.q_s1, g.k_s0, g.k_s1, g.v_s0, g.v_s1}, kV);
  visit_float_storage(k_cache.dtype(), [&](auto tag) {
    using O = decltype(tag);
    if constexpr (std::is_same_v<O, double>) {
      RBEE_THROW(ErrorCode::Unsupported, "rope_kv_cache_write: f64 caches are not supported on {}",
                 RBEE_GPU_BACKEND_NAME);
    } else if (vec) {
      launch_rope_kv<O, kV>(device_, q, k, v, positions, inv_freq, slots, g, q_out, k_cache, v_cache);
    } else {
      launch_rope_kv<O, 1>(device_, q, k, v, positions, inv_freq, slots, g, q_out, k_cache, v_cache);
    }
  });
}

void GpuKernels::rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, const RopeParams& params,
                      Tensor& out) {
  device_.activate();
  RopeGeometry g{};
  g.tokens = x.dim(0);
  g.heads = x.dim(1);
  g.dim = x.dim(2);
  g.half = params.rotary_dim / 2;
  g.token_stride = x.stride(0);
  g.head_stride = x.stride(1);
  g.neox = params.mode == RopeMode::Neox;
  g.mscale = params.mscale;
  g.freq_ratio = params.freq_ratio;
  if (g.tokens * g.heads * g.dim == 0) return;
  visit_float_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int kV = kVec16<T>;
    const T* px = static_cast<const T*>(x.data());
    T* po = static_cast<T*>(out.data());
    const auto* pos = static_cast<const int32_t*>(positions.data());
    const auto* freq = static_cast<const float*>(inv_freq.data());
    if (vec16_ok({px, po}, {g.half, g.dim, g.token_stride, g.head_stride}, kV)) {
      launch_rope<T, kV>(device_, px, pos, freq, g, po);
    } else {
      launch_rope<T, 1>(device_, px, pos, freq, g, po);
    }
  });
}

}  // namespace rbee::gpu
