// The op table against the rest of the tree: every op has a conformance suite, names and rules come out of the
// table in order, and the checks themselves catch what they are meant to catch.
#include <set>

#include <gtest/gtest.h>

#include "common/harness.h"
#include "conformance/op_suites.h"
#include "rbee/backend/kernels.h"

namespace rbee::test {
namespace {

std::map<std::string, int> gtest_suite_counts() {
  std::map<std::string, int> counts;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(i);
    counts[suite.name()] += suite.total_test_count();
  }
  return counts;
}

std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

TEST(OpTable, EveryOpHasAConformanceSuite) {
  const std::vector<std::string> problems = op_suite_problems(op_suites(), gtest_suite_counts());
  EXPECT_TRUE(problems.empty()) << join(problems);
}

TEST(OpTable, TheSuiteCheckFailsForAMissingOrEmptySuite) {
  std::map<OpKind, std::vector<std::string>> suites = op_suites();
  suites.erase(OpKind::Softmax);
  suites[OpKind::Matmul].push_back("NoSuchConformance");
  const std::vector<std::string> problems = op_suite_problems(suites, gtest_suite_counts());
  ASSERT_EQ(problems.size(), 2u) << join(problems);
  EXPECT_NE(problems[0].find("'softmax' has no conformance suite"), std::string::npos) << problems[0];
  EXPECT_NE(problems[1].find("'NoSuchConformance' has no test cases"), std::string::npos) << problems[1];
}

TEST(OpTable, NamesAreUniqueAndInEnumOrder) {
  std::set<std::string> names;
  for (int i = 0; i < kOpKindCount; ++i) {
    const std::string name = op_kind_name((OpKind)i);
    EXPECT_NE(name, "unknown") << "op " << i;
    EXPECT_TRUE(names.insert(name).second) << "duplicate op name " << name;
  }
  EXPECT_STREQ(op_kind_name(OpKind::Unary), "unary");
  EXPECT_STREQ(op_kind_name(OpKind::RmsNorm), "rms_norm");
  EXPECT_STREQ(op_kind_name(OpKind::PagedAttention), "paged_attention");
  EXPECT_STREQ(op_kind_name((OpKind)kOpKindCount), "unknown");
  EXPECT_STREQ(unary_op_name(UnaryOp::GeluTanh), "gelu_tanh");
  EXPECT_STREQ(unary_op_name(UnaryOp::NormCdf), "normcdf");
  EXPECT_STREQ(binary_op_name(BinaryOp::Ge), "ge");
  EXPECT_STREQ(reduce_op_name(ReduceOp::ArgMax), "argmax");
  EXPECT_TRUE(is_comparison(BinaryOp::Eq));
  EXPECT_FALSE(is_comparison(BinaryOp::Max));
}

TEST(OpTable, RulesFollowTheTable) {
  const auto valid = [](OpKind op, std::initializer_list<DType> d) {
    return op_dtypes_valid(op, std::span<const DType>(d.begin(), d.size()));
  };
  EXPECT_TRUE(valid(OpKind::Softmax, {DType::BF16, DType::BF16}));
  EXPECT_FALSE(valid(OpKind::Softmax, {DType::I32, DType::I32}));
  EXPECT_TRUE(valid(OpKind::Binary, {DType::I32, DType::I32, DType::U8}));
  EXPECT_FALSE(valid(OpKind::Binary, {DType::I32, DType::F32, DType::I32}));
  EXPECT_TRUE(valid(OpKind::QMatmul, {DType::F32, DType::Q4_K, DType::F32}));
  EXPECT_FALSE(valid(OpKind::QMatmul, {DType::F16, DType::Q4_K, DType::F32}));
  EXPECT_TRUE(valid(OpKind::Gather, {DType::U8, DType::U32, DType::U8}));
  EXPECT_FALSE(valid(OpKind::Gather, {DType::U8, DType::F32, DType::U8}));
  EXPECT_TRUE(valid(OpKind::Copy, {DType::Q8_0, DType::Q8_0}));
  EXPECT_FALSE(valid(OpKind::Fill, {DType::Q8_0}));
  EXPECT_FALSE(valid(OpKind::Unary, {}));
}

// A backend that overrides nothing: every kernel entry of the table throws Unsupported naming op and backend.
class NoKernels final : public Kernels {
 public:
  NoKernels() : Kernels("nothing") {}
  bool supports(OpKind, std::span<const DType>) const override { return false; }
};

TEST(OpTable, DefaultKernelsReportTheOpAndTheBackend) {
  NoKernels k;
  Tensor t = make_tensor({1.0}, Shape{1}, DType::F32, cpu_device());
  try {
    k.fill(t, 0.0);
    FAIL() << "the default kernel returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("op 'fill' is not implemented by the nothing backend"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace rbee::test
