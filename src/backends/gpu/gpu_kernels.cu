#include "backends/gpu/gpu_kernels.h"

#include "backends/gpu/gpu_device.h"

namespace rbee::gpu {

GpuKernels::GpuKernels(GpuDevice& device) : Kernels(RBEE_GPU_BACKEND_NAME), device_(device) {}

// The ops of the op table marked ALL, for every dtype combination op_dtypes_valid accepts (Quantize /
// Dequantize: all 12 block types; QMatmul: x F32, w any block type or F32 / F16 / BF16; PagedAttention: caches
// F32 / F16 / BF16, head size up to 512, checked by the front-end; Sample: F32 logits, the CPU's ids).
bool GpuKernels::supports(OpKind op, std::span<const DType> dtypes) const {
  static constexpr bool kOnGpu[kOpKindCount] = {
#define RBEE_ON_GPU_ALL true
#define RBEE_ON_GPU_CPU false
#define RBEE_OP(Kind, rule, backends, method, params) RBEE_ON_GPU_##backends,
#include "rbee/backend/op_table.def"
#undef RBEE_ON_GPU_ALL
#undef RBEE_ON_GPU_CPU
  };
  const int i = (int)op;
  return i >= 0 && i < kOpKindCount && kOnGpu[i] && op_dtypes_valid(op, dtypes);
}

}  // namespace rbee::gpu
