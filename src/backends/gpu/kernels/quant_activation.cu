// qmatmul's activation passes: x [M, K] f32 -> 8-bit levels, per-32 scales and per-16 level sums (QActs in
// quant_launch.h), optionally from a fused source:
//   quantize_activations         x itself
//   quantize_norm_activations    rms_norm(x [+ residual]) * weight (the sum stored too): norm_qmatmul
//   quantize_swiglu_activations  silu(gate) * up of a stacked gate/up row: swiglu_qmatmul
// and the same sources written as f32 rows for float weights (launch_norm_rows, launch_swiglu_rows), or as the
// 16-bit rows a vendor GEMM on F16 / BF16 weights reads (launch_norm_rows_half, launch_swiglu_rows_half: each value
// rounded to nearest-even from the same f32, as launch_round_to_half would round the f32 rows).
// Each thread quantizes 8 consecutive elements; the threads of one scale group (4 for a 32-block, 32 for a
// 256-block) agree on the scale through shuffles. The math is quant_math.cuh's: the 8-bit activation rule for
// 32-blocks (the Q8_1 quantizer's, and the CPU's), Q8_K's quantizer for 256-blocks. The norm follows the CPU's
// rms_norm numerics (f32 squares summed in double, the mean rounded to f32, 1 / sqrtf, x * rstd * w), so the
// levels are the ones the CPU's rms_norm + qmatmul would form. Every pass also issues the L2 prefetch of the
// weights the following matvec reads (Prefetch): the DRAM queue fills while this short pass and the launch
// boundary run. A quantizing pass also zeroes MMQ's split-K counters in the scratch (QActs::zeroed), so the MMQ
// launch after it needs no memset.
#include <algorithm>

#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/half_rows.h"
#include "backends/gpu/kernels/l2_prefetch.cuh"
#include "backends/gpu/kernels/quant_launch.h"
#include "backends/gpu/kernels/quant_math.cuh"

namespace rbee::gpu::quant {

namespace {

constexpr int kThreads = 256;
// Blocks an activation pass launches at least when it prefetches (the extra ones only prefetch): one SM's copy
// engine issues a bulk prefetch at a fraction of DRAM bandwidth, so the request stream is spread over SMs.
constexpr int64_t kPrefetchBlocks = 16;

struct QOut {
  int8_t* q;
  float* d;
  int32_t* s;
  int32_t* zeroed;   // n_zeroed ints the pass sets to 0 (QActs::zeroed), or null
  int64_t n_zeroed;
};

// The threads of the grid ask for the next launch's weights in L2 (l2_prefetch.cuh).
__device__ __forceinline__ void prefetch_weights(const Prefetch& pf) {
  prefetch_l2_span(pf.p, pf.bytes, grid_thread_blocked());
}

// The start of every activation pass: the L2 prefetch of the next launch's weights (they never depend on earlier
// launches), then let the next launch start early and wait for the producer of x (launch_decode_kernel); then
// the zeroing of o's counters (after the wait: earlier launches may still use that memory), by the grid's first
// n_zeroed threads (the grid covers them).
__device__ __forceinline__ void prefetch_then_wait(const Prefetch& pf, const QOut& o) {
  prefetch_weights(pf);
  grid_dependency_trigger();
  grid_dependency_wait();
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < o.n_zeroed) o.zeroed[i] = 0;
}

// Quantizes the 8 values v of flat elements [e, e + 8) (e a multiple of 8; rows contiguous, so element e lies
// in 32-group e / 32 and 16-group e / 16 of the flat arrays d and s) and stores levels, scale and sums. All
// threads of a scale group call it together (inactive ones with zeros, stores skipped).
template <bool kQ8K>
__device__ __forceinline__ void quantize8_store(const float (&v)[8], int64_t e, bool active, const QOut& o) {
  constexpr int kGroup = kQ8K ? 32 : 4;  // threads sharing a scale; groups never straddle warps or rows
  int8_t lv[8];
  float scale;
  if constexpr (!kQ8K) {
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(v[j]));
#pragma unroll
    for (int off = 1; off < kGroup; off <<= 1) amax = fmaxf(amax, shfl_xor(amax, off));
    const float dd = q8_0_scale(amax), inv = q8_act_inv_scale(amax);
#pragma unroll
    for (int j = 0; j < 8; ++j) lv[j] = q8_act_level(v[j], inv);
    scale = f16_to_float(::rbee::f32_to_f16_bits(dd));  // Q8_0 / Q8_1 store d as f16
  } else {
    // First element of largest magnitude: (amax, position in the 256-block, value), ties to the lower position.
    float amax = 0.f, max = 0.f;
    int pos = 1 << 30;
    const int base = (int)(e % 256);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (fabsf(v[j]) > amax) {
        amax = fabsf(v[j]);
        max = v[j];
        pos = base + j;
      }
    }
#pragma unroll
    for (int off = 1; off < kGroup; off <<= 1) {
      const float oa = shfl_xor(amax, off), om = shfl_xor(max, off);
      const int op = shfl_xor(pos, off);
      if (oa > amax || (oa == amax && op < pos)) {
        amax = oa;
        max = om;
        pos = op;
      }
    }
    if (amax == 0.f) {
#pragma unroll
      for (int j = 0; j < 8; ++j) lv[j] = 0;
      scale = 0.f;
    } else {
      const float iscale = q8_k_iscale(max);
#pragma unroll
      for (int j = 0; j < 8; ++j) lv[j] = q8_k_level(v[j], iscale);
      scale = 1.f / iscale;
    }
  }
  int sum = 0;
  uint32_t packed[2] = {0, 0};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    sum += lv[j];
    packed[j / 4] |= (uint32_t)(uint8_t)lv[j] << (8 * (j % 4));
  }
  sum += shfl_xor(sum, 1);  // the 16 elements of this thread and its neighbour
  if (active) {
    *reinterpret_cast<uint2*>(o.q + e) = make_uint2(packed[0], packed[1]);
    if (e % 32 == 0) o.d[e / 32] = scale;
    if (e % 16 == 0) o.s[e / 16] = sum;
  }
}

__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  const float4 b = *reinterpret_cast<const float4*>(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void store8(float* p, const float (&v)[8]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  *reinterpret_cast<float4*>(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
}
// The 8 values rounded to a 16-bit float type H (f16_t or bf16_t), one 16-byte store (p 16-byte aligned).
template <class H>
__device__ __forceinline__ void store8(H* p, const float (&v)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<H, bf16_t>) {
      w[i] = float_to_bf16(v[2 * i]) | ((uint32_t)float_to_bf16(v[2 * i + 1]) << 16);
    } else {
      w[i] = float_to_f16(v[2 * i]) | ((uint32_t)float_to_f16(v[2 * i + 1]) << 16);
    }
  }
  *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

// silu(g) * u with swiglu.cu's f32 numerics (e^-g clamped so it stays finite).
__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.f + expf(fminf(-g, 88.0f))) * u; }

// Activations of x [total8 * 8] (flat rows): quantized.
template <bool kQ8K>
__global__ void __launch_bounds__(kThreads)
    quantize_activations_kernel(const float* __restrict__ x, int64_t total8, QOut o, Prefetch pf) {
  prefetch_then_wait(pf, o);
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const bool active = i < total8;  // inactive threads still take part in the shuffles
  const int64_t e = active ? 8 * i : 0;
  float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (active) load8(x + e, v);
  quantize8_store<kQ8K>(v, e, active, o);
}

// Activations silu(gate) * up of gate_up [rows, 2 * inner] (inner a multiple of 8): element j of row r is
// gate_up[r, j] (gate) and gate_up[r, inner + j] (up). kQuant: quantized into o; else into out [rows, inner] as O
// (float, or a 16-bit float type: rounded).
template <bool kQ8K, bool kQuant, class O = float>
__global__ void __launch_bounds__(kThreads)
    swiglu_activations_kernel(const float* __restrict__ gate_up, int64_t inner, int64_t total8, QOut o,
                              O* __restrict__ out, Prefetch pf) {
  prefetch_then_wait(pf, o);
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const bool active = i < total8;
  const int64_t e = active ? 8 * i : 0;
  float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (active) {
    const int64_t row = e / inner, j = e % inner;
    float g[8], u[8];
    load8(gate_up + row * 2 * inner + j, g);
    load8(gate_up + row * 2 * inner + inner + j, u);
#pragma unroll
    for (int t = 0; t < 8; ++t) v[t] = silu_mul(g[t], u[t]);
  }
  if constexpr (kQuant) {
    quantize8_store<kQ8K>(v, e, active, o);
  } else {
    if (active) store8(out + e, v);
  }
}

// One block per row of x [rows, k] (blocks past the rows only prefetch) (k a multiple of 8; of 32 / 256 when quantizing): s = x (+ residual, then
// also stored to sum_out), h = s * rstd * weight with rstd = 1 / sqrtf(f32(sum of f32 squares, in double) / k
// + eps). kQuant: h quantized into o; else written to out [rows, k] as O (float, or a 16-bit float type: rounded).
template <bool kQ8K, bool kQuant, class O = float>
__global__ void __launch_bounds__(kThreads)
    norm_activations_kernel(const float* __restrict__ x, const float* __restrict__ residual,
                            const float* __restrict__ weight, float eps, int64_t rows, int64_t k,
                            float* __restrict__ sum_out, QOut o, O* __restrict__ out, Prefetch pf) {
  constexpr int W = RBEE_DEVICE_WARP_SIZE;
  __shared__ double partial[kThreads / W];
  prefetch_then_wait(pf, o);
  const int64_t row = blockIdx.x;
  if (row >= rows) return;  // a prefetch-only block (uniform over the block)
  const float* xr = x + row * k;
  const float* rr = residual ? residual + row * k : nullptr;
  double ss = 0;
  for (int64_t e = 8 * (int64_t)threadIdx.x; e < k; e += 8 * (int64_t)blockDim.x) {
    float v[8];
    load8(xr + e, v);
    if (rr) {
      float r[8];
      load8(rr + e, r);
#pragma unroll
      for (int t = 0; t < 8; ++t) v[t] += r[t];
      store8(sum_out + row * k + e, v);
    }
#pragma unroll
    for (int t = 0; t < 8; ++t) ss += (double)(v[t] * v[t]);
  }
  for (int off = W / 2; off > 0; off >>= 1) ss += shfl_xor(ss, off);
  if (threadIdx.x % W == 0) partial[threadIdx.x / W] = ss;
  __syncthreads();
  double total = 0;
  for (int w = 0; w < (int)blockDim.x / W; ++w) total += partial[w];
  const float mean = (float)(total / (double)k);
  const float rstd = 1.0f / sqrtf(mean + eps);
  // Second pass over the whole row in uniform steps (the quantizer's shuffles need every thread).
  for (int64_t base = 0; base < k; base += 8 * (int64_t)blockDim.x) {
    const int64_t e = base + 8 * (int64_t)threadIdx.x;
    const bool active = e < k;
    float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (active) {
      float w8[8];
      load8(xr + e, v);
      if (rr) {
        float r[8];
        load8(rr + e, r);
#pragma unroll
        for (int t = 0; t < 8; ++t) v[t] += r[t];
      }
      load8(weight + e, w8);
#pragma unroll
      for (int t = 0; t < 8; ++t) v[t] = mul_rn(mul_rn(v[t], rstd), w8[t]);
    }
    if constexpr (kQuant) {
      quantize8_store<kQ8K>(v, row * k + (active ? e : 0), active, o);
    } else {
      if (active) store8(out + row * k + e, v);
    }
  }
}

int64_t align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// Scratch for m x k quantized activations (levels, scales, sums) and `zeroed` counters after them, allocated
// from the device's cache.
QActs alloc_acts(GpuDevice& device, int64_t m, int64_t k, int64_t zeroed, Tensor& scratch, QOut& o) {
  const int64_t n = m * k;
  const int64_t q_bytes = align256(n), d_bytes = align256(n / 32 * 4), s_bytes = align256(n / 16 * 4);
  const int64_t z_bytes = align256(zeroed * 4);
  scratch = Tensor::empty({q_bytes + d_bytes + s_bytes + z_bytes}, DType::U8, device);
  char* base = static_cast<char*>(scratch.data());
  o.q = reinterpret_cast<int8_t*>(base);
  o.d = reinterpret_cast<float*>(base + q_bytes);
  o.s = reinterpret_cast<int32_t*>(base + q_bytes + d_bytes);
  o.zeroed = zeroed > 0 ? reinterpret_cast<int32_t*>(base + q_bytes + d_bytes + s_bytes) : nullptr;
  o.n_zeroed = zeroed > 0 ? zeroed : 0;
  QActs acts{o.q, o.d, o.s, k};
  acts.zeroed = o.zeroed;
  return acts;
}

Prefetch enabled(Prefetch pf) { return l2_prefetch_enabled() ? pf : Prefetch{}; }

// Blocks of a pass with `work` blocks of real work: at least kPrefetchBlocks when it prefetches.
unsigned grid_of(int64_t work, const Prefetch& pf) {
  return (unsigned)(pf.bytes > 0 ? std::max<int64_t>(work, kPrefetchBlocks) : work);
}
unsigned blocks_for(int64_t threads, const Prefetch& pf) { return grid_of((threads + kThreads - 1) / kThreads, pf); }
// At least enough blocks of kThreads for o's counters.
unsigned cover_zeroed(unsigned blocks, const QOut& o) {
  return (unsigned)std::max<int64_t>(blocks, (o.n_zeroed + kThreads - 1) / kThreads);
}

}  // namespace

QActs quantize_activations(GpuDevice& device, const float* x, int64_t m, int64_t k, bool q8k, Tensor& scratch,
                           int64_t zeroed, Prefetch pf) {
  QOut o;
  const QActs acts = alloc_acts(device, m, k, zeroed, scratch, o);
  const int64_t total8 = m * k / 8;
  if (total8 > 0 || o.n_zeroed > 0) {
    const Prefetch p = enabled(pf);
    launch_decode_kernel(q8k ? quantize_activations_kernel<true> : quantize_activations_kernel<false>,
                         dim3(cover_zeroed(blocks_for(total8, p), o)), dim3(kThreads), 0, device.stream(), x, total8,
                         o, p);
  }
  return acts;
}

QActs quantize_norm_activations(GpuDevice& device, const float* x, const float* residual, const float* weight,
                                float eps, int64_t m, int64_t k, bool q8k, float* sum_out, Tensor& scratch,
                                int64_t zeroed, Prefetch pf) {
  QOut o;
  const QActs acts = alloc_acts(device, m, k, zeroed, scratch, o);
  if ((m > 0 && k > 0) || o.n_zeroed > 0) {
    const Prefetch p = enabled(pf);
    launch_decode_kernel(q8k ? norm_activations_kernel<true, true> : norm_activations_kernel<false, true>,
                         dim3(cover_zeroed(grid_of(m, p), o)), dim3(kThreads), 0, device.stream(), x, residual,
                         weight, eps, m, k, sum_out, o, (float*)nullptr, p);
  }
  return acts;
}

QActs quantize_swiglu_activations(GpuDevice& device, const float* gate_up, int64_t m, int64_t inner, bool q8k,
                                  Tensor& scratch, int64_t zeroed, Prefetch pf) {
  QOut o;
  const QActs acts = alloc_acts(device, m, inner, zeroed, scratch, o);
  const int64_t total8 = m * inner / 8;
  if (total8 > 0 || o.n_zeroed > 0) {
    const Prefetch p = enabled(pf);
    launch_decode_kernel(q8k ? swiglu_activations_kernel<true, true> : swiglu_activations_kernel<false, true>,
                         dim3(cover_zeroed(blocks_for(total8, p), o)), dim3(kThreads), 0, device.stream(), gate_up,
                         inner, total8, o, (float*)nullptr, p);
  }
  return acts;
}

void launch_norm_rows(GpuDevice& device, const float* x, const float* residual, const float* weight, float eps,
                      int64_t m, int64_t k, float* sum_out, float* out, Prefetch pf) {
  if (m == 0 || k == 0) return;
  const Prefetch p = enabled(pf);
  launch_decode_kernel(norm_activations_kernel<false, false>, dim3(grid_of(m, p)), dim3(kThreads), 0, device.stream(),
                       x, residual, weight, eps, m, k, sum_out, QOut{}, out, p);
}

void launch_swiglu_rows(GpuDevice& device, const float* gate_up, int64_t m, int64_t inner, float* out, Prefetch pf) {
  const int64_t total8 = m * inner / 8;
  if (total8 == 0) return;
  const Prefetch p = enabled(pf);
  launch_decode_kernel(swiglu_activations_kernel<false, false>, dim3(blocks_for(total8, p)), dim3(kThreads), 0,
                       device.stream(), gate_up, inner, total8, QOut{}, out, p);
}

void launch_norm_rows_half(GpuDevice& device, DType half_type, const float* x, const float* residual,
                           const float* weight, float eps, int64_t m, int64_t k, float* sum_out, uint16_t* out,
                           Prefetch pf) {
  if (m == 0 || k == 0) return;
  const Prefetch p = enabled(pf);
  if (half_type == DType::BF16) {
    launch_decode_kernel(norm_activations_kernel<false, false, bf16_t>, dim3(grid_of(m, p)), dim3(kThreads), 0,
                         device.stream(), x, residual, weight, eps, m, k, sum_out, QOut{},
                         reinterpret_cast<bf16_t*>(out), p);
  } else {
    RBEE_ASSERT(half_type == DType::F16, "norm rows: {} is not a 16-bit float type", dtype_name(half_type));
    launch_decode_kernel(norm_activations_kernel<false, false, f16_t>, dim3(grid_of(m, p)), dim3(kThreads), 0,
                         device.stream(), x, residual, weight, eps, m, k, sum_out, QOut{},
                         reinterpret_cast<f16_t*>(out), p);
  }
}

void launch_swiglu_rows_half(GpuDevice& device, DType half_type, const float* gate_up, int64_t m, int64_t inner,
                             uint16_t* out, Prefetch pf) {
  const int64_t total8 = m * inner / 8;
  if (total8 == 0) return;
  const Prefetch p = enabled(pf);
  if (half_type == DType::BF16) {
    launch_decode_kernel(swiglu_activations_kernel<false, false, bf16_t>, dim3(blocks_for(total8, p)), dim3(kThreads),
                         0, device.stream(), gate_up, inner, total8, QOut{}, reinterpret_cast<bf16_t*>(out), p);
  } else {
    RBEE_ASSERT(half_type == DType::F16, "swiglu rows: {} is not a 16-bit float type", dtype_name(half_type));
    launch_decode_kernel(swiglu_activations_kernel<false, false, f16_t>, dim3(blocks_for(total8, p)), dim3(kThreads),
                         0, device.stream(), gate_up, inner, total8, QOut{}, reinterpret_cast<f16_t*>(out), p);
  }
}

}  // namespace rbee::gpu::quant
