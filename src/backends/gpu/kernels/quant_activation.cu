// qmatmul's activation quantizer: x [M, K] f32 -> 8-bit levels, per-32 scales and per-16 level sums
// (QActs in quant_launch.h). Each thread quantizes 8 consecutive elements; the threads of one scale group
// (4 for a 32-block, 32 for a 256-block) agree on the scale through shuffles. The math is quant_math.cuh's:
// the 8-bit activation rule for 32-blocks (the Q8_1 quantizer's, and the CPU's), Q8_K's quantizer for 256-blocks.
#include <algorithm>

#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/quant_launch.h"
#include "backends/gpu/kernels/quant_math.cuh"

namespace rbee::gpu::quant {

namespace {

constexpr int kThreads = 256;

// total8 = m * k / 8 threads of work. Rows are contiguous, so flat element e = 8 * thread lies in 32-group
// e / 32 and 16-group e / 16 of the flat arrays d and s.
template <bool kQ8K>
__global__ void __launch_bounds__(kThreads)
    quantize_activations_kernel(const float* __restrict__ x, int64_t total8, int8_t* __restrict__ q,
                                float* __restrict__ d, int32_t* __restrict__ s, int32_t* __restrict__ zeroed,
                                int64_t n_zeroed) {
  constexpr int kGroup = kQ8K ? 32 : 4;  // threads sharing a scale; groups never straddle warps or rows
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n_zeroed) zeroed[i] = 0;
  const bool active = i < total8;  // inactive threads still take part in the shuffles
  const int64_t e = active ? 8 * i : 0;
  float v[8];
  if (active) {
    const float4 a = *reinterpret_cast<const float4*>(x + e);
    const float4 b = *reinterpret_cast<const float4*>(x + e + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = 0.f;
  }
  int8_t lv[8];
  float scale;
  if constexpr (!kQ8K) {
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(v[j]));
#pragma unroll
    for (int o = 1; o < kGroup; o <<= 1) amax = fmaxf(amax, shfl_xor(amax, o));
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
    for (int o = 1; o < kGroup; o <<= 1) {
      const float oa = shfl_xor(amax, o), om = shfl_xor(max, o);
      const int op = shfl_xor(pos, o);
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
    *reinterpret_cast<uint2*>(q + e) = make_uint2(packed[0], packed[1]);
    if (i % 4 == 0) d[e / 32] = scale;
    if (i % 2 == 0) s[e / 16] = sum;
  }
}

int64_t align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

QActs quantize_activations(GpuDevice& device, const float* x, int64_t m, int64_t k, bool q8k, Tensor& scratch,
                           int64_t zeroed) {
  const int64_t n = m * k;
  const int64_t q_bytes = align256(n), d_bytes = align256(n / 32 * 4), s_bytes = align256(n / 16 * 4);
  const int64_t z_bytes = align256(zeroed * 4);
  scratch = Tensor::empty({q_bytes + d_bytes + s_bytes + z_bytes}, DType::U8, device);
  char* base = static_cast<char*>(scratch.data());
  int8_t* q = reinterpret_cast<int8_t*>(base);
  float* d = reinterpret_cast<float*>(base + q_bytes);
  int32_t* s = reinterpret_cast<int32_t*>(base + q_bytes + d_bytes);
  int32_t* z = zeroed > 0 ? reinterpret_cast<int32_t*>(base + q_bytes + d_bytes + s_bytes) : nullptr;
  const int64_t total8 = n / 8, threads = std::max(total8, zeroed);
  if (threads > 0) {
    const unsigned blocks = (unsigned)((threads + kThreads - 1) / kThreads);
    if (q8k) {
      quantize_activations_kernel<true><<<blocks, kThreads, 0, device.stream()>>>(x, total8, q, d, s, z, zeroed);
    } else {
      quantize_activations_kernel<false><<<blocks, kThreads, 0, device.stream()>>>(x, total8, q, d, s, z, zeroed);
    }
    RBEE_GPU_CHECK_LAUNCH();
  }
  QActs acts{q, d, s, k};
  acts.zeroed = z;
  return acts;
}

}  // namespace rbee::gpu::quant
