// Conformance: sum/min/max/argmin/argmax over any axis, softmax and argsort on every backend, against naive
// double-precision references written here; plus the NaN conventions, accuracy and error paths.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/expect_error.h"
#include "common/harness.h"
#include "conformance/op_suites.h"
#include "rbee/ops.h"

namespace rbee::test {
namespace {

const std::vector<DType> kFloatDTypes = {DType::F32, DType::F16, DType::BF16, DType::F64};
const std::vector<DType> kPlainDTypes = {DType::F32, DType::F16, DType::BF16, DType::F64,
                                         DType::I64, DType::I32, DType::U32,  DType::U8};
const std::vector<Layout> kLayouts = {Layout::Contiguous, Layout::Strided, Layout::Transposed};
const std::vector<int> kAxes = {0, 1, -1};

const Shape kShape{3, 5, 37};  // odd sizes so vector tails and row boundaries get exercised
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string axis_name(int axis) { return axis < 0 ? "axisneg" + std::to_string(-axis) : "axis" + std::to_string(axis); }

// The integer `v` wrapped into `dtype`'s range the way two's-complement storage wraps it.
double wrap_to_dtype(double v, DType dtype) {
  const int64_t i = (int64_t)v;
  switch (dtype) {
    case DType::I32: return (double)(int32_t)(uint32_t)i;
    case DType::U32: return (double)(uint32_t)i;
    case DType::U8: return (double)(uint8_t)i;
    default: return v;
  }
}

// Visits the slices of `shape` along `axis`: fn(out_flat, flat_of(j)) where flat_of(j) is the row-major index of
// element j of the slice and out_flat the index of the slice in the reduced (keepdim) shape.
template <class Fn>
void for_each_slice(const Shape& shape, int axis, Fn&& fn) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[d];
  for (int d = axis + 1; d < shape.rank(); ++d) inner *= shape[d];
  const int64_t n = shape[axis];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k = 0; k < inner; ++k) {
      fn(o * inner + k, [=](int64_t j) { return (o * n + j) * inner + k; });
    }
  }
}

// ---------------------------------------------------------------------------------------------- reduce
std::vector<double> reduce_reference(ReduceOp op, const std::vector<double>& v, const Shape& shape, int axis,
                                     DType dtype) {
  Shape kept = shape;
  kept[axis] = 1;
  std::vector<double> out((size_t)kept.numel());
  const int64_t n = shape[axis];
  for_each_slice(shape, axis, [&](int64_t slot, auto flat_of) {
    if (op == ReduceOp::Sum) {
      double s = 0;
      for (int64_t j = 0; j < n; ++j) s += v[(size_t)flat_of(j)];
      out[(size_t)slot] = is_floating(dtype) ? round_to_dtype(s, dtype) : wrap_to_dtype(s, dtype);
      return;
    }
    const bool want_max = op == ReduceOp::Max || op == ReduceOp::ArgMax;
    int64_t best = 0;
    for (int64_t j = 1; j < n; ++j) {
      const double a = v[(size_t)flat_of(j)], b = v[(size_t)flat_of(best)];
      if (std::isnan(b)) break;  // the first NaN wins
      if (std::isnan(a) || (want_max ? a > b : a < b)) best = j;
    }
    out[(size_t)slot] = (op == ReduceOp::ArgMax || op == ReduceOp::ArgMin) ? (double)best : v[(size_t)flat_of(best)];
  });
  return out;
}

// Inputs: sums see spread-out values, min/max see a coarse grid so that ties (first index wins) are common.
std::vector<double> reduce_inputs(ReduceOp op, DType dtype, int64_t n, uint64_t seed) {
  const bool is_unsigned = dtype == DType::U32 || dtype == DType::U8;
  if (op == ReduceOp::Sum) {
    if (is_floating(dtype)) return random_values(n, dtype, seed, -4, 4);
    return random_values(n, dtype, seed, is_unsigned ? 0 : -100, is_unsigned ? 250 : 100);  // u8 sums wrap
  }
  std::vector<double> v = random_values(n, DType::I32, seed, is_unsigned ? 0 : -8, 8);
  if (is_floating(dtype)) {
    for (auto& x : v) x = round_to_dtype(x / 4, dtype);
  }
  return v;
}

using ReduceParam = std::tuple<std::string, ReduceOp, DType, Layout, int>;
class ReduceConformance : public ::testing::TestWithParam<ReduceParam> {};

TEST_P(ReduceConformance, MatchesDoubleReference) {
  const auto& [backend, op, dtype, layout, axis] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const int a = axis < 0 ? axis + kShape.rank() : axis;
  const auto values = reduce_inputs(op, dtype, kShape.numel(), 100 + 10 * (int)op + a);
  const Tensor x = make_tensor(values, kShape, dtype, *device, layout);
  const bool arg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  const DType out_dtype = arg ? DType::I64 : dtype;
  const auto want = reduce_reference(op, values, kShape, a, dtype);
  const Tolerance tol = op == ReduceOp::Sum && is_floating(dtype) ? default_tolerance(dtype) : Tolerance{0, 0};

  Shape kept = kShape;
  kept[a] = 1;
  Shape dropped = kShape;
  dropped.erase(a);
  const size_t out_bytes = (size_t)(kept.numel() * dtype_type_size(out_dtype));

  poison_allocations(*device, out_bytes);
  const Tensor out = ops::reduce(op, x, axis);
  ASSERT_EQ(out.shape(), dropped);
  ASSERT_EQ(out.dtype(), out_dtype);
  EXPECT_TRUE(all_close(to_doubles(out), want, tol));

  poison_allocations(*device, out_bytes);
  const Tensor kept_out = ops::reduce(op, x, axis, /*keepdim=*/true);
  ASSERT_EQ(kept_out.shape(), kept);
  EXPECT_TRUE(all_close(to_doubles(kept_out), want, tol));
}

INSTANTIATE_TEST_SUITE_P(Ops, ReduceConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::Values(ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max,
                                                              ReduceOp::ArgMin, ReduceOp::ArgMax),
                                            ::testing::ValuesIn(kPlainDTypes), ::testing::ValuesIn(kLayouts),
                                            ::testing::ValuesIn(kAxes)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + reduce_op_name(std::get<1>(info.param)) + "_" +
                                  std::string(dtype_name(std::get<2>(info.param))) + "_" +
                                  layout_name(std::get<3>(info.param)) + "_" + axis_name(std::get<4>(info.param));
                         });
RBEE_CONFORMANCE_SUITE(Reduce, ReduceConformance);

// Shapes large enough for the thread pool, with kept inner extents that are not a multiple of any chunk size.
using ReduceLargeParam = std::tuple<std::string, ReduceOp, DType, int>;
class ReduceLargeConformance : public ::testing::TestWithParam<ReduceLargeParam> {};

TEST_P(ReduceLargeConformance, MatchesDoubleReference) {
  const auto& [backend, op, dtype, axis] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const Shape shape{3, 301, 700};
  const auto values = reduce_inputs(op, dtype, shape.numel(), 500 + axis);
  const Tensor x = make_tensor(values, shape, dtype, *device);
  Shape kept = shape;
  kept[axis] = 1;
  poison_allocations(*device, (size_t)(kept.numel() * 8));
  const Tensor out = ops::reduce(op, x, axis, true);
  const Tolerance tol = op == ReduceOp::Sum && is_floating(dtype) ? default_tolerance(dtype) : Tolerance{0, 0};
  EXPECT_TRUE(all_close(to_doubles(out), reduce_reference(op, values, shape, axis, dtype), tol));
}

INSTANTIATE_TEST_SUITE_P(Ops, ReduceLargeConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::Values(ReduceOp::Sum, ReduceOp::Max, ReduceOp::ArgMin),
                                            ::testing::Values(DType::F32, DType::BF16, DType::I32),
                                            ::testing::Values(0, 1, 2)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + reduce_op_name(std::get<1>(info.param)) + "_" +
                                  std::string(dtype_name(std::get<2>(info.param))) + "_" +
                                  axis_name(std::get<3>(info.param));
                         });

using BackendDTypeParam = std::tuple<std::string, DType>;
std::string backend_dtype_name(const ::testing::TestParamInfo<BackendDTypeParam>& info) {
  return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param)));
}

// NaN wins min/max (the first NaN for the Arg ops), infinities order as numbers.
class ReduceNaN : public ::testing::TestWithParam<BackendDTypeParam> {};
TEST_P(ReduceNaN, NaNPropagatesAndArgPicksTheFirstNaN) {
  const auto& [backend, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  // Rows: NaN in the middle (twice), NaN first, only infinities, no NaN.
  const std::vector<double> values = {1, kNaN, -kInf, kNaN, 2,     //
                                      kNaN, 5, -3, 7, 0,           //
                                      kInf, -kInf, kInf, -kInf, 0,  //
                                      0.5, -2, 3, -2, 3};
  const Tensor x = make_tensor(values, {4, 5}, dtype, *device);
  EXPECT_TRUE(all_close(to_doubles(ops::max(x, 1)), {kNaN, kNaN, kInf, 3}, {0, 0}));
  EXPECT_TRUE(all_close(to_doubles(ops::min(x, 1)), {kNaN, kNaN, -kInf, -2}, {0, 0}));
  EXPECT_TRUE(all_close(to_doubles(ops::argmax(x, 1)), {1, 0, 0, 2}, {0, 0}));
  EXPECT_TRUE(all_close(to_doubles(ops::argmin(x, 1)), {1, 0, 1, 1}, {0, 0}));
  // The same along axis 0 (the strided kernel): columns hold a NaN in rows 0 or 1 except columns 2 and 4.
  EXPECT_TRUE(all_close(to_doubles(ops::argmax(x, 0)), {1, 0, 2, 0, 3}, {0, 0}));
  EXPECT_TRUE(all_close(to_doubles(ops::argmin(x, 0)), {1, 0, 0, 0, 1}, {0, 0}));
  EXPECT_TRUE(all_close(to_doubles(ops::max(x, 0)), {kNaN, kNaN, kInf, kNaN, 3}, {0, 0}));
  EXPECT_TRUE(all_close(to_doubles(ops::sum(x, 0)), {kNaN, kNaN, kNaN, kNaN, 5}, {0, 0}));
}
INSTANTIATE_TEST_SUITE_P(Ops, ReduceNaN,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFloatDTypes)),
                         backend_dtype_name);

// Long columns: the rows are split into ranges whose partial results merge afterwards; NaNs and ties sit in
// different ranges.
class ReduceNaNColumns : public ::testing::TestWithParam<BackendDTypeParam> {};
TEST_P(ReduceNaNColumns, MergesRangesInRowOrder) {
  const auto& [backend, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const Shape shape{1000, 40};
  auto values = reduce_inputs(ReduceOp::Max, dtype, shape.numel(), 17);
  const std::vector<std::pair<int64_t, int64_t>> nans = {{700, 3}, {400, 5}, {900, 5}, {10, 7}, {999, 39}};
  for (const auto& [row, col] : nans) values[(size_t)(row * 40 + col)] = kNaN;
  const Tensor x = make_tensor(values, shape, dtype, *device);
  for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::ArgMin, ReduceOp::ArgMax}) {
    const Tolerance tol = op == ReduceOp::Sum ? default_tolerance(dtype) : Tolerance{0, 0};
    EXPECT_TRUE(all_close(to_doubles(ops::reduce(op, x, 0)), reduce_reference(op, values, shape, 0, dtype), tol))
        << reduce_op_name(op);
  }
}
INSTANTIATE_TEST_SUITE_P(Ops, ReduceNaNColumns,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFloatDTypes)),
                         backend_dtype_name);

// Few long rows (a GPU splits each row over blocks, then merges the blocks' partials): the extreme value repeated
// in several ranges (the first index wins), a NaN late in a row after an earlier one, a row whose extreme sits
// in its last, partial range; the argmax of a 128256-logit row (Llama 3's vocabulary) as greedy decoding takes it.
class ReduceLongRows : public ::testing::TestWithParam<BackendDTypeParam> {};
TEST_P(ReduceLongRows, MergesRangesInIndexOrder) {
  const auto& [backend, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  for (const int64_t n : {int64_t{40001}, int64_t{128256}}) {
    const Shape shape{3, n};
    auto values = reduce_inputs(ReduceOp::Max, dtype, shape.numel(), 23 + n);
    auto at = [&](int64_t r, int64_t j) -> double& { return values[(size_t)(r * n + j)]; };
    for (const int64_t j : {int64_t{30001}, int64_t{25000}, int64_t{2048}, n - 1}) at(0, j) = 7;   // max ties
    for (const int64_t j : {int64_t{4095}, int64_t{39000}}) at(0, j) = -7;                         // min ties
    at(1, 39999) = kNaN;
    at(1, 2049) = kNaN;
    at(2, n - 2) = 6;
    at(2, n - 1) = -6;
    const Tensor x = make_tensor(values, shape, dtype, *device);
    for (const ReduceOp op : {ReduceOp::Min, ReduceOp::Max, ReduceOp::ArgMin, ReduceOp::ArgMax}) {
      poison_allocations(*device, (size_t)(3 * 8));
      EXPECT_TRUE(all_close(to_doubles(ops::reduce(op, x, 1)), reduce_reference(op, values, shape, 1, dtype), {0, 0}))
          << reduce_op_name(op) << " n " << n;
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Ops, ReduceLongRows,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::Values(DType::F32, DType::F16, DType::BF16)),
                         backend_dtype_name);

// Float sums accumulate in double: 512 copies of a large value, ones, then 512 copies of its negative. Any
// float-or-narrower accumulator has an ulp above 1 next to the large partial sum and loses the ones.
class SumAccuracy : public ::testing::TestWithParam<BackendDTypeParam> {};
TEST_P(SumAccuracy, AccumulatesInDouble) {
  const auto& [backend, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const int64_t n = 4096, k = 512;
  const double big = dtype == DType::F16 ? 65504 : round_to_dtype(1e8, dtype);  // exact in the dtype
  std::vector<double> values((size_t)n, 1.0);
  for (int64_t i = 0; i < k; ++i) values[(size_t)i] = big, values[(size_t)(n - 1 - i)] = -big;
  const double want = (double)(n - 2 * k);  // 3072, exact in every float dtype
  for (const bool rows : {true, false}) {
    // The same values as one row (last-axis kernel) and as one column (strided kernel), twice each.
    const Shape shape = rows ? Shape{2, n} : Shape{n, 2};
    std::vector<double> laid((size_t)(2 * n));
    for (int64_t i = 0; i < n; ++i) {
      laid[(size_t)(rows ? i : 2 * i)] = values[(size_t)i];
      laid[(size_t)(rows ? n + i : 2 * i + 1)] = values[(size_t)i];
    }
    const Tensor out = ops::sum(make_tensor(laid, shape, dtype, *device), rows ? 1 : 0);
    EXPECT_TRUE(all_close(to_doubles(out), {want, want}, {0, 0})) << (rows ? "rows" : "columns");
  }
}
INSTANTIATE_TEST_SUITE_P(Ops, SumAccuracy,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFloatDTypes)),
                         backend_dtype_name);

// Integer sums are exact modulo 2^bits of the dtype, on the last-axis and on the strided kernel.
class IntegerSumWraps : public ::testing::TestWithParam<BackendDTypeParam> {};
TEST_P(IntegerSumWraps, WrapsLikeTheDType) {
  const auto& [backend, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const int64_t n = 1000;
  std::vector<uint64_t> bits((size_t)n);  // each value's two's-complement bits, spread over the whole range
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (auto& b : bits) b = (state = state * 6364136223846793005ull + 1442695040888963407ull);
  // Two equal rows [2, n]: sum over axis 1 runs the row kernel; the transposed view, made contiguous as [n, 2]
  // by the front-end, runs the strided kernel over axis 0.
  auto rows_of = [&](auto narrow) {
    using T = decltype(narrow);
    std::vector<T> v;
    for (int r = 0; r < 2; ++r)
      for (uint64_t b : bits) v.push_back((T)b);
    return Tensor::from_vector(v, {2, n}, *device);
  };
  uint64_t total = 0;
  for (uint64_t b : bits) total += b;  // modulo 2^64; the dtype keeps the low bits
  Tensor x;
  int64_t want = 0;
  switch (dtype) {
    case DType::I64: x = rows_of(int64_t{}), want = (int64_t)total; break;
    case DType::I32: x = rows_of(int32_t{}), want = (int32_t)(uint32_t)total; break;
    case DType::U32: x = rows_of(uint32_t{}), want = (uint32_t)total; break;
    default: x = rows_of(uint8_t{}), want = (uint8_t)total; break;
  }
  for (const Tensor& out : {ops::sum(x, 1), ops::sum(x.transpose(0, 1), 0)}) {
    const std::vector<int64_t> got = ops::cast(out, DType::I64).to_vector<int64_t>();
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0], want);
    EXPECT_EQ(got[1], want);
  }
}
INSTANTIATE_TEST_SUITE_P(Ops, IntegerSumWraps,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::Values(DType::I64, DType::I32, DType::U32, DType::U8)),
                         backend_dtype_name);

// --------------------------------------------------------------------------------------------- softmax
std::vector<double> softmax_reference(const std::vector<double>& v, const Shape& shape, int axis) {
  std::vector<double> out(v.size());
  const int64_t n = shape[axis];
  for_each_slice(shape, axis, [&](int64_t, auto flat_of) {
    double m = -kInf;
    for (int64_t j = 0; j < n; ++j) m = std::max(m, v[(size_t)flat_of(j)]);
    double s = 0;
    for (int64_t j = 0; j < n; ++j) s += std::exp(v[(size_t)flat_of(j)] - m);
    for (int64_t j = 0; j < n; ++j) out[(size_t)flat_of(j)] = std::exp(v[(size_t)flat_of(j)] - m) / s;
  });
  return out;
}

Tolerance softmax_tolerance(DType dtype) {
  // f32: the exponential is a few ulp off, then one normalization; values are in [0, 1].
  return dtype == DType::F32 ? Tolerance{1e-7, 2e-6} : default_tolerance(dtype);
}

using SoftmaxParam = std::tuple<std::string, DType, Layout, int>;
class SoftmaxConformance : public ::testing::TestWithParam<SoftmaxParam> {};

TEST_P(SoftmaxConformance, MatchesDoubleReference) {
  const auto& [backend, dtype, layout, axis] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const int a = axis < 0 ? axis + kShape.rank() : axis;
  const auto values = random_values(kShape.numel(), dtype, 40 + a, -8, 8);
  const Tensor x = make_tensor(values, kShape, dtype, *device, layout);
  poison_allocations(*device, (size_t)(kShape.numel() * dtype_type_size(dtype)));
  const Tensor out = ops::softmax(x, axis);
  ASSERT_EQ(out.shape(), kShape);
  ASSERT_EQ(out.dtype(), dtype);
  ASSERT_TRUE(out.is_contiguous());
  EXPECT_TRUE(all_close(to_doubles(out), softmax_reference(values, kShape, a), softmax_tolerance(dtype)));
}

INSTANTIATE_TEST_SUITE_P(Ops, SoftmaxConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFloatDTypes), ::testing::ValuesIn(kLayouts),
                                            ::testing::ValuesIn(kAxes)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param))) +
                                  "_" + layout_name(std::get<2>(info.param)) + "_" +
                                  axis_name(std::get<3>(info.param));
                         });
RBEE_CONFORMANCE_SUITE(Softmax, SoftmaxConformance);

// Long rows (several summation blocks, a vector tail; rows past what a GPU block keeps in shared memory) and
// enough rows for the thread pool.
class SoftmaxLarge : public ::testing::TestWithParam<BackendDTypeParam> {};
TEST_P(SoftmaxLarge, MatchesDoubleReference) {
  const auto& [backend, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  for (const Shape& shape : {Shape{3, 4099}, Shape{300, 257}, Shape{2, 20011}}) {
    const auto values = random_values(shape.numel(), dtype, 77, -12, 12);
    poison_allocations(*device, (size_t)(shape.numel() * dtype_type_size(dtype)));
    const Tensor out = ops::softmax(make_tensor(values, shape, dtype, *device));
    EXPECT_TRUE(all_close(to_doubles(out), softmax_reference(values, shape, 1), softmax_tolerance(dtype)))
        << shape.to_string();
  }
}
INSTANTIATE_TEST_SUITE_P(Ops, SoftmaxLarge,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFloatDTypes)),
                         backend_dtype_name);

// Max subtraction keeps huge logits finite; masked (-inf) entries give exact zeros; rows whose exact value is
// undefined (a NaN, a +inf, or nothing but -inf) become all NaN.
class SoftmaxSpecialValues : public ::testing::TestWithParam<BackendDTypeParam> {};
TEST_P(SoftmaxSpecialValues, IsNumericallySafe) {
  const auto& [backend, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const double big = dtype == DType::F16 ? 60000 : 1e4;  // exp(big) overflows every dtype
  const std::vector<double> values = {big, big - 1, big - 2, big - 3, big - 4, big - 5, big - 6, big - 7, big - 8,
                                      -kInf, 1, -kInf, 2, -kInf, -kInf, 0, 0.5, -kInf,
                                      -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf,
                                      1, 2, kNaN, 3, 4, 5, 6, 7, 8,
                                      1, 2, kInf, 3, 4, 5, 6, 7, 8};
  const Shape shape{5, 9};
  std::vector<double> rounded(values.size());
  for (size_t i = 0; i < values.size(); ++i) rounded[i] = round_to_dtype(values[i], dtype);
  const Tensor out = ops::softmax(make_tensor(rounded, shape, dtype, *device));
  std::vector<double> want = softmax_reference(rounded, shape, 1);
  for (size_t i = 18; i < want.size(); ++i) want[i] = kNaN;  // rows 2-4 (the reference gives NaN too)
  const auto got = to_doubles(out);
  EXPECT_TRUE(all_close(got, want, softmax_tolerance(dtype)));
  for (size_t i : {9, 11, 13, 14, 17}) EXPECT_EQ(got[i], 0.0) << "masked entry " << i;
}
INSTANTIATE_TEST_SUITE_P(Ops, SoftmaxSpecialValues,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFloatDTypes)),
                         backend_dtype_name);

// --------------------------------------------------------------------------------------------- argsort
std::vector<double> argsort_reference(const std::vector<double>& v, const Shape& shape, int axis, bool ascending) {
  std::vector<double> out(v.size());
  const int64_t n = shape[axis];
  for_each_slice(shape, axis, [&](int64_t, auto flat_of) {
    std::vector<int64_t> order((size_t)n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
      const double a = v[(size_t)flat_of(i)], b = v[(size_t)flat_of(j)];
      return ascending ? a < b : a > b;
    });
    for (int64_t j = 0; j < n; ++j) out[(size_t)flat_of(j)] = (double)order[(size_t)j];
  });
  return out;
}

using ArgsortParam = std::tuple<std::string, DType, Layout, int, bool>;
class ArgsortConformance : public ::testing::TestWithParam<ArgsortParam> {};

TEST_P(ArgsortConformance, IsStableAndMatchesReference) {
  const auto& [backend, dtype, layout, axis, ascending] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const int a = axis < 0 ? axis + kShape.rank() : axis;
  // A coarse grid: many equal keys, whose order must stay that of their indices.
  const auto values = reduce_inputs(ReduceOp::Max, dtype, kShape.numel(), 60 + a);
  const Tensor x = make_tensor(values, kShape, dtype, *device, layout);
  poison_allocations(*device, (size_t)(kShape.numel() * 8));
  const Tensor out = ops::argsort(x, axis, ascending);
  ASSERT_EQ(out.shape(), kShape);
  ASSERT_EQ(out.dtype(), DType::I64);
  EXPECT_TRUE(all_close(to_doubles(out), argsort_reference(values, kShape, a, ascending), {0, 0}));
}

INSTANTIATE_TEST_SUITE_P(Ops, ArgsortConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kPlainDTypes), ::testing::ValuesIn(kLayouts),
                                            ::testing::ValuesIn(kAxes), ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param))) +
                                  "_" + layout_name(std::get<2>(info.param)) + "_" +
                                  axis_name(std::get<3>(info.param)) + (std::get<4>(info.param) ? "_asc" : "_desc");
                         });
RBEE_CONFORMANCE_SUITE(Argsort, ArgsortConformance);

// NaN orders above every number: last when ascending, first when descending, NaNs in their original order.
class ArgsortNaN : public ::testing::TestWithParam<BackendDTypeParam> {};
TEST_P(ArgsortNaN, PlacesNaNAboveInfinity) {
  const auto& [backend, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const Tensor x = make_tensor({3, kNaN, -kInf, 1, kNaN, kInf, 1, -0.0, 0.0}, {1, 9}, dtype, *device);
  EXPECT_TRUE(all_close(to_doubles(ops::argsort(x, -1, true)), {2, 7, 8, 3, 6, 0, 5, 1, 4}, {0, 0}));
  EXPECT_TRUE(all_close(to_doubles(ops::argsort(x, -1, false)), {1, 4, 5, 0, 3, 6, 7, 8, 2}, {0, 0}));
}
INSTANTIATE_TEST_SUITE_P(Ops, ArgsortNaN,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFloatDTypes)),
                         backend_dtype_name);

// Many rows (thread pool) of long rows with ties.
class ArgsortLarge : public ::testing::TestWithParam<BackendDTypeParam> {};
TEST_P(ArgsortLarge, MatchesReference) {
  const auto& [backend, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const Shape shape{64, 1000};
  const auto values = reduce_inputs(ReduceOp::Max, dtype, shape.numel(), 91);
  const Tensor x = make_tensor(values, shape, dtype, *device);
  EXPECT_TRUE(all_close(to_doubles(ops::argsort(x, 1, false)), argsort_reference(values, shape, 1, false), {0, 0}));
}
INSTANTIATE_TEST_SUITE_P(Ops, ArgsortLarge,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::Values(DType::F32, DType::I64)),
                         backend_dtype_name);

// Rows longer than a GPU block sorts in shared memory (a few thousand entries; fewer for 64-bit keys), so the
// multi-pass merge runs; ties and NaNs included, both directions.
class ArgsortLongRows : public ::testing::TestWithParam<BackendDTypeParam> {};
TEST_P(ArgsortLongRows, MatchesReference) {
  const auto& [backend, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  for (const Shape& shape : {Shape{2, 3000}, Shape{3, 9001}}) {
    auto values = reduce_inputs(ReduceOp::Max, dtype, shape.numel(), 93);
    if (is_floating(dtype)) {
      for (int64_t i = 5; i < shape.numel(); i += 997) values[(size_t)i] = kNaN;
    }
    const Tensor x = make_tensor(values, shape, dtype, *device);
    for (const bool ascending : {true, false}) {
      // Stable order with NaN above every number.
      std::vector<double> want(values.size());
      const int64_t n = shape[1];
      for (int64_t r = 0; r < shape[0]; ++r) {
        const double* row = values.data() + r * n;
        std::vector<int64_t> order((size_t)n);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
          const double a = row[i], b = row[j];
          if (std::isnan(a) || std::isnan(b)) return ascending ? !std::isnan(a) && std::isnan(b)
                                                               : std::isnan(a) && !std::isnan(b);
          return ascending ? a < b : a > b;
        });
        for (int64_t j = 0; j < n; ++j) want[(size_t)(r * n + j)] = (double)order[(size_t)j];
      }
      EXPECT_TRUE(all_close(to_doubles(ops::argsort(x, 1, ascending)), want, {0, 0}))
          << shape.to_string() << (ascending ? " ascending" : " descending");
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Ops, ArgsortLongRows,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::Values(DType::F32, DType::F16, DType::F64, DType::I64,
                                                              DType::U8)),
                         backend_dtype_name);

// ---------------------------------------------------------------------------------------------- errors
TEST(ReduceErrors, RejectBadArguments) {
  Device& cpu = cpu_device();
  const Tensor x = make_tensor(random_values(24, DType::F32, 1), {2, 3, 4}, DType::F32, cpu);
  expect_invalid([&] { ops::sum(x, 3); }, "sum: axis 3 is out of range");
  expect_invalid([&] { ops::argmax(x, -4); }, "argmax: axis -4 is out of range");
  expect_invalid([&] { ops::softmax(x, 5); }, "softmax: axis 5 is out of range");
  expect_invalid([&] { ops::argsort(x, -7); }, "argsort: axis -7 is out of range");
  expect_invalid([&] { ops::softmax(x.to(DType::I32)); }, "softmax: x must have a floating dtype, got i32");
  expect_invalid([&] { ops::sum(Tensor(), 0); }, "argument 'x' is an undefined tensor");
  const Tensor scalar = make_tensor({2.0}, Shape{}, DType::F32, cpu);
  expect_invalid([&] { ops::max(scalar, 0); }, "max: x is a rank-0 tensor");
  const Tensor empty = Tensor::empty({3, 0}, DType::F32, cpu);
  expect_invalid([&] { ops::min(empty, 1); }, "min: axis 1 of x [3, 0] is empty");
  expect_invalid([&] { ops::argmax(empty, -1); }, "argmax: axis -1 of x [3, 0] is empty");
  const Tensor quantized = Tensor::empty({2, 32}, DType::Q8_0, cpu);
  expect_invalid([&] { ops::sum(quantized, 1); }, "not defined for dtypes (q8_0");
  expect_invalid([&] { ops::argsort(quantized, 1); }, "not defined for dtypes (q8_0");
}

TEST(ReduceEdges, EmptyAndSizeOneAxes) {
  Device& cpu = cpu_device();
  // A sum over an empty axis is 0; reductions over the other axis of an empty tensor give empty results.
  const Tensor empty = Tensor::empty({3, 0}, DType::F32, cpu);
  EXPECT_TRUE(all_close(to_doubles(ops::sum(empty, 1)), {0, 0, 0}, {0, 0}));
  EXPECT_EQ(ops::max(empty, 0).shape(), Shape({0}));
  EXPECT_EQ(ops::softmax(empty).shape(), Shape({3, 0}));
  EXPECT_EQ(ops::argsort(empty).shape(), Shape({3, 0}));
  // Reducing a size-1 axis copies; softmax of one element is 1.
  const Tensor x = make_tensor({1.5, -2, 7}, {3, 1}, DType::F32, cpu);
  EXPECT_TRUE(all_close(to_doubles(ops::argmin(x, 1)), {0, 0, 0}, {0, 0}));
  EXPECT_TRUE(all_close(to_doubles(ops::sum(x, 1)), {1.5, -2, 7}, {0, 0}));
  EXPECT_TRUE(all_close(to_doubles(ops::softmax(x, 1)), {1, 1, 1}, {0, 0}));
  // A 1-D reduction without keepdim is rank 0.
  const Tensor s = ops::sum(make_tensor({1, 2, 3}, {3}, DType::I32, cpu), 0);
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(s.to_vector<int32_t>()[0], 6);
}

}  // namespace
}  // namespace rbee::test
