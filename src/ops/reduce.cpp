// Front-ends of the reductions, softmax and argsort.
//
// The CPU kernels take a contiguous x; a strided view is made contiguous first. reduce() hands any axis to the
// kernel directly; softmax and argsort work on the last axis, so another axis is swapped to the end, computed
// there and swapped back into a new contiguous tensor.
#include "ops/op_checks.h"
#include "rbee/ops.h"

namespace rbee::ops {

using detail::check_defined;
using detail::check_supported;
using detail::normalize_axis;

namespace {

// Runs `kernel(x_last_axis, out)` with the chosen axis moved last, and returns the result in x's axis order.
template <class Kernel>
Tensor along_last_axis(const Tensor& x, int axis, DType out_dtype, Kernel&& kernel) {
  const int last = x.rank() - 1;
  const Tensor moved = (axis == last ? x : x.transpose(axis, last)).contiguous();
  Tensor out = Tensor::empty(moved.shape(), out_dtype, x.device());
  kernel(moved, out);
  return axis == last ? out : out.transpose(axis, last).contiguous();
}

}  // namespace

Tensor reduce(ReduceOp op, const Tensor& x, int axis, bool keepdim) {
  const char* name = reduce_op_name(op);
  check_defined(name, "x", x);
  const int a = normalize_axis(name, x, axis);
  const bool arg = op == ReduceOp::ArgMin || op == ReduceOp::ArgMax;
  const DType out_dtype = arg ? DType::I64 : x.dtype();
  check_supported(name, x.device(), OpKind::Reduce, {x.dtype(), out_dtype});
  RBEE_CHECK(x.dim(a) > 0 || op == ReduceOp::Sum, "{}: axis {} of x {} is empty; {} of no elements is undefined",
             name, axis, x.shape().to_string(), name);

  Shape kept = x.shape();
  kept[a] = 1;
  Shape result_shape = kept;
  if (!keepdim) result_shape.erase(a);
  Tensor out = Tensor::empty(result_shape, out_dtype, x.device());
  Tensor kernel_out = out.view(kept);  // same memory, with the reduced axis kept as size 1
  const Tensor src = x.contiguous();
  x.device().kernels().reduce(op, src, a, kernel_out);
  return out;
}

Tensor sum(const Tensor& x, int axis, bool keepdim) { return reduce(ReduceOp::Sum, x, axis, keepdim); }
Tensor max(const Tensor& x, int axis, bool keepdim) { return reduce(ReduceOp::Max, x, axis, keepdim); }
Tensor min(const Tensor& x, int axis, bool keepdim) { return reduce(ReduceOp::Min, x, axis, keepdim); }
Tensor argmax(const Tensor& x, int axis, bool keepdim) { return reduce(ReduceOp::ArgMax, x, axis, keepdim); }
Tensor argmin(const Tensor& x, int axis, bool keepdim) { return reduce(ReduceOp::ArgMin, x, axis, keepdim); }

Tensor softmax(const Tensor& x, int axis) {
  check_defined("softmax", "x", x);
  const int a = normalize_axis("softmax", x, axis);
  RBEE_CHECK(is_floating(x.dtype()), "softmax: x must have a floating dtype, got {}", dtype_name(x.dtype()));
  check_supported("softmax", x.device(), OpKind::Softmax, {x.dtype(), x.dtype()});
  Kernels& kernels = x.device().kernels();
  return along_last_axis(x, a, x.dtype(), [&](const Tensor& src, Tensor& out) { kernels.softmax(src, out); });
}

Tensor argsort(const Tensor& x, int axis, bool ascending) {
  check_defined("argsort", "x", x);
  const int a = normalize_axis("argsort", x, axis);
  check_supported("argsort", x.device(), OpKind::Argsort, {x.dtype(), DType::I64});
  Kernels& kernels = x.device().kernels();
  return along_last_axis(x, a, DType::I64,
                         [&](const Tensor& src, Tensor& out) { kernels.argsort(src, ascending, out); });
}

}  // namespace rbee::ops
