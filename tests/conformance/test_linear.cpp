// Conformance: linear (op_table.def LinearFused: x . w^T + bias + residual, rounded once) on every backend, against
// naive double-precision loops written here. Shapes: tiny and odd ones (K not a multiple of 8, one row, N = 3), and
// SD's transformer projections at reduced row counts (K 320 / 640 with N 320 / 1280 / 2560, bias and residual as
// the UNet's attention output and GEGLU projections use them), one full-width SDXL projection, an odd N. LinearRepeats:
// the same call repeated gives the same bits (the per-shape algorithm choice is fixed after the first call).
#include <cmath>
#include <string>

#include "common/harness.h"
#include "conformance/op_suites.h"
#include "rbee/core/error.h"
#include "rbee/ops.h"

namespace rbee::test {
namespace {

struct LinearCase {
  const char* name;
  Shape x_shape;  // [..., K]
  int64_t n;
  bool bias, residual;
};

void PrintTo(const LinearCase& c, std::ostream* os) { *os << c.name; }

const std::vector<LinearCase> kCases = {
    {"one_row_bias", {1, 8}, 3, true, false},
    {"odd_k_residual", {5, 7}, 9, true, true},
    {"no_epilogue", {2, 17, 24}, 40, false, false},
    {"residual_only", {3, 33, 16}, 48, false, true},
    {"sd_out_proj", {2, 96, 320}, 320, true, true},
    {"sd_geglu_in", {1, 64, 320}, 2560, true, false},
    {"sd_ff_out", {2, 40, 1280}, 320, true, true},
    {"sd_cross_kv", {2, 77, 768}, 640, false, false},
    // Full-width SDXL projection at an odd row count, SD's time-embedding rows, and an odd N (rows of 203 16-bit
    // values: 2-byte aligned output rows, another cuBLASLt plan than the 16-byte aligned ones).
    {"sdxl_proj_odd_rows", {333, 1280}, 1280, true, true},
    {"sd_time_emb", {2, 1280}, 320, true, false},
    {"odd_n", {129, 72}, 203, true, true},
};

const std::vector<DType> kDTypes = {DType::F32, DType::F16, DType::BF16};

using LinearParam = std::tuple<std::string, LinearCase, DType>;
class LinearConformance : public ::testing::TestWithParam<LinearParam> {};

TEST_P(LinearConformance, MatchesDoubleReference) {
  const auto& [backend, c, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const int64_t k = c.x_shape[c.x_shape.rank() - 1], m = c.x_shape.numel() / k;
  Shape out_shape = c.x_shape;
  out_shape[out_shape.rank() - 1] = c.n;
  const auto xv = random_values(c.x_shape.numel(), dtype, 21);
  const auto wv = random_values(c.n * k, dtype, 22, -0.5, 0.5);
  const auto bv = random_values(c.n, dtype, 23);
  const auto rv = random_values(m * c.n, dtype, 24);
  const Tensor x = make_tensor(xv, c.x_shape, dtype, *device);
  const Tensor w = make_tensor(wv, {c.n, k}, dtype, *device);
  const Tensor b = c.bias ? make_tensor(bv, {c.n}, dtype, *device) : Tensor();
  const Tensor r = c.residual ? make_tensor(rv, out_shape, dtype, *device) : Tensor();
  poison_allocations(*device, (size_t)(m * c.n * 4 * 4));
  const Tensor out = ops::linear(x, w, b, r);
  ASSERT_EQ(out.shape(), out_shape);
  ASSERT_EQ(out.dtype(), dtype);

  std::vector<double> want((size_t)(m * c.n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double s = 0;
      for (int64_t q = 0; q < k; ++q) s += xv[(size_t)(i * k + q)] * wv[(size_t)(j * k + q)];
      if (c.bias) s += bv[(size_t)j];
      if (c.residual) s += rv[(size_t)(i * c.n + j)];
      want[(size_t)(i * c.n + j)] = s;
    }
  Tolerance tol = default_tolerance(dtype);
  if (dtype == DType::F32) tol.atol *= 2.0 * std::sqrt((double)k);
  EXPECT_TRUE(all_close(to_doubles(out), want, tol));
}

std::string linear_name(const ::testing::TestParamInfo<LinearParam>& info) {
  return std::get<0>(info.param) + "_" + std::get<1>(info.param).name + "_" +
         std::string(dtype_name(std::get<2>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(Ops, LinearConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()), ::testing::ValuesIn(kCases),
                                            ::testing::ValuesIn(kDTypes)),
                         linear_name);
RBEE_CONFORMANCE_SUITE(LinearFused, LinearConformance);

// A shape's algorithm is chosen once per process (on CUDA with RBEE_LINEAR_TUNE=1: by timing the cuBLASLt candidates
// at its first call), so calls after the first give the first call's bits.
class LinearRepeats : public ::testing::TestWithParam<std::string> {};

TEST_P(LinearRepeats, LaterCallsGiveTheFirstCallsBits) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  const DType dt = DType::F16;
  const Tensor x = make_tensor(random_values(300 * 640, dt, 31), {300, 640}, dt, *device);
  const Tensor w = make_tensor(random_values(1920 * 640, dt, 32, -0.5, 0.5), {1920, 640}, dt, *device);
  const Tensor b = make_tensor(random_values(1920, dt, 33), {1920}, dt, *device);
  const std::vector<double> first = to_doubles(ops::linear(x, w, b));
  for (int i = 0; i < 3; ++i) {
    poison_allocations(*device, (size_t)(300 * 1920 * 2 * 4));
    EXPECT_EQ(to_doubles(ops::linear(x, w, b)), first) << "call " << i + 2;
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, LinearRepeats, ::testing::ValuesIn(conformance_backends()),
                         [](const auto& info) { return info.param; });

// Bad arguments are refused with the op and the argument named.
class LinearErrors : public ::testing::TestWithParam<std::string> {};

TEST_P(LinearErrors, RefusesBadShapesAndDtypes) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  const Tensor x = make_tensor(random_values(2 * 3 * 8, DType::F32, 1), {2, 3, 8}, DType::F32, *device);
  const Tensor w = make_tensor(random_values(4 * 8, DType::F32, 2), {4, 8}, DType::F32, *device);
  const Tensor w_k = make_tensor(random_values(4 * 6, DType::F32, 3), {4, 6}, DType::F32, *device);
  const Tensor bad_bias = make_tensor(random_values(3, DType::F32, 4), {3}, DType::F32, *device);
  const Tensor bad_res = make_tensor(random_values(2 * 3 * 5, DType::F32, 5), {2, 3, 5}, DType::F32, *device);
  const Tensor f16_w = make_tensor(random_values(4 * 8, DType::F16, 6), {4, 8}, DType::F16, *device);
  auto expect_error = [&](const Tensor& wt, const Tensor& b, const Tensor& r, const std::string& needle) {
    try {
      (void)ops::linear(x, wt, b, r);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(w_k, Tensor(), Tensor(), "linear: x [2, 3, 8] has 8 features but w [4, 6] takes 6");
  expect_error(w, bad_bias, Tensor(), "linear: bias must be [N] = [4]");
  expect_error(w, Tensor(), bad_res, "linear: residual must have the output's shape");
  expect_error(f16_w, Tensor(), Tensor(), "linear: w is f16 but x is f32");
}

INSTANTIATE_TEST_SUITE_P(Ops, LinearErrors, ::testing::ValuesIn(conformance_backends()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace rbee::test
