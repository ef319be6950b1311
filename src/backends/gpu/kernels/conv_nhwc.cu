// GPU conv2d_fused_nhwc (op_table.def Conv2dFusedNhwc): channels-last convolutions with conv2d_fused's epilogue.
//   x [N, H, W, Cin], w [Cout, KH, KW, Cin], bias [Cout] or [N, Cout], residual / out [N, Ho, Wo, Cout].
// Paths, first that applies:
//  1. the vendor convolution library's NHWC kernels (conv_dnn.cu: cuDNN, 16-bit, k x k kernels by default);
//  2. a 1x1 kernel of stride 1 without padding or SiLU is a linear layer: out [N*H*W, Cout] = x [N*H*W, Cin] .
//     w [Cout, Cin]^T + bias + residual, one linear_fused (the vendor GEMM with the bias in its epilogue and the
//     residual as its C operand); a [N, Cout] bias is one linear_fused per image. RBEE_CONV_NHWC_LINEAR=0 skips it.
//  3. otherwise (ROCm without a library, F64, SiLU 1x1, odd shapes): permuted copies to NCHW / KCRS, conv2d_fused,
//     and the result copied back to NHWC (correct; the copies cost what they move).
#include <cstdlib>
#include <string_view>

#include "backends/gpu/gpu_device.h"
#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/conv_dnn.h"
#include "rbee/core/env.h"

namespace rbee::gpu {

namespace {

bool linear_path_enabled() {
  static const bool on = env::flag_or("RBEE_CONV_NHWC_LINEAR", true);
  return on;
}

}  // namespace

void GpuKernels::conv2d_fused_nhwc(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor* residual,
                                   const Conv2dParams& p, bool silu, Tensor& out) {
  device_.activate();
  if (out.numel() == 0) return;
  const DType dt = x.dtype();
  const bool half = dt == DType::F16 || dt == DType::BF16;
  if (half && conv2d_dnn(device_, x, w, bias, residual, p, silu, out, /*channels_last=*/true)) return;

  const int64_t n = x.dim(0), h = x.dim(1), wd = x.dim(2), cin = x.dim(3), cout = out.dim(3);
  const bool pointwise = w.dim(1) == 1 && w.dim(2) == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 &&
                         p.pad_w == 0;
  if (pointwise && !silu && dt != DType::F64 && linear_path_enabled()) {
    const Tensor w2 = w.view({cout, cin});
    const bool per_image = bias && bias->rank() == 2;
    const int64_t images = per_image ? n : 1, rows = (per_image ? 1 : n) * h * wd;
    for (int64_t i = 0; i < images; ++i) {
      const Tensor xi = x.narrow(0, i, per_image ? 1 : n).view({rows, cin});
      Tensor oi = out.narrow(0, i, per_image ? 1 : n).view({rows, cout});
      const Tensor bi = !bias ? Tensor() : per_image ? bias->narrow(0, i, 1).view({cout}) : *bias;
      const Tensor ri = residual ? residual->narrow(0, i, per_image ? 1 : n).view({rows, cout}) : Tensor();
      linear_fused(xi, w2, bias ? &bi : nullptr, residual ? &ri : nullptr, oi);
    }
    return;
  }

  const Tensor xc = x.permute({0, 3, 1, 2}).contiguous();
  const Tensor wc = w.permute({0, 3, 1, 2}).contiguous();
  const Tensor rc = residual ? residual->permute({0, 3, 1, 2}).contiguous() : Tensor();
  Tensor sum = Tensor::empty({n, cout, out.dim(1), out.dim(2)}, dt, device_);
  conv2d_fused(xc, wc, bias, residual ? &rc : nullptr, p, silu, sum);
  out.copy_from(sum.permute({0, 2, 3, 1}));
}

}  // namespace rbee::gpu
