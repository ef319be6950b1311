// Conformance: unary, binary, affine, cast, copy, fill, arange, where on every backend vs double references.
#include <cmath>
#include <limits>

#include "common/harness.h"
#include "conformance/op_suites.h"
#include "rbee/ops.h"

namespace rbee::test {
namespace {

const std::vector<DType> kFloatDTypes = {DType::F32, DType::F16, DType::BF16, DType::F64};
const std::vector<DType> kPlainDTypes = {DType::F32, DType::F16, DType::BF16, DType::F64,
                                         DType::I64, DType::I32, DType::U32,  DType::U8};
const std::vector<Layout> kLayouts = {Layout::Contiguous, Layout::Strided, Layout::Transposed};

const Shape kShape{3, 5, 37};  // odd sizes so vector tails and row boundaries get exercised

// ---------------------------------------------------------------------------------------------- unary
double unary_reference(UnaryOp op, double x, double p) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Recip: return 1.0 / x;
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Sin: return std::sin(x);
    case UnaryOp::Cos: return std::cos(x);
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Erf: return std::erf(x);
    case UnaryOp::Ceil: return std::ceil(x);
    case UnaryOp::Floor: return std::floor(x);
    case UnaryOp::Round: return std::round(x);
    case UnaryOp::Abs: return std::fabs(x);
    case UnaryOp::Sqr: return x * x;
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::GeluTanh: return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case UnaryOp::GeluErf: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case UnaryOp::Relu: return x > 0 ? x : 0;
    case UnaryOp::Elu: return x > 0 ? x : p * (std::exp(x) - 1);
    case UnaryOp::Silu: return x / (1 + std::exp(-x));
    case UnaryOp::Sigmoid: return 1 / (1 + std::exp(-x));
    case UnaryOp::Sign: return (x > 0) - (x < 0);
    case UnaryOp::Powf: return std::pow(x, p);
    case UnaryOp::NormCdf: return 0.5 * std::erfc(-x / std::sqrt(2.0));
  }
  return NAN;
}

struct UnaryInput {
  double lo, hi, param;
};
UnaryInput unary_input(UnaryOp op) {
  switch (op) {
    case UnaryOp::Log:
    case UnaryOp::Sqrt: return {0.05, 4.0, 0};
    case UnaryOp::Recip: return {0.25, 3.0, 0};
    case UnaryOp::Powf: return {0.1, 3.0, 1.7};
    case UnaryOp::Elu: return {-3, 3, 0.8};
    default: return {-3.0, 3.0, 0};
  }
}

using UnaryParam = std::tuple<std::string, UnaryOp, DType, Layout>;
class UnaryConformance : public ::testing::TestWithParam<UnaryParam> {};

TEST_P(UnaryConformance, MatchesDoubleReference) {
  const auto& [backend, op, dtype, layout] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const UnaryInput in = unary_input(op);
  const auto values = random_values(kShape.numel(), dtype, 1000 + (int)op, in.lo, in.hi);
  const Tensor x = make_tensor(values, kShape, dtype, *device, layout);
  poison_allocations(*device, (size_t)(kShape.numel() * dtype_type_size(dtype)));
  const Tensor out = ops::unary(op, x, in.param);
  ASSERT_EQ(out.shape(), kShape);
  ASSERT_EQ(out.dtype(), dtype);
  std::vector<double> want(values.size());
  for (size_t i = 0; i < values.size(); ++i) want[i] = unary_reference(op, values[i], in.param);
  Tolerance tol = default_tolerance(dtype);
  if (dtype == DType::F32) tol = {2e-6, 2e-5};  // libm-grade f32 transcendental functions
  EXPECT_TRUE(all_close(to_doubles(out), want, tol));
}

std::vector<UnaryOp> all_unary_ops() {
  std::vector<UnaryOp> ops;
  for (int i = 0; i < kUnaryOpCount; ++i) ops.push_back((UnaryOp)i);
  return ops;
}

INSTANTIATE_TEST_SUITE_P(Ops, UnaryConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(all_unary_ops()), ::testing::ValuesIn(kFloatDTypes),
                                            ::testing::ValuesIn(kLayouts)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + unary_op_name(std::get<1>(info.param)) + "_" +
                                  std::string(dtype_name(std::get<2>(info.param))) + "_" +
                                  layout_name(std::get<3>(info.param));
                         });
RBEE_CONFORMANCE_SUITE(Unary, UnaryConformance);

// Integer unary ops (neg, abs, sqr, sign, relu) on I32/I64.
using IntUnaryParam = std::tuple<std::string, UnaryOp, DType>;
class IntUnaryConformance : public ::testing::TestWithParam<IntUnaryParam> {};

TEST_P(IntUnaryConformance, MatchesReference) {
  const auto& [backend, op, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const auto values = random_values(kShape.numel(), dtype, 77, -1000, 1000);
  const Tensor x = make_tensor(values, kShape, dtype, *device, Layout::Strided);
  poison_allocations(*device, (size_t)(kShape.numel() * dtype_type_size(dtype)));
  const Tensor out = ops::unary(op, x);
  std::vector<double> want(values.size());
  for (size_t i = 0; i < values.size(); ++i) want[i] = unary_reference(op, values[i], 0);
  EXPECT_TRUE(all_close(to_doubles(out), want, {0, 0}));
}

INSTANTIATE_TEST_SUITE_P(Ops, IntUnaryConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::Values(UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Sqr,
                                                              UnaryOp::Sign, UnaryOp::Relu),
                                            ::testing::Values(DType::I32, DType::I64)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + unary_op_name(std::get<1>(info.param)) + "_" +
                                  std::string(dtype_name(std::get<2>(info.param)));
                         });

// --------------------------------------------------------------------------------------------- binary
enum class BinaryLayout { Contiguous, Strided, Broadcast };
const char* binary_layout_name(BinaryLayout l) {
  return l == BinaryLayout::Contiguous ? "contiguous" : l == BinaryLayout::Strided ? "strided" : "broadcast";
}

double binary_reference(BinaryOp op, double a, double b, DType dtype) {
  const bool integer = is_integer(dtype);
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div:
      if (integer) return b == 0 ? 0 : std::trunc(a / b);
      return a / b;
    case BinaryOp::Min: return std::min(a, b);
    case BinaryOp::Max: return std::max(a, b);
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    case BinaryOp::Ge: return a >= b;
  }
  return NAN;
}

using BinaryParam = std::tuple<std::string, BinaryOp, DType, BinaryLayout>;
class BinaryConformance : public ::testing::TestWithParam<BinaryParam> {};

TEST_P(BinaryConformance, MatchesDoubleReference) {
  const auto& [backend, op, dtype, layout] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  // Ranges keep integer results exact: unsigned a >= b for sub, small factors for u8 mul.
  double alo = -20, ahi = 20, blo = -20, bhi = 20;
  if (dtype == DType::U32 || dtype == DType::U8) alo = 12, ahi = 15, blo = 0, bhi = 12;
  if (is_floating(dtype) && op == BinaryOp::Div) blo = 0.5, bhi = 2.5;
  const Shape b_shape = layout == BinaryLayout::Broadcast ? Shape{5, 1} : kShape;
  auto a_vals = random_values(kShape.numel(), dtype, 2000 + (int)op, alo, ahi);
  auto b_vals = random_values(b_shape.numel(), dtype, 3000 + (int)op, blo, bhi);
  // Comparisons need equal pairs too: copy a few of a into b.
  if (layout != BinaryLayout::Broadcast) {
    for (size_t i = 0; i < b_vals.size(); i += 3) b_vals[i] = a_vals[i];
  }
  const Tensor a = make_tensor(a_vals, kShape, dtype, *device,
                               layout == BinaryLayout::Strided ? Layout::Strided : Layout::Contiguous);
  const Tensor b = make_tensor(b_vals, b_shape, dtype, *device,
                               layout == BinaryLayout::Strided ? Layout::Transposed : Layout::Contiguous);
  const DType out_dtype = is_comparison(op) ? DType::U8 : dtype;
  poison_allocations(*device, (size_t)(kShape.numel() * dtype_type_size(out_dtype)));
  const Tensor out = ops::binary(op, a, b);
  ASSERT_EQ(out.shape(), kShape);
  ASSERT_EQ(out.dtype(), out_dtype);
  std::vector<double> want(a_vals.size());
  for (int64_t i = 0; i < kShape[0]; ++i) {
    for (int64_t j = 0; j < kShape[1]; ++j) {
      for (int64_t k = 0; k < kShape[2]; ++k) {
        const int64_t ai = flat_index(kShape, {i, j, k});
        const int64_t bi = layout == BinaryLayout::Broadcast ? j : ai;
        want[ai] = binary_reference(op, a_vals[ai], b_vals[bi], dtype);
      }
    }
  }
  const Tolerance tol = is_comparison(op) ? Tolerance{0, 0} : default_tolerance(dtype);
  EXPECT_TRUE(all_close(to_doubles(out), want, tol));
}

std::vector<BinaryOp> all_binary_ops() {
  std::vector<BinaryOp> ops;
  for (int i = 0; i < kBinaryOpCount; ++i) ops.push_back((BinaryOp)i);
  return ops;
}

INSTANTIATE_TEST_SUITE_P(Ops, BinaryConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(all_binary_ops()), ::testing::ValuesIn(kPlainDTypes),
                                            ::testing::Values(BinaryLayout::Contiguous, BinaryLayout::Strided,
                                                              BinaryLayout::Broadcast)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + binary_op_name(std::get<1>(info.param)) + "_" +
                                  std::string(dtype_name(std::get<2>(info.param))) + "_" +
                                  binary_layout_name(std::get<3>(info.param));
                         });
RBEE_CONFORMANCE_SUITE(Binary, BinaryConformance);

// ------------------------------------------------------------------------------- affine, cast, where
using DTypeLayoutParam = std::tuple<std::string, DType, Layout>;
std::string dtype_layout_name(const ::testing::TestParamInfo<DTypeLayoutParam>& info) {
  return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param))) + "_" +
         layout_name(std::get<2>(info.param));
}

class AffineConformance : public ::testing::TestWithParam<DTypeLayoutParam> {};
TEST_P(AffineConformance, MatchesDoubleReference) {
  const auto& [backend, dtype, layout] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const auto values = random_values(kShape.numel(), dtype, 11, -4, 4);
  const Tensor x = make_tensor(values, kShape, dtype, *device, layout);
  poison_allocations(*device, (size_t)(kShape.numel() * dtype_type_size(dtype)));
  const Tensor out = ops::affine(x, -1.5, 0.25);
  std::vector<double> want(values.size());
  for (size_t i = 0; i < values.size(); ++i) want[i] = values[i] * -1.5 + 0.25;
  EXPECT_TRUE(all_close(to_doubles(out), want, default_tolerance(dtype)));
}
INSTANTIATE_TEST_SUITE_P(Ops, AffineConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFloatDTypes), ::testing::ValuesIn(kLayouts)),
                         dtype_layout_name);
RBEE_CONFORMANCE_SUITE(Affine, AffineConformance);

using CastParam = std::tuple<std::string, DType, DType>;
class CastConformance : public ::testing::TestWithParam<CastParam> {};
TEST_P(CastConformance, MatchesReference) {
  const auto& [backend, from, to] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const bool unsigned_involved = from == DType::U32 || from == DType::U8 || to == DType::U32 || to == DType::U8;
  const double lo = unsigned_involved ? 0 : -100, hi = unsigned_involved ? 250 : 100;
  const auto values = random_values(kShape.numel(), from, 21, lo, hi);
  const Tensor x = make_tensor(values, kShape, from, *device, Layout::Transposed);
  poison_allocations(*device, (size_t)(kShape.numel() * dtype_type_size(to)));
  const Tensor out = ops::cast(x, to);
  ASSERT_EQ(out.dtype(), to);
  std::vector<double> want(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    want[i] = is_floating(to) ? round_to_dtype(v, to) : std::trunc(v);
  }
  EXPECT_TRUE(all_close(to_doubles(out), want, {0, 0}));
}
INSTANTIATE_TEST_SUITE_P(Ops, CastConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kPlainDTypes), ::testing::ValuesIn(kPlainDTypes)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param))) +
                                  "_to_" + std::string(dtype_name(std::get<2>(info.param)));
                         });
RBEE_CONFORMANCE_SUITE(Cast, CastConformance);

class WhereConformance : public ::testing::TestWithParam<DTypeLayoutParam> {};
TEST_P(WhereConformance, SelectsWithBroadcasting) {
  const auto& [backend, dtype, layout] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const Shape cond_shape{3, 1, 37};
  std::vector<double> cond_vals = random_values(cond_shape.numel(), DType::U8, 5, 0, 1.99);
  const auto a_vals = random_values(kShape.numel(), dtype, 6, 0, 50);
  const auto b_vals = random_values(37, dtype, 7, 0, 50);
  const Tensor cond = make_tensor(cond_vals, cond_shape, DType::U8, *device);
  const Tensor a = make_tensor(a_vals, kShape, dtype, *device, layout);
  const Tensor b = make_tensor(b_vals, {37}, dtype, *device);
  poison_allocations(*device, (size_t)(kShape.numel() * dtype_type_size(dtype)));
  const Tensor out = ops::where(cond, a, b);
  std::vector<double> want(a_vals.size());
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 5; ++j)
      for (int64_t k = 0; k < 37; ++k) {
        const int64_t f = flat_index(kShape, {i, j, k});
        want[f] = cond_vals[i * 37 + k] != 0 ? a_vals[f] : b_vals[k];
      }
  EXPECT_TRUE(all_close(to_doubles(out), want, {0, 0}));
}
INSTANTIATE_TEST_SUITE_P(Ops, WhereConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kPlainDTypes), ::testing::ValuesIn(kLayouts)),
                         dtype_layout_name);
RBEE_CONFORMANCE_SUITE(Where, WhereConformance);

// ------------------------------------------------------------------------------ fill, copy, arange
class FillConformance : public ::testing::TestWithParam<DTypeLayoutParam> {};
TEST_P(FillConformance, SetsOnlyTheViewedElements) {
  const auto& [backend, dtype, layout] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  // A [3, 5, 74] buffer of 7s; fill a view of it with 3 and check the rest kept its 7s.
  const Shape base_shape{3, 5, 74};
  const Tensor base = make_tensor(std::vector<double>(base_shape.numel(), 7.0), base_shape, dtype, *device);
  Tensor view = base;
  if (layout == Layout::Strided) view = base.slice(-1, 1, 74, 2);
  if (layout == Layout::Transposed) view = base.narrow(-1, 3, 37).transpose(0, 2);
  ops::const_set(view, 3.0);
  const auto got = to_doubles(base);
  std::vector<double> want(got.size(), 7.0);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 5; ++j)
      for (int64_t k = 0; k < 74; ++k) {
        const bool in_view = layout == Layout::Contiguous || (layout == Layout::Strided && k % 2 == 1) ||
                             (layout == Layout::Transposed && k >= 3 && k < 40);
        if (in_view) want[flat_index(base_shape, {i, j, k})] = 3.0;
      }
  EXPECT_TRUE(all_close(got, want, {0, 0}));
}
INSTANTIATE_TEST_SUITE_P(Ops, FillConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kPlainDTypes), ::testing::ValuesIn(kLayouts)),
                         dtype_layout_name);
RBEE_CONFORMANCE_SUITE(Fill, FillConformance);

class CopyConformance : public ::testing::TestWithParam<DTypeLayoutParam> {};
TEST_P(CopyConformance, CopiesIntoAStridedDestination) {
  const auto& [backend, dtype, layout] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const auto values = random_values(kShape.numel(), dtype, 31, 0, 100);
  const Tensor src = make_tensor(values, kShape, dtype, *device, layout);
  // Destination: the odd columns of a [3, 5, 74] buffer of 9s.
  const Shape base_shape{3, 5, 74};
  const Tensor base = make_tensor(std::vector<double>(base_shape.numel(), 9.0), base_shape, dtype, *device);
  ops::copy(base.slice(-1, 1, 74, 2), src);
  const auto got = to_doubles(base);
  std::vector<double> want(got.size(), 9.0);
  for (int64_t f = 0; f < kShape.numel(); ++f) want[(f / 37) * 74 + (f % 37) * 2 + 1] = values[f];
  EXPECT_TRUE(all_close(got, want, {0, 0}));
  // And a contiguous clone reads back the same values.
  EXPECT_TRUE(all_close(to_doubles(src.clone()), values, {0, 0}));
}
// Copies into channel slices of a [2, 3, 5, 80] buffer of 9s (a concatenation along the last axis, as the SD
// UNet's skip connections): [.., 0:32) and [.., 32:80) from a source in the parameter's layout, then a broadcast of
// whole rows into [.., 32:80); rows of 16-byte multiples whose offsets are too (GPU: the 16-byte vector path for
// dtypes of 1-8 bytes), then the same at an offset of one element (not aligned: the element path).
TEST_P(CopyConformance, ConcatenatesAlongTheLastAxis) {
  const auto& [backend, dtype, layout] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const Shape base_shape{2, 3, 5, 80};
  for (const int64_t at : {int64_t{0}, int64_t{1}}) {
    SCOPED_TRACE("offset " + std::to_string(at));
    const Tensor base = make_tensor(std::vector<double>(base_shape.numel(), 9.0), base_shape, dtype, *device);
    const Shape a_shape{2, 3, 5, 32}, b_shape{2, 3, 5, 40};
    const auto a = random_values(a_shape.numel(), dtype, 41 + at, 0, 100);
    const auto b = random_values(b_shape.numel(), dtype, 43 + at, 0, 100);
    ops::copy(base.narrow(-1, at, 32), make_tensor(a, a_shape, dtype, *device, layout));
    ops::copy(base.narrow(-1, at + 32, 40), make_tensor(b, b_shape, dtype, *device, layout));
    // Row (i, 0, k) of `row` broadcast over j into [.., at + 40 : at + 48).
    const Shape r_shape{2, 1, 5, 8};
    const auto row = random_values(r_shape.numel(), dtype, 47 + at, 0, 100);
    ops::copy(base.narrow(-1, at + 40, 8), make_tensor(row, r_shape, dtype, *device).expand({2, 3, 5, 8}));
    const auto got = to_doubles(base);
    std::vector<double> want(got.size(), 9.0);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t k = 0; k < 5; ++k) {
          const int64_t r = (i * 3 + j) * 5 + k;
          for (int64_t c = 0; c < 32; ++c) want[r * 80 + at + c] = a[r * 32 + c];
          for (int64_t c = 0; c < 40; ++c) want[r * 80 + at + 32 + c] = b[r * 40 + c];
          for (int64_t c = 0; c < 8; ++c) want[r * 80 + at + 40 + c] = row[(i * 5 + k) * 8 + c];
        }
    EXPECT_TRUE(all_close(got, want, {0, 0}));
  }
}
INSTANTIATE_TEST_SUITE_P(Ops, CopyConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kPlainDTypes), ::testing::ValuesIn(kLayouts)),
                         dtype_layout_name);
RBEE_CONFORMANCE_SUITE(Copy, CopyConformance);

using DTypeParam = std::tuple<std::string, DType>;
class ArangeConformance : public ::testing::TestWithParam<DTypeParam> {};
TEST_P(ArangeConformance, CountsFromStartByStep) {
  const auto& [backend, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const double step = is_floating(dtype) ? 0.5 : 3.0;
  poison_allocations(*device, (size_t)(50 * dtype_type_size(dtype)));
  const Tensor out = ops::arange(2.0, step, 50, dtype, *device);
  std::vector<double> want(50);
  for (int i = 0; i < 50; ++i) want[i] = round_to_dtype(2.0 + i * step, dtype);
  EXPECT_TRUE(all_close(to_doubles(out), want, {0, 0}));
}
INSTANTIATE_TEST_SUITE_P(Ops, ArangeConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kPlainDTypes)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param)));
                         });
RBEE_CONFORMANCE_SUITE(Arange, ArangeConformance);

}  // namespace
}  // namespace rbee::test
