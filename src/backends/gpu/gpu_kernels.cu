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
    default:
      return false;
  }
}

}  // namespace rbee::gpu
