// Front-ends of the elementwise ops and tensor creation.
#include "ops/op_checks.h"
#include "rbee/ops.h"

namespace rbee::ops {

using detail::check_defined;
using detail::check_supported;
using detail::common_device;

Tensor full(const Shape& shape, double value, DType dtype, Device& device) {
  check_supported("full", device, OpKind::Fill, {dtype});
  Tensor out = Tensor::empty(shape, dtype, device);
  device.kernels().fill(out, value);
  return out;
}
Tensor zeros(const Shape& shape, DType dtype, Device& device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device& device) { return full(shape, 1.0, dtype, device); }

Tensor arange(double start, double step, int64_t n, DType dtype, Device& device) {
  RBEE_CHECK(n >= 0, "arange: negative length {}", n);
  check_supported("arange", device, OpKind::Arange, {dtype});
  Tensor out = Tensor::empty({n}, dtype, device);
  device.kernels().arange(out, start, step);
  return out;
}

void const_set(const Tensor& t, double value) {
  check_defined("const_set", "t", t);
  check_supported("const_set", t.device(), OpKind::Fill, {t.dtype()});
  Tensor dst = t;
  t.device().kernels().fill(dst, value);
}

void copy(const Tensor& dst, const Tensor& src) {
  check_defined("copy", "dst", dst);
  check_defined("copy", "src", src);
  RBEE_CHECK(dst.shape() == src.shape(), "copy: dst shape {} differs from src shape {}", dst.shape().to_string(),
             src.shape().to_string());
  RBEE_CHECK(dst.dtype() == src.dtype(), "copy: dst is {} but src is {}", dtype_name(dst.dtype()),
             dtype_name(src.dtype()));
  dst.copy_from(src);
}

Tensor unary(UnaryOp op, const Tensor& x, double param) {
  check_defined(unary_op_name(op), "x", x);
  check_supported(unary_op_name(op), x.device(), OpKind::Unary, {x.dtype(), x.dtype()});
  if (!is_floating(x.dtype())) {
    RBEE_CHECK(op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Sqr || op == UnaryOp::Sign ||
                   op == UnaryOp::Relu,
               "{}: not defined for integer dtype {}", unary_op_name(op), dtype_name(x.dtype()));
  }
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  x.device().kernels().unary(op, param, x, out);
  return out;
}
Tensor neg(const Tensor& x) { return unary(UnaryOp::Neg, x); }
Tensor exp(const Tensor& x) { return unary(UnaryOp::Exp, x); }
Tensor silu(const Tensor& x) { return unary(UnaryOp::Silu, x); }
Tensor gelu(const Tensor& x, bool tanh_approximation) {
  return unary(tanh_approximation ? UnaryOp::GeluTanh : UnaryOp::GeluErf, x);
}
Tensor powf(const Tensor& x, double exponent) { return unary(UnaryOp::Powf, x, exponent); }
Tensor elu(const Tensor& x, double alpha) { return unary(UnaryOp::Elu, x, alpha); }

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_op_name(op);
  check_defined(name, "a", a);
  check_defined(name, "b", b);
  Device& device = common_device(name, {&a, &b});
  RBEE_CHECK(a.dtype() == b.dtype(), "{}: operands have different dtypes ({} and {}); cast one first", name,
             dtype_name(a.dtype()), dtype_name(b.dtype()));
  const DType out_dtype = is_comparison(op) ? DType::U8 : a.dtype();
  check_supported(name, device, OpKind::Binary, {a.dtype(), b.dtype(), out_dtype});
  const Shape shape = [&] {
    try {
      return broadcast_shapes(a.shape(), b.shape());
    } catch (Error& e) {
      throw e.add_context(name);
    }
  }();
  Tensor out = Tensor::empty(shape, out_dtype, device);
  device.kernels().binary(op, a.expand(shape), b.expand(shape), out);
  return out;
}
Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Div, a, b); }

Tensor affine(const Tensor& x, double mul, double add) {
  check_defined("affine", "x", x);
  check_supported("affine", x.device(), OpKind::Affine, {x.dtype(), x.dtype()});
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  x.device().kernels().affine(x, mul, add, out);
  return out;
}

Tensor cast(const Tensor& x, DType dtype) {
  check_defined("cast", "x", x);
  check_supported("cast", x.device(), OpKind::Cast, {x.dtype(), dtype});
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  x.device().kernels().cast(x, out);
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_defined("where", "cond", cond);
  check_defined("where", "a", a);
  check_defined("where", "b", b);
  Device& device = common_device("where", {&cond, &a, &b});
  RBEE_CHECK(cond.dtype() == DType::U8, "where: cond must be u8, got {}", dtype_name(cond.dtype()));
  RBEE_CHECK(a.dtype() == b.dtype(), "where: a is {} but b is {}", dtype_name(a.dtype()), dtype_name(b.dtype()));
  check_supported("where", device, OpKind::Where, {cond.dtype(), a.dtype()});
  const Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape()), b.shape());
  Tensor out = Tensor::empty(shape, a.dtype(), device);
  device.kernels().where(cond.expand(shape), a.expand(shape), b.expand(shape), out);
  return out;
}

}  // namespace rbee::ops
