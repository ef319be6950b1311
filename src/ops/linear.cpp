// Front-end of the fused linear layer (op_table.def LinearFused): x . w^T + bias + residual, rounded once.
#include "ops/op_checks.h"
#include "rbee/ops.h"

namespace rbee::ops {

using detail::check_defined;
using detail::check_dtype_of_x;
using detail::fused_residual;
using detail::check_supported;
using detail::common_device;

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual) {
  constexpr std::string_view op = "linear";
  check_defined(op, "x", x);
  check_defined(op, "w", w);
  Device& device = common_device(op, {&x, &w, &bias, &residual});
  RBEE_CHECK(x.rank() >= 1, "{}: x needs at least one dimension, got a 0-d tensor", op);
  RBEE_CHECK(w.rank() == 2, "{}: w must be [N, K], got shape {}", op, w.shape().to_string());
  const int64_t k = x.dim(-1), n = w.dim(0);
  RBEE_CHECK(w.dim(1) == k, "{}: x {} has {} features but w {} takes {}", op, x.shape().to_string(), k,
             w.shape().to_string(), w.dim(1));
  check_dtype_of_x(op, "w", w, x);
  check_supported(op, device, OpKind::LinearFused, {x.dtype(), w.dtype(), x.dtype()});
  Shape out_shape = x.shape();
  out_shape[out_shape.rank() - 1] = n;
  const int64_t m = x.numel() / std::max<int64_t>(k, 1);
  Tensor bc;
  if (bias.defined()) {
    check_dtype_of_x(op, "bias", bias, x);
    RBEE_CHECK(bias.rank() == 1 && bias.dim(0) == n, "{}: bias must be [N] = [{}], got shape {}", op, n,
               bias.shape().to_string());
    bc = bias.contiguous();
  }
  Tensor rc = fused_residual(op, residual, x, out_shape);
  if (rc.defined()) rc = rc.view({m, n});
  Tensor out = Tensor::empty(out_shape, x.dtype(), device);
  if (out.numel() == 0) return out;
  const Tensor xc = x.contiguous().view({m, k}), wc = w.contiguous();
  Tensor o2 = out.view({m, n});
  device.kernels().linear_fused(xc, wc, bc.defined() ? &bc : nullptr, rc.defined() ? &rc : nullptr, o2);
  return out;
}

}  // namespace rbee::ops
