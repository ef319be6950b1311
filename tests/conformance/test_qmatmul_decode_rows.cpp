// Conformance: qmatmul on F16 / BF16 weights at an LLM's batched-decode rows, the sizes where the GPU takes the
// vendor GEMM (more than 8 rows) and CUDA times a cuBLASLt algorithm per shape (cublas_blas.cu, cublaslt_plans.h:
// rows 9..256, split-K forms among the candidates, one timed winner shared by the rows of a power-of-two group).
// Shapes like Llama-2-7B's down projection, narrowed in N so the double reference stays cheap: long K (11008, a
// tensor-split rank's 5504) over few output tiles, where split-K is what a tuned choice takes.
//
// Per case, on every backend present, with the same weights:
//   1. M rows vs the double reference sum_k w[n, k] * round16(x[m, k]) within 2e-5 * sum |w . round16(x)|
//      (f32 sums in any order: tiles, split-K slices);
//   2. M2 rows (the same row group as M on CUDA, so it runs the algorithm timed for M where cuBLASLt accepts it),
//      against the same reference;
//   3. M rows again: bit-identical to step 1 (the algorithm is fixed once per shape, and its reduction does not
//      depend on timing).
// Outputs are poisoned before each call.
#include <cmath>
#include <string>
#include <vector>

#include "common/harness.h"
#include "conformance/op_suites.h"
#include "conformance/qmatmul_reference.h"
#include "rbee/ops.h"

namespace rbee::test {
namespace {

struct DecodeRowsCase {
  const char* name;
  int64_t m, m2, n, k;
};

const std::vector<DecodeRowsCase> kDecodeRowsCases = {
    {"m64_m40_n256_k11008", 64, 40, 256, 11008},  // one GPU's down projection, 33..64 rows
    {"m16_m9_n384_k5504", 16, 9, 384, 5504},      // a tensor-split rank's down projection, the first GEMM rows
    {"m128_m96_n200_k2048", 128, 96, 200, 2048},  // a rank's attention output; N not a multiple of a tile
    {"m256_m160_n96_k4096", 256, 160, 96, 4096},  // the last tuned group
    {"m257_m300_n64_k1024", 257, 300, 64, 1024},  // above it: the heuristic (cublasGemmEx) on CUDA
};

// out [m, n] of qmatmul(x, w) against the double reference on x rounded to w's type; counts and reports misses.
int64_t expect_near_reference(const std::vector<double>& got, const std::vector<double>& wv,
                              const std::vector<double>& xr, int64_t m, int64_t n, int64_t k, const char* what) {
  int64_t bad = 0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0, mag = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double p = wv[(size_t)(j * k + i)] * xr[(size_t)(r * k + i)];
        want += p;
        mag += std::fabs(p);
      }
      const double g = got[(size_t)(r * n + j)];
      if (!(std::fabs(g - want) <= 2e-5 * mag + 1e-6) && bad++ < 3) {
        ADD_FAILURE() << what << " [" << r << ", " << j << "] got " << g << " want " << want << " (sum |w x| " << mag
                      << ")";
      }
    }
  }
  return bad;
}

using DecodeRowsParam = std::tuple<std::string, DType, int>;
class QMatmulDecodeRows : public ::testing::TestWithParam<DecodeRowsParam> {};

TEST_P(QMatmulDecodeRows, MatchesDoubleReferenceAndRepeatsBitForBit) {
  const auto& [backend, wtype, case_index] = GetParam();
  const DecodeRowsCase& c = kDecodeRowsCases[(size_t)case_index];
  RBEE_REQUIRE_DEVICE(backend, device);
  const auto wv = random_values(c.n * c.k, wtype, 501 + (uint64_t)case_index, -1, 1);
  const Tensor w = make_tensor(wv, {c.n, c.k}, wtype, *device);
  auto run = [&](int64_t m, uint64_t seed, std::vector<double>* xr) {
    const auto xv = random_values(m * c.k, DType::F32, seed, -2, 2);
    *xr = naive_round16(xv, wtype);
    const Tensor x = make_tensor(xv, {m, c.k}, DType::F32, *device);
    poison_allocations(*device, (size_t)(m * c.n * 4));
    const Tensor out = ops::qmatmul(x, w);
    EXPECT_EQ(out.shape(), (Shape{m, c.n}));
    return to_doubles(out);
  };
  std::vector<double> xr, xr2, xr_again;
  const auto first = run(c.m, 601, &xr);
  EXPECT_EQ(expect_near_reference(first, wv, xr, c.m, c.n, c.k, "M"), 0);
  const auto second = run(c.m2, 602, &xr2);
  EXPECT_EQ(expect_near_reference(second, wv, xr2, c.m2, c.n, c.k, "M2"), 0);
  const auto again = run(c.m, 601, &xr_again);
  int64_t differ = 0;
  for (size_t i = 0; i < first.size(); ++i) differ += first[i] != again[i] ? 1 : 0;
  EXPECT_EQ(differ, 0) << "the second call of the same shape and operands changed " << differ << " values";
}

INSTANTIATE_TEST_SUITE_P(Quant, QMatmulDecodeRows,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::Values(DType::F16, DType::BF16),
                                            ::testing::Range(0, (int)kDecodeRowsCases.size())),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param))) +
                                  "_" + kDecodeRowsCases[(size_t)std::get<2>(info.param)].name;
                         });
RBEE_CONFORMANCE_SUITE(QMatmul, QMatmulDecodeRows);

}  // namespace
}  // namespace rbee::test
