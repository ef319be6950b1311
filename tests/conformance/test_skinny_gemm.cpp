// Conformance: the skinny 16-bit product of batched decode (backends/gpu/kernels/gemm_skinny.h), which the GPU's
// qmatmul, rms_norm_qmatmul and swiglu_qmatmul take for F16 / BF16 weights at 9..64 rows when RBEE_SKINNY_GEMM=1
// (set here, so a CUDA device with cuBLAS takes it too; the CPU runs its own kernels and checks the references).
//
// Per case, on every backend present, with the same weights, each op in turn:
//   1. against qmatmul's double references (qmatmul_reference.h: the activations rounded to the weight's type,
//      f32 sums in any order), with the residual for swiglu_qmatmul (added in the kernel's epilogue);
//   2. the same call again: bit-identical (the last split of a tile adds the partial sums in split order, whichever
//      block finishes last).
// Cases cover both row tiles (9..32 and 33..64 rows), N below, at and past a 128-row weight tile, K not a multiple
// of the 64-element step, and K split over blocks (RBEE_SKINNY_SPLITS forces uneven splits; the automatic choice
// splits the long-K cases on a GPU). Outputs are poisoned before each call.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/harness.h"
#include "common/scoped_env.h"
#include "conformance/op_suites.h"
#include "conformance/qmatmul_reference.h"
#include "rbee/ops.h"

namespace rbee::test {
namespace {

struct SkinnyCase {
  const char* name;
  int64_t m, n, k;
  int splits;  // RBEE_SKINNY_SPLITS (0: the kernel's own choice)
};

const std::vector<SkinnyCase> kSkinnyCases = {
    {"m9_n37_k512", 9, 37, 512, 0},             // fewest rows, N inside one weight tile
    {"m32_n300_k72", 32, 300, 72, 0},           // last row of the small tile; K one step and a part, N past tiles
    {"m33_n256_k5504", 33, 256, 5504, 0},       // first row of the large tile; a rank's down projection K
    {"m64_n128_k2048_split3", 64, 128, 2048, 3},  // 32 steps in splits of 11, 11, 10
    {"m20_n200_k1000_split5", 20, 200, 1000, 5},  // 16 steps (the last partial) in 5 splits
};

enum class SkinnyOp { QMatmul, NormQMatmul, SwigluQMatmul };

using SkinnyParam = std::tuple<std::string, DType, int>;
class SkinnyGemmConformance : public ::testing::TestWithParam<SkinnyParam> {};

// Rows of N(0, 1) values scaled by 1 + r % 3.
std::vector<double> rows_of(int64_t m, int64_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<double> v((size_t)(m * k));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < k; ++c) v[(size_t)(r * k + c)] = (double)normal(rng) * (1.0 + (double)(r % 3));
  return v;
}

TEST_P(SkinnyGemmConformance, MatchesReferenceAndRepeatsBitForBit) {
  const auto& [backend, wtype, case_index] = GetParam();
  const SkinnyCase& c = kSkinnyCases[(size_t)case_index];
  RBEE_REQUIRE_DEVICE(backend, device);
  ScopedEnv on("RBEE_SKINNY_GEMM", "1");
  ScopedEnv splits("RBEE_SKINNY_SPLITS", std::to_string(c.splits));
  const int64_t m = c.m, n = c.n, k = c.k;
  std::mt19937_64 weight_rng(9100 + (uint64_t)case_index);
  const Weights w = make_weights(*device, wtype, n, k, weight_rng);

  for (const SkinnyOp op : {SkinnyOp::QMatmul, SkinnyOp::NormQMatmul, SkinnyOp::SwigluQMatmul}) {
    SCOPED_TRACE(op == SkinnyOp::QMatmul ? "qmatmul" : op == SkinnyOp::NormQMatmul ? "rms_norm_qmatmul"
                                                                                     : "swiglu_qmatmul");
    std::vector<double> acts, residual;  // what the product multiplies (before rounding), the residual added
    const auto call = [&]() -> std::vector<double> {
      poison_allocations(*device, (size_t)(m * n * 4));
      if (op == SkinnyOp::QMatmul) {
        const auto xv = rows_of(m, k, 21);
        acts = xv;
        return to_doubles(ops::qmatmul(make_tensor(xv, {m, k}, DType::F32, *device), w.w));
      }
      if (op == SkinnyOp::NormQMatmul) {
        const auto xv = rows_of(m, k, 22);
        std::vector<double> nw((size_t)k, 1.0);
        for (int64_t i = 0; i < k; ++i) nw[(size_t)i] = 0.5 + (double)(i % 7) / 7.0;
        const Tensor x = make_tensor(xv, {m, k}, DType::F32, *device);
        const Tensor norm_w = make_tensor(nw, {k}, DType::F32, *device);
        // What the product multiplies: the backend's own rms_norm (its f32 rounding), checked elsewhere.
        acts = to_doubles(ops::rms_norm(x, norm_w, 1e-5f));
        return to_doubles(ops::rms_norm_qmatmul(x, norm_w, 1e-5f, w.w));
      }
      const auto gv = rows_of(m, k, 23), uv = rows_of(m, k, 24);
      std::vector<double> guv((size_t)(m * 2 * k));
      for (int64_t r = 0; r < m; ++r)
        for (int64_t i = 0; i < k; ++i) {
          guv[(size_t)(r * 2 * k + i)] = gv[(size_t)(r * k + i)];
          guv[(size_t)(r * 2 * k + k + i)] = uv[(size_t)(r * k + i)];
        }
      acts = to_doubles(ops::swiglu(make_tensor(gv, {m, k}, DType::F32, *device),
                                    make_tensor(uv, {m, k}, DType::F32, *device)));
      residual = random_values(m * n, DType::F32, 25, -3, 3);
      return to_doubles(ops::swiglu_qmatmul(make_tensor(guv, {m, 2 * k}, DType::F32, *device), w.w,
                                            make_tensor(residual, {m, n}, DType::F32, *device)));
    };
    const auto first = call();
    ASSERT_EQ(first.size(), (size_t)(m * n));
    expect_qmatmul(first, w, wtype, acts, m, n, k, residual, cpu_device());
    const auto again = call();
    int64_t differ = 0;
    for (size_t i = 0; i < first.size(); ++i) differ += first[i] != again[i] ? 1 : 0;
    EXPECT_EQ(differ, 0) << "the same call again changed " << differ << " values";
  }
}

INSTANTIATE_TEST_SUITE_P(Quant, SkinnyGemmConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::Values(DType::F16, DType::BF16),
                                            ::testing::Range(0, (int)kSkinnyCases.size())),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param))) +
                                  "_" + kSkinnyCases[(size_t)std::get<2>(info.param)].name;
                         });
RBEE_CONFORMANCE_SUITE(QMatmul, SkinnyGemmConformance);

}  // namespace
}  // namespace rbee::test
