// Conformance: matmul on every backend vs a double-precision reference, over dtypes, operand layouts and shapes
// chosen to hit every kernel path (decode rows, edge tiles, several K and N blocks, threads), plus the
// NumPy 1-D rules and the error paths.
#include <cmath>

#include "common/harness.h"
#include "conformance/op_suites.h"
#include "rbee/ops.h"

namespace rbee::test {
namespace {

const std::vector<DType> kDTypes = {DType::F32, DType::F16, DType::BF16};

// How the operands are laid out in memory; the logical values are the same in every layout.
enum class MatLayout {
  RowMajor,        // a [M, K], b [K, N] contiguous
  ATransposed,     // a stored as [K, M], viewed through a transpose
  BTransposed,     // b stored as [N, K] (a linear layer's weight), viewed through a transpose
  BothTransposed,
  Strided,         // every other element of the last axis, for both
  BatchBroadcast,  // a [2, 1, M, K] (transposed storage) @ b [3, K, N] -> [2, 3, M, N]
};
const char* mat_layout_name(MatLayout l) {
  switch (l) {
    case MatLayout::RowMajor: return "rowmajor";
    case MatLayout::ATransposed: return "atrans";
    case MatLayout::BTransposed: return "btrans";
    case MatLayout::BothTransposed: return "bothtrans";
    case MatLayout::Strided: return "strided";
    case MatLayout::BatchBroadcast: return "batchbcast";
  }
  return "unknown";
}
const std::vector<MatLayout> kLayouts = {MatLayout::RowMajor,       MatLayout::ATransposed, MatLayout::BTransposed,
                                         MatLayout::BothTransposed, MatLayout::Strided,     MatLayout::BatchBroadcast};

struct MatShape {
  int64_t m, k, n;
};
const std::vector<MatShape> kShapes = {
    {1, 1, 1},       // smallest
    {1, 64, 96},     // decode row
    {1, 300, 257},   // decode row, K and N off the vector width
    {3, 17, 5},      // tiny, everything an edge
    {4, 33, 70},     // decode rows in one group
    {8, 128, 40},    // the largest decode batch
    {7, 33, 65},     // awkward sizes
    {9, 40, 17},     // just past the decode path
    {16, 1, 16},     // K = 1
    {200, 20, 3},    // few columns (transposed decode path)
    {128, 256, 96},  // whole tiles, threaded
    {70, 520, 45},   // several K blocks, threaded, edge tiles
    {9, 20, 4200},   // two N blocks
    {130, 70, 150},  // several row blocks per thread
    {160, 40, 200},  // both sides past one 128 x 128 GPU tile
};

// Tolerance for a K-term dot product of inputs in [-1, 1], summed in f32 and stored as `dtype`.
Tolerance matmul_tolerance(DType dtype, int64_t k) {
  const double accumulate = 4e-6 * std::sqrt((double)k);
  switch (dtype) {
    case DType::F16: return {accumulate + 1e-4, 2e-3};   // output rounding: 2^-11 relative, plus one ulp
    case DType::BF16: return {accumulate + 1e-3, 1.6e-2};
    default: return {accumulate, 1e-5};
  }
}

// out[batch][i][j] = sum_p a[batch_a][i][p] * b[batch_b][p][j] in double.
std::vector<double> reference(const std::vector<double>& a, const std::vector<double>& b, int64_t batches,
                              int64_t m, int64_t k, int64_t n, const std::vector<int64_t>& a_batch,
                              const std::vector<int64_t>& b_batch) {
  std::vector<double> out((size_t)(batches * m * n));
  for (int64_t t = 0; t < batches; ++t) {
    const double* pa = a.data() + a_batch[t] * m * k;
    const double* pb = b.data() + b_batch[t] * k * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += pa[i * k + p] * pb[p * n + j];
        out[(size_t)((t * m + i) * n + j)] = s;
      }
    }
  }
  return out;
}

using MatmulParam = std::tuple<std::string, DType, MatLayout, MatShape>;
class MatmulConformance : public ::testing::TestWithParam<MatmulParam> {};

TEST_P(MatmulConformance, MatchesDoubleReference) {
  const auto& [backend, dtype, layout, shape] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const auto [m, k, n] = shape;
  const bool bcast = layout == MatLayout::BatchBroadcast;
  const Shape a_shape = bcast ? Shape{2, 1, m, k} : Shape{m, k};
  const Shape b_shape = bcast ? Shape{3, k, n} : Shape{k, n};
  const auto a_vals = random_values(a_shape.numel(), dtype, 100 + m * 7 + k, -1, 1);
  const auto b_vals = random_values(b_shape.numel(), dtype, 200 + n * 5 + k, -1, 1);

  Layout la = Layout::Contiguous, lb = Layout::Contiguous;
  if (layout == MatLayout::ATransposed || layout == MatLayout::BothTransposed || bcast) la = Layout::Transposed;
  if (layout == MatLayout::BTransposed || layout == MatLayout::BothTransposed) lb = Layout::Transposed;
  if (layout == MatLayout::Strided) la = lb = Layout::Strided;
  const Tensor a = make_tensor(a_vals, a_shape, dtype, *device, la);
  const Tensor b = make_tensor(b_vals, b_shape, dtype, *device, lb);

  const int64_t batches = bcast ? 6 : 1;
  poison_allocations(*device, (size_t)(batches * m * n * dtype_type_size(dtype)));
  const Tensor out = ops::matmul(a, b);
  const Shape want_shape = bcast ? Shape{2, 3, m, n} : Shape{m, n};
  ASSERT_EQ(out.shape(), want_shape);
  ASSERT_EQ(out.dtype(), dtype);

  // Batch t = (i, j) of [2, 3] reads a[i] and b[j].
  const std::vector<int64_t> a_batch = bcast ? std::vector<int64_t>{0, 0, 0, 1, 1, 1} : std::vector<int64_t>{0};
  const std::vector<int64_t> b_batch = bcast ? std::vector<int64_t>{0, 1, 2, 0, 1, 2} : std::vector<int64_t>{0};
  std::vector<double> want = reference(a_vals, b_vals, batches, m, k, n, a_batch, b_batch);
  for (auto& v : want) v = round_to_dtype(v, dtype == DType::F32 ? DType::F64 : dtype);
  EXPECT_TRUE(all_close(to_doubles(out), want, matmul_tolerance(dtype, k)));
}

INSTANTIATE_TEST_SUITE_P(Ops, MatmulConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()), ::testing::ValuesIn(kDTypes),
                                            ::testing::ValuesIn(kLayouts), ::testing::ValuesIn(kShapes)),
                         [](const auto& info) {
                           const MatShape s = std::get<3>(info.param);
                           return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param))) +
                                  "_" + mat_layout_name(std::get<2>(info.param)) + "_" + std::to_string(s.m) + "x" +
                                  std::to_string(s.k) + "x" + std::to_string(s.n);
                         });
RBEE_CONFORMANCE_SUITE(Matmul, MatmulConformance);

// ------------------------------------------------------------------------------- NumPy 1-D operands
using BackendParam = std::string;
class MatmulVectors : public ::testing::TestWithParam<BackendParam> {};

TEST_P(MatmulVectors, PromotesOneDimensionalOperandsLikeNumPy) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  const int64_t m = 5, k = 19, n = 11;
  const auto mat_a = random_values(3 * m * k, DType::F32, 1, -1, 1);  // [3, m, k]
  const auto mat_b = random_values(k * n, DType::F32, 2, -1, 1);      // [k, n]
  const auto vec_k = random_values(k, DType::F32, 3, -1, 1);          // [k]
  const auto vec_k2 = random_values(k, DType::F32, 4, -1, 1);         // [k]
  const Tensor a3 = make_tensor(mat_a, {3, m, k}, DType::F32, *device);
  const Tensor b2 = make_tensor(mat_b, {k, n}, DType::F32, *device, Layout::Transposed);
  const Tensor v = make_tensor(vec_k, {k}, DType::F32, *device);
  const Tensor w = make_tensor(vec_k2, {k}, DType::F32, *device, Layout::Strided);
  const Tolerance tol = matmul_tolerance(DType::F32, k);

  // vector @ matrix -> [n]
  const Tensor vb = ops::matmul(v, b2);
  ASSERT_EQ(vb.shape(), Shape({n}));
  std::vector<double> want((size_t)n);
  for (int64_t j = 0; j < n; ++j) {
    double s = 0;
    for (int64_t p = 0; p < k; ++p) s += vec_k[p] * mat_b[p * n + j];
    want[j] = s;
  }
  EXPECT_TRUE(all_close(to_doubles(vb), want, tol));

  // batched matrix @ vector -> [3, m]
  const Tensor av = ops::matmul(a3, w);
  ASSERT_EQ(av.shape(), Shape({3, m}));
  want.assign((size_t)(3 * m), 0);
  for (int64_t i = 0; i < 3 * m; ++i) {
    double s = 0;
    for (int64_t p = 0; p < k; ++p) s += mat_a[i * k + p] * vec_k2[p];
    want[i] = s;
  }
  EXPECT_TRUE(all_close(to_doubles(av), want, tol));

  // vector @ vector -> 0-d
  const Tensor vw = ops::matmul(v, w);
  ASSERT_EQ(vw.rank(), 0);
  double dot = 0;
  for (int64_t p = 0; p < k; ++p) dot += vec_k[p] * vec_k2[p];
  EXPECT_TRUE(all_close(to_doubles(vw), {dot}, tol));
}

TEST_P(MatmulVectors, EmptyInnerDimensionGivesZeros) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  const Tensor a = ops::zeros({4, 0}, DType::F32, *device);
  const Tensor b = ops::zeros({0, 6}, DType::F32, *device);
  poison_allocations(*device, 4 * 6 * 4);
  const Tensor out = ops::matmul(a, b);
  ASSERT_EQ(out.shape(), Shape({4, 6}));
  EXPECT_TRUE(all_close(to_doubles(out), std::vector<double>(24, 0.0), {0, 0}));
}

// ------------------------------------------------------------------------------------------ error paths
::testing::AssertionResult mentions(const Error& e, const std::string& text) {
  if (std::string(e.what()).find(text) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "message '" << e.what() << "' does not mention '" << text << "'";
}

TEST_P(MatmulVectors, RejectsBadArguments) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  const Tensor a = ops::zeros({2, 3}, DType::F32, *device);
  const Tensor b = ops::zeros({4, 5}, DType::F32, *device);
  try {
    ops::matmul(a, b);
    FAIL() << "K mismatch accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_TRUE(mentions(e, "[2, 3]"));
    EXPECT_TRUE(mentions(e, "[4, 5]"));
  }
  // different dtypes
  const Tensor h = ops::zeros({3, 5}, DType::F16, *device);
  try {
    ops::matmul(a, h);
    FAIL() << "mixed dtypes accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_TRUE(mentions(e, "f32"));
    EXPECT_TRUE(mentions(e, "f16"));
  }
  // dtypes matmul is not defined for
  for (DType bad : {DType::F64, DType::I32, DType::U8}) {
    const Tensor x = ops::zeros({2, 3}, bad, *device);
    const Tensor y = ops::zeros({3, 2}, bad, *device);
    try {
      ops::matmul(x, y);
      FAIL() << "matmul accepted " << dtype_name(bad);
    } catch (const Error& e) {
      EXPECT_TRUE(mentions(e, "matmul"));
      EXPECT_TRUE(mentions(e, std::string(dtype_name(bad))));
    }
  }
  // batch dims that do not broadcast
  const Tensor a3 = ops::zeros({2, 2, 3}, DType::F32, *device);
  const Tensor b3 = ops::zeros({3, 3, 4}, DType::F32, *device);
  try {
    ops::matmul(a3, b3);
    FAIL() << "batch mismatch accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_TRUE(mentions(e, "[2, 2, 3]"));
    EXPECT_TRUE(mentions(e, "[3, 3, 4]"));
  }
  // 0-d operand, undefined operand
  const Tensor scalar = ops::zeros({}, DType::F32, *device);
  EXPECT_THROW(ops::matmul(scalar, b), Error);
  EXPECT_THROW(ops::matmul(Tensor(), b), Error);
}

INSTANTIATE_TEST_SUITE_P(Ops, MatmulVectors, ::testing::ValuesIn(conformance_backends()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace rbee::test
