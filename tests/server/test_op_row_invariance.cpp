// The ops of a decoder step must compute each row of a batch the same way whatever the batch holds (continuous
// batching relies on it: a stream's tokens may not change with its neighbours). Each op runs on 1 row and on
// that row inside 7 rows; the row's result must be the same bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "common/harness.h"
#include "rbee/ops.h"

namespace rbee {
namespace {

using test::cpu_device;
using test::make_tensor;
using test::random_values;

constexpr int64_t kRows = 7, kRow = 3;

Tensor rows_of(int64_t rows, int64_t k, uint64_t seed) {
  return make_tensor(random_values(rows * k, DType::F32, seed), {rows, k}, DType::F32, cpu_device());
}

void expect_row_equal(const Tensor& one, const Tensor& many, int64_t row, std::string_view what) {
  const auto a = one.contiguous().to_vector<float>();
  const auto b = many.contiguous().to_vector<float>();
  const size_t n = a.size();
  ASSERT_EQ(b.size(), n * kRows) << what;
  EXPECT_EQ(0, std::memcmp(a.data(), b.data() + row * n, n * sizeof(float))) << what << ": row depends on batch";
}

class QmatmulRows : public ::testing::TestWithParam<DType> {};

TEST_P(QmatmulRows, RowEqualsAlone) {
  const int64_t k = 768, n = 96;  // k: whole K-quant super-blocks
  const Tensor w = ops::quantize(rows_of(n, k, 1), GetParam());
  const Tensor x = rows_of(kRows, k, 2);
  expect_row_equal(ops::qmatmul(x.narrow(0, kRow, 1).contiguous(), w), ops::qmatmul(x, w), kRow,
                   dtype_name(GetParam()));
}
INSTANTIATE_TEST_SUITE_P(Types, QmatmulRows,
                         ::testing::Values(DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q6_K),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(dtype_name(info.param)); });

TEST(OpRows, NormsAndActivations) {
  const int64_t k = 576;
  const Tensor x = rows_of(kRows, k, 3), r = rows_of(kRows, k, 4), w = rows_of(1, k, 5).view({k});
  const Tensor x1 = x.narrow(0, kRow, 1).contiguous(), r1 = r.narrow(0, kRow, 1).contiguous();
  expect_row_equal(ops::rms_norm(x1, w, 1e-5f), ops::rms_norm(x, w, 1e-5f), kRow, "rms_norm");
  auto [s1, n1] = ops::add_rms_norm(x1, r1, w, 1e-5f);
  auto [s7, n7] = ops::add_rms_norm(x, r, w, 1e-5f);
  expect_row_equal(s1, s7, kRow, "add_rms_norm sum");
  expect_row_equal(n1, n7, kRow, "add_rms_norm norm");
  expect_row_equal(ops::swiglu(x1, r1), ops::swiglu(x, r), kRow, "swiglu");
  expect_row_equal(ops::add(x1, r1), ops::add(x, r), kRow, "add");
}

}  // namespace
}  // namespace rbee
