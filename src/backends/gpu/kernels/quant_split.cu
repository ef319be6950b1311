// Operands of qmatmul's BLAS path for block-type weights. A value v (f32) is stored as hi = bf16(v) and
// lo = bf16(v - hi); v - hi is exact in f32, and hi + lo is within 2^-16 |v| (8-bit significands). Three bf16
// GEMMs hi.hi + lo.hi + hi.lo then give f32-accurate products on tensor cores. (F16 / BF16 weights need no
// split: qmatmul defines their product on x rounded to 16 bits, one GEMM.)
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/quant_blocks.cuh"
#include "backends/gpu/kernels/quant_launch.h"

namespace rbee::gpu::quant {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ void split_value(float v, uint16_t& hi, uint16_t& lo) {
  hi = float_to_bf16(v);
  lo = float_to_bf16(v - bf16_to_float(hi));
}

// Activations: element e of the flat [m, k] is d[e / 32] * q[e] (the dequantized Q8 value).
__global__ void split_activations_kernel(QActs x, int64_t count, uint16_t* __restrict__ hi, uint16_t* __restrict__ lo) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < count; e += (int64_t)gridDim.x * blockDim.x) {
    split_value(mul_rn(x.d[e / 32], (float)x.q[e]), hi[e], lo[e]);
  }
}

// One thread per item (32 elements) of n weight rows; rows of hi / lo are k elements.
template <DType T>
__global__ void split_weights_kernel(const uint8_t* __restrict__ w, int64_t n, int64_t k, int64_t row_bytes,
                                     uint16_t* __restrict__ hi, uint16_t* __restrict__ lo) {
  using B = BlockTraits<T>;
  const int64_t items_per_row = k / 32, total = n * items_per_row;
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = t / items_per_row;
    const int64_t it = t % items_per_row;
    const int64_t blk = it / B::kItems;
    Item item;
    decode_item<T>(w + row * row_bytes + blk * B::kTS, (int)(it % B::kItems), item);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t e0 = row * k + blk * B::kQK + item.e[h];
      uint32_t hw[8], lw[8];
#pragma unroll
      for (int i = 0; i < 16; i += 2) {
        uint16_t h0, l0, h1, l1;
        split_value(item_value<T>(item, h, i), h0, l0);
        split_value(item_value<T>(item, h, i + 1), h1, l1);
        hw[i / 2] = h0 | ((uint32_t)h1 << 16);
        lw[i / 2] = l0 | ((uint32_t)l1 << 16);
      }
      // 16 elements = 32 bytes at a 32-byte-aligned offset (k is a multiple of 32, e[h] of 16).
      uint4* hp = reinterpret_cast<uint4*>(hi + e0);
      uint4* lp = reinterpret_cast<uint4*>(lo + e0);
      hp[0] = make_uint4(hw[0], hw[1], hw[2], hw[3]);
      hp[1] = make_uint4(hw[4], hw[5], hw[6], hw[7]);
      lp[0] = make_uint4(lw[0], lw[1], lw[2], lw[3]);
      lp[1] = make_uint4(lw[4], lw[5], lw[6], lw[7]);
    }
  }
}

}  // namespace

void launch_split_activations(GpuDevice& device, const QActs& x, int64_t m, uint16_t* hi, uint16_t* lo) {
  const int64_t count = m * x.k;
  if (count == 0) return;
  split_activations_kernel<<<grid_for(count, kThreads), kThreads, 0, device.stream()>>>(x, count, hi, lo);
  RBEE_GPU_CHECK_LAUNCH();
}

void launch_split_weights(GpuDevice& device, DType type, const uint8_t* w, int64_t n, int64_t k, int64_t row_bytes,
                          uint16_t* hi, uint16_t* lo) {
  const int64_t items = n * (k / 32);
  if (items == 0) return;
  visit_block_type(type, [&](auto tag) {
    split_weights_kernel<decltype(tag)::value><<<grid_for(items, kThreads), kThreads, 0, device.stream()>>>(
        w, n, k, row_bytes, hi, lo);
    RBEE_GPU_CHECK_LAUNCH();
  });
}

}  // namespace rbee::gpu::quant
