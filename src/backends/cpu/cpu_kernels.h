// CpuKernels: the CPU implementation of every op. Each op family lives in its own file
// (cpu_elementwise.cpp, cpu_reduce.cpp, cpu_nn.cpp, cpu_matmul.cpp, cpu_quant.cpp, cpu_conv.cpp,
// cpu_index.cpp, cpu_paged_attention.cpp, cpu_sample.cpp); this class only ties them together. Preconditions are those of the op table (rbee/backend/op_table.def).
#pragma once

#include "rbee/backend/kernels.h"

namespace rbee::cpu {

class CpuKernels final : public Kernels {
 public:
  CpuKernels() : Kernels("cpu") {}
  bool supports(OpKind op, std::span<const DType> dtypes) const override;

  // The reference backend: every op of the op table (op_table.def).
#define RBEE_OP(Kind, rule, backends, method, params) void method params override;
#include "rbee/backend/op_table.def"
};

}  // namespace rbee::cpu
