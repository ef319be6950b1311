// The CPU prompt GEMM (src/backends/cpu/quant/qgemm.h, AVX-512 VNNI CPUs) against the row kernels that decode
// uses: a row's output must be bit-for-bit the same whether it is computed alone (M = 1, row kernels) or inside a
// prompt tile (M >= 16, packed panels), for every block type and F16 / BF16, at tile and panel remainders (M % 4,
// N % 4) and past the 64-row blocks. The values themselves are checked against double references in tests/conformance
// (QMatmulConformance). On CPUs without AVX-512 VNNI both sides run the row kernels and the test still holds.
// CpuMatVec: the decode matvec kernels (quant/matvec.h, 8 weight rows per call) against the row kernels called
// directly, for every group remainder (1..8 rows) and several K.
#include <cstring>
#include <random>

#include <hwy/targets.h>

#include "backends/cpu/quant/matvec.h"
#include "backends/cpu/quant/quant.h"
#include "common/harness.h"
#include "rbee/ops.h"

namespace rbee::test {
namespace {

class CpuQGemm : public ::testing::TestWithParam<DType> {};

TEST_P(CpuQGemm, RowsMatchTheDecodePathBitForBit) {
  const DType wtype = GetParam();
  const bool is_float = wtype == DType::F16 || wtype == DType::BF16;
  Device& device = cpu_device();
  // F16 / BF16: 34 and 129 chunks of 16 (the second past one K slice of the GEMM, ending on an odd chunk), and a k
  // that is not a multiple of 16 (the row kernels' scalar tail: the GEMM must not take it). Block types: one K slice
  // and past one (the GEMM's slices are 64 KiB of panel, 11 super-blocks or 113 blocks; Q4_1 / Q5_1 16 KiB, 102).
  std::vector<int64_t> ks{dtype_block_size(wtype) == 256 ? 768 : 544, dtype_block_size(wtype) == 256 ? 3328 : 3680};
  if (is_float) ks = {544, 2064, 536};
  const int64_t n = 37;
  std::mt19937_64 rng(7 + (int)wtype);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (const int64_t k : ks) {
    std::vector<float> wf((size_t)(n * k));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < k; ++i) wf[(size_t)(j * k + i)] = normal(rng) * 0.05f * (float)(1 + j % 5) + 0.01f;
    const Tensor wsrc = Tensor::from_vector(wf, {n, k}, device);
    const Tensor w = is_float ? ops::cast(wsrc, wtype) : ops::quantize(wsrc, wtype);
    for (int64_t m : {7, 16, 19, 70}) {  // 7: the row kernels' 4-row and 3-row tiles; the rest the GEMM where present
      std::vector<float> xf((size_t)(m * k));
      for (auto& v : xf) v = normal(rng) * 2.f;
      const auto got = to_doubles(ops::qmatmul(Tensor::from_vector(xf, {m, k}, device), w));
      for (int64_t r = 0; r < m; ++r) {
        const std::vector<float> row(xf.begin() + r * k, xf.begin() + (r + 1) * k);
        const auto alone = to_doubles(ops::qmatmul(Tensor::from_vector(row, {1, k}, device), w));
        for (int64_t j = 0; j < n; ++j) {
          const float a = (float)got[(size_t)(r * n + j)], b = (float)alone[(size_t)j];
          ASSERT_EQ(std::memcmp(&a, &b, sizeof a), 0) << dtype_name(wtype) << " k " << k << " m " << m << " row " << r
                                                      << " col " << j << ": " << a << " vs " << b;
        }
      }
    }
  }
}

// Q4_0, Q5_0, Q8_0, Q8_1 and the K-quants follow one accumulation order on every path and SIMD target (quant.h:
// one exact int32 per 32-element block, then acc = fma(d_w * d_x, float(s), acc) in block order; K-quants two
// int32 and two fmas per super-block), so every Highway target and the prompt GEMM give the same bits; a target
// that summed in lanes or in another order would not.
struct TargetGuard {
  ~TargetGuard() { hwy::SetSupportedTargetsForTest(0); }
};

class CpuBlockSumOrder : public ::testing::TestWithParam<DType> {};

TEST_P(CpuBlockSumOrder, EveryTargetAndPathGivesTheSameBits) {
  const DType wtype = GetParam();
  Device& device = cpu_device();
  // Legacy: 33 blocks (the decode kernel's 4-block steps and a remainder); K-quants: 5 super-blocks.
  const int64_t k = dtype_block_size(wtype) == 256 ? 1280 : 1056, n = 21;
  std::mt19937_64 rng(11 + (int)wtype);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> wf((size_t)(n * k));
  for (auto& v : wf) v = normal(rng) * 0.07f;
  const Tensor w = ops::quantize(Tensor::from_vector(wf, {n, k}, device), wtype);
  for (int64_t m : {1, 3, 18}) {
    std::vector<float> xf((size_t)(m * k));
    for (auto& v : xf) v = normal(rng);
    const Tensor x = Tensor::from_vector(xf, {m, k}, device);
    TargetGuard guard;
    std::vector<float> first;
    int64_t first_target = 0;
    for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
      hwy::SetSupportedTargetsForTest(target);
      const Tensor out = ops::qmatmul(x, w);
      std::vector<float> got((size_t)(m * n));
      std::memcpy(got.data(), out.contiguous().data(), got.size() * sizeof(float));
      if (first.empty()) {
        first = got;
        first_target = target;
        continue;
      }
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(std::memcmp(&got[i], &first[i], sizeof(float)), 0)
            << dtype_name(wtype) << " m " << m << " output " << i << ": " << hwy::TargetName(target) << " "
            << got[i] << " vs " << hwy::TargetName(first_target) << " " << first[i];
    }
  }
}

class CpuMatVec : public ::testing::TestWithParam<DType> {};

TEST_P(CpuMatVec, EveryGroupRemainderMatchesTheRowKernelBitForBit) {
  namespace q = cpu::quant;
  const DType wtype = GetParam();
  const q::MatVecFn mv = q::matvec_kernel(wtype);
  if (mv == nullptr) GTEST_SKIP() << "no matvec kernel for " << dtype_name(wtype) << " on this CPU";
  Device& device = cpu_device();
  std::mt19937_64 rng(23 + (int)wtype);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int64_t bs = dtype_block_size(wtype);
  for (int64_t k : {bs, 5 * bs, bs == 256 ? int64_t{2048} : int64_t{4128}}) {
    const int64_t n = 8;
    std::vector<float> wf((size_t)(n * k)), xf((size_t)k);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < k; ++i) wf[(size_t)(j * k + i)] = normal(rng) * 0.05f * (float)(1 + j % 3) - 0.01f;
    for (auto& v : xf) v = normal(rng) * 3.f;
    const Tensor w = ops::quantize(Tensor::from_vector(wf, {n, k}, device), wtype);
    const int64_t w_row = dtype_row_bytes(wtype, k);
    std::vector<unsigned char> wb((size_t)(n * w_row));
    w.copy_to_host(wb.data(), wb.size());
    std::vector<unsigned char> xq((size_t)q::activation_row_bytes(wtype, k));
    q::quantize_activation_row(wtype, xf.data(), xq.data(), k);
    std::vector<float> want((size_t)n);
    const q::RowDotFn dot = q::row_dot_kernel(wtype);
    for (int64_t j = 0; j < n; ++j) dot(k, wb.data() + j * w_row, xq.data(), 0, 1, &want[(size_t)j], 1);
    for (int rows = 1; rows <= q::kMatVecRows; ++rows) {
      std::vector<float> got((size_t)q::kMatVecRows + 1, -777.f);  // poisoned; past `rows` must stay untouched
      mv(k, wb.data(), w_row, rows, xq.data(), got.data());
      for (int j = 0; j < rows; ++j)
        ASSERT_EQ(std::memcmp(&got[(size_t)j], &want[(size_t)j], sizeof(float)), 0)
            << dtype_name(wtype) << " k " << k << " rows " << rows << " row " << j << ": " << got[(size_t)j] << " vs "
            << want[(size_t)j];
      for (size_t j = (size_t)rows; j < got.size(); ++j) ASSERT_EQ(got[j], -777.f) << "rows " << rows << " wrote " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Quant, CpuMatVec,
                         ::testing::Values(DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q8_1, DType::Q2_K, DType::Q3_K,
                                           DType::Q4_K, DType::Q5_K, DType::Q6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

INSTANTIATE_TEST_SUITE_P(Quant, CpuBlockSumOrder,
                         ::testing::Values(DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q8_1, DType::Q2_K, DType::Q3_K,
                                           DType::Q4_K, DType::Q5_K, DType::Q6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

INSTANTIATE_TEST_SUITE_P(Quant, CpuQGemm,
                         ::testing::Values(DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                                           DType::Q8_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K,
                                           DType::Q6_K, DType::F16, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace rbee::test
