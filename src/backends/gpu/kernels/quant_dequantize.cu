// GpuKernels::dequantize: q [rows, K] of any block type -> out [rows, K] f32, bit-exact with the CPU (and
// gguf-py): one thread per 32-element item, values from decode_item / item_value (quant_blocks.cuh).
#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/quant_blocks.cuh"

namespace rbee::gpu {

namespace {

constexpr int kThreads = 256;

template <DType T>
__global__ void dequantize_kernel(const uint8_t* __restrict__ q, int64_t rows, int64_t k, int64_t row_bytes,
                                  float* __restrict__ out) {
  using B = quant::BlockTraits<T>;
  const int64_t items_per_row = k / 32, total = rows * items_per_row;
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = t / items_per_row, it = t % items_per_row, blk = it / B::kItems;
    quant::Item item;
    quant::decode_item<T>(q + row * row_bytes + blk * B::kTS, (int)(it % B::kItems), item);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // 16 floats at a 64-byte-aligned offset of a fresh output (k % 32 == 0, e[h] % 16 == 0).
      float4* dst = reinterpret_cast<float4*>(out + row * k + blk * B::kQK + item.e[h]);
#pragma unroll
      for (int i = 0; i < 16; i += 4) {
        dst[i / 4] = make_float4(quant::item_value<T>(item, h, i), quant::item_value<T>(item, h, i + 1),
                                 quant::item_value<T>(item, h, i + 2), quant::item_value<T>(item, h, i + 3));
      }
    }
  }
}

}  // namespace

void GpuKernels::dequantize(const Tensor& q, Tensor& out) {
  device_.activate();
  const int64_t rows = q.dim(0), k = q.dim(1);
  const int64_t items = rows * (k / 32);
  if (items == 0) return;
  RBEE_ASSERT(reinterpret_cast<uintptr_t>(out.data()) % 16 == 0, "dequantize: output is not 16-byte aligned");
  quant::visit_block_type(q.dtype(), [&](auto tag) {
    dequantize_kernel<decltype(tag)::value><<<grid_for(items, kThreads), kThreads, 0, device_.stream()>>>(
        static_cast<const uint8_t*>(q.data()), rows, k, dtype_row_bytes(q.dtype(), k), static_cast<float*>(out.data()));
    RBEE_GPU_CHECK_LAUNCH();
  });
}

}  // namespace rbee::gpu
