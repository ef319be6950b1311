// Activations of qmatmul's BLAS path for F16 / BF16 weights. A value v (f32) is stored as hi = round16(v) and
// lo = round16(v - hi) in the weights' 16-bit float type; v - hi is exact in f32, and hi + lo is within 2^-16 |v|
// (bf16: 8-bit significands) or 2^-22 |v| (f16), so two GEMMs hi.w + lo.w give f32-accurate products.
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/quant_launch.h"

namespace rbee::gpu::quant {

namespace {

constexpr int kThreads = 256;

template <bool kBf16>
__device__ __forceinline__ void split_value(float v, uint16_t& hi, uint16_t& lo) {
  if constexpr (kBf16) {
    hi = float_to_bf16(v);
    lo = float_to_bf16(v - bf16_to_float(hi));
  } else {
    hi = float_to_f16(v);
    lo = float_to_f16(v - f16_to_float(hi));
  }
}

template <bool kBf16>
__global__ void split_floats_kernel(const float* __restrict__ x, int64_t count, uint16_t* __restrict__ hi,
                                    uint16_t* __restrict__ lo) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < count; e += (int64_t)gridDim.x * blockDim.x) {
    split_value<kBf16>(x[e], hi[e], lo[e]);
  }
}

}  // namespace

void launch_split_floats(GpuDevice& device, DType half_type, const float* x, int64_t count, uint16_t* hi,
                         uint16_t* lo) {
  if (count == 0) return;
  if (half_type == DType::BF16) {
    split_floats_kernel<true><<<grid_for(count, kThreads), kThreads, 0, device.stream()>>>(x, count, hi, lo);
  } else {
    RBEE_ASSERT(half_type == DType::F16, "split_floats: {}", dtype_name(half_type));
    split_floats_kernel<false><<<grid_for(count, kThreads), kThreads, 0, device.stream()>>>(x, count, hi, lo);
  }
  RBEE_GPU_CHECK_LAUNCH();
}

}  // namespace rbee::gpu::quant
