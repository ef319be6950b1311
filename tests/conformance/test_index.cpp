// Conformance: index_select, gather, index_add, scatter, scatter_add on every backend against naive references
// written here, over dtypes x layouts x axes x id dtypes; plus the error paths (bad ids, shapes, dtypes, axes).
#include <cmath>
#include <random>

#include "common/expect_error.h"
#include "common/harness.h"
#include "conformance/op_suites.h"
#include "rbee/ops.h"

namespace rbee::test {
namespace {

const std::vector<DType> kPlainDTypes = {DType::F32, DType::F16, DType::BF16, DType::F64,
                                         DType::I64, DType::I32, DType::U32,  DType::U8};
const std::vector<DType> kIdDTypes = {DType::I64, DType::I32, DType::U32};
const std::vector<Layout> kLayouts = {Layout::Contiguous, Layout::Strided, Layout::Transposed};
const std::vector<int> kAxes = {0, 1, -1};

const Shape kShape{3, 5, 37};

enum class IndexOp { Select, Gather, Add, Scatter, ScatterAdd };
const std::vector<IndexOp> kIndexOps = {IndexOp::Select, IndexOp::Gather, IndexOp::Add, IndexOp::Scatter,
                                        IndexOp::ScatterAdd};
const char* index_op_name(IndexOp op) {
  switch (op) {
    case IndexOp::Select: return "index_select";
    case IndexOp::Gather: return "gather";
    case IndexOp::Add: return "index_add";
    case IndexOp::Scatter: return "scatter";
    case IndexOp::ScatterAdd: return "scatter_add";
  }
  return "?";
}

std::string axis_name(int axis) { return axis < 0 ? "axisneg" + std::to_string(-axis) : "axis" + std::to_string(axis); }

// n ids uniform in [0, limit): with n > limit or by chance, repeats are common.
std::vector<double> random_ids(int64_t n, int64_t limit, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, limit - 1);
  std::vector<double> out((size_t)n);
  for (auto& v : out) v = (double)dist(rng);
  return out;
}

double wrap_to_dtype(double v, DType dtype) {
  const int64_t i = (int64_t)v;
  switch (dtype) {
    case DType::I32: return (double)(int32_t)(uint32_t)i;
    case DType::U32: return (double)(uint32_t)i;
    case DType::U8: return (double)(uint8_t)i;
    default: return v;
  }
}

// Row-major coordinates of flat index f in shape, and back.
std::vector<int64_t> coords_of(const Shape& shape, int64_t f) {
  std::vector<int64_t> c((size_t)shape.rank());
  for (int d = shape.rank() - 1; d >= 0; --d) {
    c[(size_t)d] = f % shape[d];
    f /= shape[d];
  }
  return c;
}
int64_t flat_of(const Shape& shape, const std::vector<int64_t>& c) {
  int64_t f = 0;
  for (int d = 0; d < shape.rank(); ++d) f = f * shape[d] + c[(size_t)d];
  return f;
}

// The ids shape of gather/scatter for x_shape: m along axis, and one less in the first other dimension (when
// that is not the last axis) so that ids smaller than x outside the axis are covered too.
Shape nd_ids_shape(const Shape& x_shape, int axis, int64_t m) {
  Shape s = x_shape;
  s[axis] = m;
  const int other = axis == 0 ? 1 : 0;
  if (other < s.rank() - 1 && s[other] > 1) s[other] -= 1;
  return s;
}

struct IndexCase {
  IndexOp op;
  DType dtype, id_dtype;
  Layout layout;
  Shape x_shape;
  int axis;   // as passed to the op (may be negative)
  int64_t m;  // ids along the axis
  uint64_t seed;
};

void run_index_case(Device& device, const IndexCase& c) {
  const int a = c.axis < 0 ? c.axis + c.x_shape.rank() : c.axis;
  const bool adds = c.op == IndexOp::Add || c.op == IndexOp::ScatterAdd;
  const bool is_unsigned = c.dtype == DType::U32 || c.dtype == DType::U8;
  // Ops that add see integers (exact in every dtype, u8 sums wrap); ops that move see fractional values too.
  const auto x_vals = adds ? random_values(c.x_shape.numel(), DType::I32, c.seed, is_unsigned ? 0 : -50, 100)
                           : random_values(c.x_shape.numel(), c.dtype, c.seed, is_unsigned ? 0 : -50, 100);
  const bool one_d_ids = c.op == IndexOp::Select || c.op == IndexOp::Add;
  const Shape ids_shape = one_d_ids ? Shape{c.m} : nd_ids_shape(c.x_shape, a, c.m);
  const auto ids = random_ids(ids_shape.numel(), c.x_shape[a], c.seed + 1);
  Shape src_shape = ids_shape;
  if (c.op == IndexOp::Add) {
    src_shape = c.x_shape;
    src_shape[a] = c.m;
  }
  const auto src_vals = random_values(src_shape.numel(), DType::I32, c.seed + 2, is_unsigned ? 0 : -20, 50);

  const Tensor x = make_tensor(x_vals, c.x_shape, c.dtype, device, c.layout);
  const Tensor id = make_tensor(ids, ids_shape, c.id_dtype, device, c.layout);
  const Tensor src = make_tensor(src_vals, src_shape, c.dtype, device, c.layout);

  Shape out_shape = c.x_shape;
  if (c.op == IndexOp::Select) out_shape[a] = c.m;
  if (c.op == IndexOp::Gather) out_shape = ids_shape;
  std::vector<double> want((size_t)out_shape.numel());
  switch (c.op) {
    case IndexOp::Select:
      for (int64_t f = 0; f < out_shape.numel(); ++f) {
        auto co = coords_of(out_shape, f);
        co[(size_t)a] = (int64_t)ids[(size_t)co[(size_t)a]];
        want[(size_t)f] = x_vals[(size_t)flat_of(c.x_shape, co)];
      }
      break;
    case IndexOp::Gather:
      for (int64_t f = 0; f < out_shape.numel(); ++f) {
        auto co = coords_of(ids_shape, f);
        co[(size_t)a] = (int64_t)ids[(size_t)f];
        want[(size_t)f] = x_vals[(size_t)flat_of(c.x_shape, co)];
      }
      break;
    case IndexOp::Add:
    case IndexOp::Scatter:
    case IndexOp::ScatterAdd:
      want = x_vals;
      // src in row-major order: for scatter, a later write to the same element replaces an earlier one.
      for (int64_t f = 0; f < src_shape.numel(); ++f) {
        auto co = coords_of(src_shape, f);
        co[(size_t)a] = (int64_t)ids[(size_t)(c.op == IndexOp::Add ? co[(size_t)a] : f)];
        double& target = want[(size_t)flat_of(c.x_shape, co)];
        target = c.op == IndexOp::Scatter ? src_vals[(size_t)f] : target + src_vals[(size_t)f];
      }
      if (adds) {
        for (auto& w : want) w = wrap_to_dtype(w, c.dtype);
      }
      break;
  }

  poison_allocations(device, (size_t)(out_shape.numel() * dtype_type_size(c.dtype)));
  Tensor out;
  switch (c.op) {
    case IndexOp::Select: out = ops::index_select(x, id, c.axis); break;
    case IndexOp::Gather: out = ops::gather(x, id, c.axis); break;
    case IndexOp::Add: out = ops::index_add(x, id, src, c.axis); break;
    case IndexOp::Scatter: out = ops::scatter(x, id, src, c.axis); break;
    case IndexOp::ScatterAdd: out = ops::scatter_add(x, id, src, c.axis); break;
  }
  ASSERT_EQ(out.shape(), out_shape);
  ASSERT_EQ(out.dtype(), c.dtype);
  EXPECT_TRUE(all_close(to_doubles(out), want, {0, 0}));
  EXPECT_TRUE(all_close(to_doubles(x), x_vals, {0, 0})) << "x must not change";
}

using IndexParam = std::tuple<std::string, IndexOp, DType, Layout, int>;
class IndexConformance : public ::testing::TestWithParam<IndexParam> {};

TEST_P(IndexConformance, MatchesNaiveReference) {
  const auto& [backend, op, dtype, layout, axis] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  run_index_case(*device, {op, dtype, DType::I64, layout, kShape, axis, 7, 300 + 7 * (uint64_t)(axis + 1)});
}

INSTANTIATE_TEST_SUITE_P(Ops, IndexConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kIndexOps), ::testing::ValuesIn(kPlainDTypes),
                                            ::testing::ValuesIn(kLayouts), ::testing::ValuesIn(kAxes)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + index_op_name(std::get<1>(info.param)) + "_" +
                                  std::string(dtype_name(std::get<2>(info.param))) + "_" +
                                  layout_name(std::get<3>(info.param)) + "_" + axis_name(std::get<4>(info.param));
                         });
RBEE_CONFORMANCE_SUITE(IndexSelect, IndexConformance);
RBEE_CONFORMANCE_SUITE(Gather, IndexConformance);
RBEE_CONFORMANCE_SUITE(IndexAdd, IndexConformance);
RBEE_CONFORMANCE_SUITE(Scatter, IndexConformance);
RBEE_CONFORMANCE_SUITE(ScatterAdd, IndexConformance);

// Every id dtype, through every layout of the ids tensor.
using IdDTypeParam = std::tuple<std::string, IndexOp, DType, Layout>;
class IndexIdDTypes : public ::testing::TestWithParam<IdDTypeParam> {};

TEST_P(IndexIdDTypes, MatchesNaiveReference) {
  const auto& [backend, op, id_dtype, layout] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  run_index_case(*device, {op, DType::F32, id_dtype, layout, kShape, 1, 9, 800});
}

INSTANTIATE_TEST_SUITE_P(Ops, IndexIdDTypes,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kIndexOps), ::testing::ValuesIn(kIdDTypes),
                                            ::testing::ValuesIn(kLayouts)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + index_op_name(std::get<1>(info.param)) + "_ids_" +
                                  std::string(dtype_name(std::get<2>(info.param))) + "_" +
                                  layout_name(std::get<3>(info.param));
                         });

// Shapes large enough for the thread pool (embedding-style lookups along axis 0, long rows along axis 1).
using IndexLargeParam = std::tuple<std::string, IndexOp, int>;
class IndexLarge : public ::testing::TestWithParam<IndexLargeParam> {};

TEST_P(IndexLarge, MatchesNaiveReference) {
  const auto& [backend, op, axis] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  run_index_case(*device, {op, DType::F32, DType::I32, Layout::Contiguous, Shape{40, 2500}, axis, 60, 900});
}

INSTANTIATE_TEST_SUITE_P(Ops, IndexLarge,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kIndexOps), ::testing::Values(0, 1)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + index_op_name(std::get<1>(info.param)) + "_" +
                                  axis_name(std::get<2>(info.param));
                         });

// scatter: of several writes to one element, the last in row-major order of ids wins.
TEST(IndexSemantics, ScatterLastWriteWins) {
  Device& cpu = cpu_device();
  const Tensor x = make_tensor(std::vector<double>(6, -1.0), {2, 3}, DType::F32, cpu);
  // Along axis 0: column 0 is written by ids[0][0] = 1 and ids[1][0] = 1 -> src[1][0] wins.
  const Tensor ids0 = make_tensor({1, 0, 1, 1, 1, 0}, {2, 3}, DType::I64, cpu);
  const Tensor src = make_tensor({10, 20, 30, 40, 50, 60}, {2, 3}, DType::F32, cpu);
  EXPECT_TRUE(all_close(to_doubles(ops::scatter(x, ids0, src, 0)), {-1, 20, 60, 40, 50, 30}, {0, 0}));
  // Along axis 1: row 0 writes column 2 three times -> the last, 30.
  const Tensor ids1 = make_tensor({2, 2, 2, 0, 0, 1}, {2, 3}, DType::I32, cpu);
  EXPECT_TRUE(all_close(to_doubles(ops::scatter(x, ids1, src, 1)), {-1, -1, 30, 50, 60, -1}, {0, 0}));
  EXPECT_TRUE(all_close(to_doubles(ops::scatter_add(x, ids1, src, 1)), {-1, -1, 59, 89, 59, -1}, {0, 0}));
}

// No ids: empty results, and the in-place-style ops return x unchanged.
TEST(IndexSemantics, EmptyIds) {
  Device& cpu = cpu_device();
  const auto vals = random_values(12, DType::F32, 8);
  const Tensor x = make_tensor(vals, {4, 3}, DType::F32, cpu);
  const Tensor none = Tensor::empty({0}, DType::I64, cpu);
  EXPECT_EQ(ops::index_select(x, none, 1).shape(), Shape({4, 0}));
  EXPECT_TRUE(all_close(to_doubles(ops::index_add(x, none, Tensor::empty({0, 3}, DType::F32, cpu), 0)), vals, {0, 0}));
  const Tensor none2 = Tensor::empty({4, 0}, DType::I32, cpu);
  EXPECT_EQ(ops::gather(x, none2, 1).shape(), Shape({4, 0}));
  EXPECT_TRUE(all_close(to_doubles(ops::scatter(x, none2, Tensor::empty({4, 0}, DType::F32, cpu), 1)), vals, {0, 0}));
}

// ---------------------------------------------------------------------------------------------- errors
class IndexErrors : public ::testing::Test {
 protected:
  Device& cpu = cpu_device();
  const Tensor x = make_tensor(random_values(12, DType::F32, 3), {4, 3}, DType::F32, cpu);
  Tensor ids(std::vector<double> v, DType t = DType::I64, Shape shape = {}) {
    if (shape.rank() == 0) shape = Shape{(int64_t)v.size()};
    return make_tensor(v, shape, t, cpu);
  }
  Tensor values(const Shape& shape, DType t = DType::F32) {
    return make_tensor(random_values(shape.numel(), t, 4, 0, 9), shape, t, cpu);
  }
};

TEST_F(IndexErrors, OutOfRangeIdsNameTheIdAndItsPosition) {
  expect_invalid([&] { ops::index_select(x, ids({0, 2, 4}), 0); },
                 "index_select: id 4 at position 2 of ids is out of range for axis 0 of size 4");
  expect_invalid([&] { ops::index_select(x, ids({1, -1}, DType::I32), 1); },
                 "index_select: id -1 at position 1 of ids is out of range for axis 1 of size 3");
  expect_invalid([&] { ops::gather(x, ids({0, 1, 2, 0, 3, 0}, DType::I64, {2, 3}), 1); },
                 "gather: id 3 at position [1, 1] of ids is out of range for axis 1 of size 3");
  expect_invalid([&] { ops::index_add(x, ids({3, 0, -2}), values({3, 3}), 0); },
                 "index_add: id -2 at position 2 of ids");
  expect_invalid([&] { ops::scatter(x, ids({0, 4000000000.0}, DType::U32, {1, 2}), values({1, 2}), 0); },
                 "scatter: id 4000000000 at position [0, 1] of ids is out of range for axis 0 of size 4");
  expect_invalid([&] { ops::scatter_add(x, ids({5, 0}, DType::I32, {2, 1}), values({2, 1}), 1); },
                 "scatter_add: id 5 at position [0, 0] of ids is out of range for axis 1 of size 3");
}

TEST_F(IndexErrors, IdsMustHaveAnIndexDType) {
  expect_invalid([&] { ops::index_select(x, ids({0, 1}, DType::F32), 0); },
                 "index_select: ids must be i64, i32 or u32, got f32");
  expect_invalid([&] { ops::gather(x, ids({0, 1, 0, 1}, DType::U8, {2, 2}), 0); },
                 "gather: ids must be i64, i32 or u32, got u8");
  expect_invalid([&] { ops::index_add(x, ids({0}, DType::F16), values({1, 3}), 0); },
                 "index_add: ids must be i64, i32 or u32, got f16");
  expect_invalid([&] { ops::scatter(x, ids({0}, DType::I32, {1, 1}).to(DType::F64), values({1, 1}), 0); },
                 "scatter: ids must be i64, i32 or u32, got f64");
  expect_invalid([&] { ops::scatter_add(x, ids({0}, DType::BF16, {1, 1}), values({1, 1}), 0); },
                 "scatter_add: ids must be i64, i32 or u32, got bf16");
}

TEST_F(IndexErrors, ShapesAndDTypesMustAgree) {
  expect_invalid([&] { ops::index_select(x, ids({0, 1}, DType::I64, {1, 2}), 0); },
                 "index_select: ids must be 1-D, got shape [1, 2]");
  expect_invalid([&] { ops::gather(x, ids({0, 1}), 0); }, "gather: ids must have x's rank 2, got shape [2]");
  expect_invalid([&] { ops::gather(x, ids({0, 1, 0, 1, 0, 1, 0, 1}, DType::I64, {2, 4}), 0); },
                 "gather: ids shape [2, 4] exceeds x shape [4, 3] in dimension 1");
  expect_invalid([&] { ops::index_add(x, ids({0, 1}), values({2, 4}), 0); },
                 "index_add: src shape [2, 4] must be [2, 3]");
  expect_invalid([&] { ops::index_add(x, ids({0, 1}), values({2, 3}, DType::F16), 0); },
                 "index_add: src is f16 but x is f32");
  expect_invalid([&] { ops::scatter(x, ids({0, 1}, DType::I64, {1, 2}), values({2, 2}), 1); },
                 "scatter: src shape [2, 2] must equal ids shape [1, 2]");
  expect_invalid([&] { ops::scatter_add(x, ids({0, 1}, DType::I64, {1, 2}), values({1, 2}, DType::I32), 1); },
                 "scatter_add: src is i32 but x is f32");
  expect_invalid([&] { ops::scatter(x, ids({0, 1, 2, 3, 0}, DType::I64, {5, 1}), values({5, 1}), 1); },
                 "scatter: ids shape [5, 1] exceeds x shape [4, 3] in dimension 0");
  const Tensor quantized = Tensor::empty({2, 32}, DType::Q8_0, cpu);
  expect_invalid([&] { ops::index_select(quantized, ids({0}), 0); }, "not defined for dtypes (q8_0");
}

TEST_F(IndexErrors, AxisMustExist) {
  expect_invalid([&] { ops::index_select(x, ids({0}), 2); },
                 "index_select: axis 2 is out of range for x of shape [4, 3]");
  expect_invalid([&] { ops::gather(x, ids({0}, DType::I64, {1, 1}), -3); }, "gather: axis -3 is out of range");
  expect_invalid([&] { ops::index_add(x, ids({0}), values({1, 3}), 5); }, "index_add: axis 5 is out of range");
  expect_invalid([&] { ops::scatter(x, ids({0}, DType::I64, {1, 1}), values({1, 1}), -3); },
                 "scatter: axis -3 is out of range");
  expect_invalid([&] { ops::scatter_add(x, ids({0}, DType::I64, {1, 1}), values({1, 1}), 2); },
                 "scatter_add: axis 2 is out of range");
  expect_invalid([&] { ops::index_select(Tensor(), ids({0}), 0); },
                 "index_select: argument 'x' is an undefined tensor");
}

}  // namespace
}  // namespace rbee::test
