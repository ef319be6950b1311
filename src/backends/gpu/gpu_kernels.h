// GpuKernels: the GPU implementation of the op set, one source for CUDA and HIP. Each op family lives in
// backends/gpu/kernels/<family>.cu; this class ties them together. The op table says which ops it implements;
// the others fall back to Kernels' defaults (Unsupported), and supports() says so.
#pragma once

#include "rbee/backend/kernels.h"

namespace rbee::gpu {

class GpuDevice;

class GpuKernels final : public Kernels {
 public:
  explicit GpuKernels(GpuDevice& device);
  bool supports(OpKind op, std::span<const DType> dtypes) const override;
  GpuDevice& device() const { return device_; }

  // Every op of the op table (op_table.def) marked ALL, each defined in kernels/<family>.cu: elementwise.cu,
  // reduce.cu, sort.cu, index.cu, matmul.cu (over gemm.cu and the vendor Blas), norm.cu, rms_norm.cu, swiglu.cu,
  // rope.cu, attention.cu, conv.cu, pool.cu, quant_*.cu, paged.cu, sample.cu. Ops marked CPU keep Kernels'
  // default.
#define RBEE_GPU_OVERRIDE_ALL(method, params) void method params override;
#define RBEE_GPU_OVERRIDE_CPU(method, params)
#define RBEE_OP(Kind, rule, backends, method, params) RBEE_GPU_OVERRIDE_##backends(method, params)
#include "rbee/backend/op_table.def"
#undef RBEE_GPU_OVERRIDE_ALL
#undef RBEE_GPU_OVERRIDE_CPU

 private:
  GpuDevice& device_;
};

}  // namespace rbee::gpu
