// GpuKernels::quantize: x [rows, K] f32 -> out [rows, K] of a block type. One thread per block.
//  - Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1: the CPU's round-to-nearest reference quantizers, operation for
//    operation (unfused multiplies and adds), so the bytes equal the CPU's and gguf-py's.
//  - Q8_K: the CPU's quantizer exactly (also what qmatmul's activation quantizer computes).
//  - Q2_K .. Q6_K: the CPU's scale searches (quant_kquant_fit.cuh).
#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/quant_blocks.cuh"
#include "backends/gpu/kernels/quant_kquant_fit.cuh"
#include "backends/gpu/kernels/quant_math.cuh"

namespace rbee::gpu {

namespace {

using namespace quant;

constexpr int kThreads = 64;  // K-quant threads run long searches: small blocks spread them over the SMs

__device__ inline float signed_absmax(const float* x, int n) {
  float amax = 0.f, max = 0.f;
  for (int j = 0; j < n; ++j) {
    if (amax < fabsf(x[j])) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  }
  return max;
}

// Q4_0 (offset 8, 4 bits) and Q5_0 (offset 16, 5 bits): d = signed absmax / -offset.
template <int kBits>
__device__ void quantize_symmetric(const float* x, uint8_t* y) {
  constexpr float kOffset = kBits == 4 ? 8.f : 16.f;
  constexpr int kMax = (1 << kBits) - 1;
  const float d = signed_absmax(x, 32) / -kOffset;
  const float id = d != 0.f ? 1.f / d : 0.f;
  put_f16(y, d);
  uint8_t* qs = y + (kBits == 4 ? 2 : 6);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const uint8_t lo = trunc_clamp(add_rn(mul_rn(x[j], id), kOffset + 0.5f), kMax);
    const uint8_t hi = trunc_clamp(add_rn(mul_rn(x[j + 16], id), kOffset + 0.5f), kMax);
    qs[j] = (uint8_t)((lo & 0x0F) | ((hi & 0x0F) << 4));
    qh |= (uint32_t)(lo >> 4) << j;
    qh |= (uint32_t)(hi >> 4) << (j + 16);
  }
  if constexpr (kBits == 5) {
    for (int i = 0; i < 4; ++i) y[2 + i] = (uint8_t)(qh >> (8 * i));
  }
}

// Q4_1 / Q5_1: d = (max - min) / (2^bits - 1), m = min.
template <int kBits>
__device__ void quantize_min(const float* x, uint8_t* y) {
  constexpr int kMax = (1 << kBits) - 1;
  float min = x[0], max = x[0];
  for (int j = 1; j < 32; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  const float d = (max - min) / (float)kMax;
  const float id = d != 0.f ? 1.f / d : 0.f;
  put_f16(y, d);
  put_f16(y + 2, min);
  uint8_t* qs = y + (kBits == 4 ? 4 : 8);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const uint8_t lo = trunc_clamp(add_rn(mul_rn(x[j] - min, id), 0.5f), kMax);
    const uint8_t hi = trunc_clamp(add_rn(mul_rn(x[j + 16] - min, id), 0.5f), kMax);
    qs[j] = (uint8_t)((lo & 0x0F) | ((hi & 0x0F) << 4));
    qh |= (uint32_t)(lo >> 4) << j;
    qh |= (uint32_t)(hi >> 4) << (j + 16);
  }
  if constexpr (kBits == 5) {
    for (int i = 0; i < 4; ++i) y[4 + i] = (uint8_t)(qh >> (8 * i));
  }
}

// Q8_0 (d, qs[32]; the weight rule) and Q8_1 (d, s = f16(sum(qs) * d), qs[32]; the activation rule).
template <bool kSum>
__device__ void quantize_q8(const float* x, uint8_t* y) {
  float amax = 0.f;
  for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[j]));
  const float d = q8_0_scale(amax), inv = q8_act_inv_scale(amax);
  int8_t* qs = reinterpret_cast<int8_t*>(y + (kSum ? 4 : 2));
  int sum = 0;
  for (int j = 0; j < 32; ++j) {
    qs[j] = kSum ? q8_act_level(x[j], inv) : q8_0_level(x[j], d);
    sum += qs[j];
  }
  put_f16(y, d);
  if constexpr (kSum) put_f16(y + 2, (float)sum * d);
}

// Q8_K: d (f32), qs[256], bsums[16].
__device__ void quantize_q8_k(const float* x, uint8_t* y) {
  float amax = 0, max = 0;
  for (int j = 0; j < 256; ++j) {
    if (fabsf(x[j]) > amax) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  }
  float d = 0.f;
  int8_t* qs = reinterpret_cast<int8_t*>(y + 4);
  if (amax == 0.f) {
    for (int j = 0; j < 256; ++j) qs[j] = 0;
  } else {
    const float iscale = q8_k_iscale(max);
    for (int j = 0; j < 256; ++j) qs[j] = q8_k_level(x[j], iscale);
    d = 1.f / iscale;
  }
  uint32_t dbits;
  memcpy(&dbits, &d, 4);
  put_u16(y, (uint16_t)(dbits & 0xFFFF));
  put_u16(y + 2, (uint16_t)(dbits >> 16));
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int l = 0; l < 16; ++l) sum += qs[16 * g + l];
    put_u16(y + 260 + 2 * g, (uint16_t)(int16_t)sum);
  }
}

template <DType T>
__device__ void quantize_block(const float* x, uint8_t* y) {
  if constexpr (T == DType::Q4_0) quantize_symmetric<4>(x, y);
  else if constexpr (T == DType::Q5_0) quantize_symmetric<5>(x, y);
  else if constexpr (T == DType::Q4_1) quantize_min<4>(x, y);
  else if constexpr (T == DType::Q5_1) quantize_min<5>(x, y);
  else if constexpr (T == DType::Q8_0) quantize_q8<false>(x, y);
  else if constexpr (T == DType::Q8_1) quantize_q8<true>(x, y);
  else if constexpr (T == DType::Q8_K) quantize_q8_k(x, y);
  else if constexpr (T == DType::Q2_K) quantize_block_q2_k(x, y);
  else if constexpr (T == DType::Q3_K) quantize_block_q3_k(x, y);
  else if constexpr (T == DType::Q4_K) quantize_block_q4_k(x, y);
  else if constexpr (T == DType::Q5_K) quantize_block_q5_k(x, y);
  else quantize_block_q6_k(x, y);
}

// Rows are contiguous on both sides, so block b of the flat input is block b of the flat output.
template <DType T>
__global__ void __launch_bounds__(kThreads) quantize_kernel(const float* __restrict__ x, int64_t blocks,
                                                            uint8_t* __restrict__ out) {
  using B = BlockTraits<T>;
  for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < blocks; b += (int64_t)gridDim.x * blockDim.x) {
    quantize_block<T>(x + b * B::kQK, out + b * B::kTS);
  }
}

}  // namespace

void GpuKernels::quantize(const Tensor& x, Tensor& out) {
  device_.activate();
  const DType type = out.dtype();
  const int64_t blocks = x.numel() / dtype_block_size(type);
  if (blocks == 0) return;
  visit_block_type(type, [&](auto tag) {
    quantize_kernel<decltype(tag)::value><<<grid_for(blocks, kThreads), kThreads, 0, device_.stream()>>>(
        static_cast<const float*>(x.data()), blocks, static_cast<uint8_t*>(out.data()));
    RBEE_GPU_CHECK_LAUNCH();
  });
}

}  // namespace rbee::gpu
