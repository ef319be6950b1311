// The scalar semantics of the unary and binary ops and of value conversion (cast, fill, arange), written once for
// the CPU backend (backends/cpu/cpu_elementwise.cpp) and the GPU kernels (backends/gpu/kernels/elementwise.cu),
// so both give the same answer on every edge: integer division by zero is 0, INT_MIN / -1 wraps to INT_MIN
// instead of trapping, comparisons give 0 or 1 in the compute type, and a float converted to an integer
// saturates at the type's range with NaN giving 0. A new function of the unary or binary op (op_table.def) gets
// its formula here, for both backends, and so does a map op (RBEE_MAP_OP): a class template Formula<C>
// constructed from the op's scalars (as doubles) whose operator() maps one value in the compute type C.
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

#include "rbee/backend/op_kinds.h"
#include "rbee/core/host_device.h"

namespace rbee::scalar {

// Whether unary `op` is defined for integer dtypes (the op front-end refuses the others).
RBEE_HOST_DEVICE inline bool unary_defined_for_integers(UnaryOp op) {
  return op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Sqr || op == UnaryOp::Sign ||
         op == UnaryOp::Relu;
}

// f(x) in the compute type C; param is Elu's alpha or Powf's exponent. Integer x: the functions above only (others
// return x).
template <class C>
RBEE_HOST_DEVICE inline C unary_value(UnaryOp op, C x, C param) {
  if constexpr (std::is_integral_v<C>) {
    switch (op) {
      case UnaryOp::Neg: return (C)-x;
      case UnaryOp::Abs: return x < 0 ? (C)-x : x;
      case UnaryOp::Sqr: return (C)(x * x);
      case UnaryOp::Sign: return (C)((x > 0) - (x < 0));
      case UnaryOp::Relu: return x > 0 ? x : C(0);
      default: return x;
    }
  } else {
    // std:: overloads: float math for float, double for double, on the host and on the device.
    using std::ceil, std::cos, std::erf, std::erfc, std::exp, std::fabs, std::floor, std::log, std::pow,
        std::round, std::sin, std::sqrt, std::tanh;
    const C half = C(0.5), one = C(1);
    switch (op) {
      case UnaryOp::Neg: return -x;
      case UnaryOp::Recip: return one / x;
      case UnaryOp::Exp: return exp(x);
      case UnaryOp::Log: return log(x);
      case UnaryOp::Sin: return sin(x);
      case UnaryOp::Cos: return cos(x);
      case UnaryOp::Tanh: return tanh(x);
      case UnaryOp::Erf: return erf(x);
      case UnaryOp::Ceil: return ceil(x);
      case UnaryOp::Floor: return floor(x);
      case UnaryOp::Round: return round(x);
      case UnaryOp::Abs: return fabs(x);
      case UnaryOp::Sqr: return x * x;
      case UnaryOp::Sqrt: return sqrt(x);
      case UnaryOp::GeluTanh:  // sqrt(2/pi) = 0.7978845608028654
        return half * x * (one + tanh(C(0.7978845608028654) * (x + C(0.044715) * x * x * x)));
      case UnaryOp::GeluErf: return half * x * (one + erf(x * C(0.7071067811865476)));
      case UnaryOp::Relu: return x > C(0) ? x : C(0);
      case UnaryOp::Elu: return x > C(0) ? x : param * (exp(x) - one);
      case UnaryOp::Silu: return x / (one + exp(-x));
      case UnaryOp::Sigmoid: return one / (one + exp(-x));
      case UnaryOp::Sign: return C((x > C(0)) - (x < C(0)));
      case UnaryOp::Powf: return pow(x, param);
      case UnaryOp::NormCdf: return half * erfc(-x * C(0.7071067811865476));
    }
    return x;
  }
}

// a op b in the compute type C (double, float or an integer type).
template <class C>
RBEE_HOST_DEVICE inline C binary_value(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::Add: return (C)(a + b);
    case BinaryOp::Sub: return (C)(a - b);
    case BinaryOp::Mul: return (C)(a * b);
    case BinaryOp::Div:
      if constexpr (std::is_integral_v<C>) {
        if (b == 0) return C(0);
        if constexpr (std::is_signed_v<C>) {
          if (b == C(-1)) return (C)(C(0) - a);  // avoids the INT_MIN / -1 overflow trap
        }
      }
      return (C)(a / b);
    case BinaryOp::Min: return b < a ? b : a;
    case BinaryOp::Max: return b > a ? b : a;
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    case BinaryOp::Ge: return a >= b;
  }
  return a;
}

// v as To: saturating and NaN-safe from a floating-point value to an integer type, a plain conversion otherwise.
template <class To, class From>
RBEE_HOST_DEVICE inline To convert_value(From v) {
  if constexpr (std::is_integral_v<To> && !std::is_integral_v<From>) {
    const double d = (double)v;
    if (d != d) return To(0);  // NaN
    if (d <= (double)std::numeric_limits<To>::min()) return std::numeric_limits<To>::min();
    if (d >= (double)std::numeric_limits<To>::max()) return std::numeric_limits<To>::max();
    return (To)d;
  } else {
    return (To)v;
  }
}

// ---- the formulas of the map ops (op_table.def, RBEE_MAP_OP) ----

// affine: x * mul + add, mul and add rounded to C once.
template <class C>
struct AffineMap {
  C mul, add;
  RBEE_HOST_DEVICE AffineMap(double m, double a) : mul((C)m), add((C)a) {}
  RBEE_HOST_DEVICE C operator()(C x) const { return x * mul + add; }
};

}  // namespace rbee::scalar
