// CPU conv2d_fused_nhwc (op_table.def Conv2dFusedNhwc): the reference composes the channels-first kernel with
// permuted copies (x [N, H, W, Cin] -> [N, Cin, H, W], w [Cout, KH, KW, Cin] -> [Cout, Cin, KH, KW], the residual
// likewise, the result back to [N, Ho, Wo, Cout]); the arithmetic is conv2d_fused's, rounded once. Correct, not
// fast: the CPU SD pipeline runs channels first.
#include "backends/cpu/cpu_kernels.h"
#include "rbee/core/tensor.h"

namespace rbee::cpu {

void CpuKernels::conv2d_fused_nhwc(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor* residual,
                                   const Conv2dParams& p, bool silu, Tensor& out) {
  const Tensor xc = x.permute({0, 3, 1, 2}).contiguous();
  const Tensor wc = w.permute({0, 3, 1, 2}).contiguous();
  const Tensor rc = residual ? residual->permute({0, 3, 1, 2}).contiguous() : Tensor();
  Tensor sum = Tensor::empty({out.dim(0), out.dim(3), out.dim(1), out.dim(2)}, out.dtype(), out.device());
  conv2d_fused(xc, wc, bias, residual ? &rc : nullptr, p, silu, sum);
  out.copy_from(sum.permute({0, 2, 3, 1}));
}

}  // namespace rbee::cpu
