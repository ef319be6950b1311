#include "backends/gpu/gpu_kernels.h"

#include "backends/gpu/gpu_device.h"

namespace rbee::gpu {

GpuKernels::GpuKernels(GpuDevice& device) : Kernels(RBEE_GPU_BACKEND_NAME), device_(device) {}

bool GpuKernels::supports(OpKind op, std::span<const DType> dtypes) const {
  if (!op_dtypes_valid(op, dtypes)) return false;
  switch (op) {
    case OpKind::Unary:
    case OpKind::Binary:
    case OpKind::Affine:
    case OpKind::Cast:
    case OpKind::Copy:
    case OpKind::Fill:
    case OpKind::Arange:
    case OpKind::Where:
      return true;
    // reductions, sorting, indexing: every plain dtype (ids I64/I32/U32), as on the CPU
    case OpKind::Reduce:
    case OpKind::Softmax:
    case OpKind::Argsort:
    case OpKind::IndexSelect:
    case OpKind::Gather:
    case OpKind::IndexAdd:
    case OpKind::Scatter:
    case OpKind::ScatterAdd:
      return true;
    // matmul: F32/F16/BF16 with f32 accumulation (vendor Blas, else rbee's tiled GEMM)
    case OpKind::Matmul:
      return true;
    // neural-network blocks and the convolution family: F32, F16, BF16, F64
    case OpKind::RmsNorm:
    case OpKind::LayerNorm:
    case OpKind::GroupNorm:
    case OpKind::AddRmsNorm:
    case OpKind::Swiglu:
    case OpKind::Rope:
    case OpKind::Attention:
    case OpKind::Conv1d:
    case OpKind::Conv2d:
    case OpKind::ConvTranspose1d:
    case OpKind::ConvTranspose2d:
    case OpKind::Im2col:
    case OpKind::Pool2d:
    case OpKind::UpsampleNearest2d:
      return true;
    // ---- LLM inference (gpu-llm): every dtype combination op_dtypes_valid accepts ----
    // Quantize / Dequantize: all 12 block types. QMatmul: x F32, w any block type or F32 / F16 / BF16.
    // KvCacheWrite: rows F32 / F16 / BF16 into F32 / F16 / BF16 caches. PagedAttention: q F32, caches
    // F32 / F16 / BF16 (head size up to 512).
    case OpKind::Quantize:
    case OpKind::Dequantize:
    case OpKind::QMatmul:
    case OpKind::KvCacheWrite:
    case OpKind::PagedAttention:
    // Sample: f32 logits (kernels/sample.cu), the same ids as the CPU's.
    case OpKind::Sample:
      return true;
    default:
      return false;
  }
}

}  // namespace rbee::gpu
