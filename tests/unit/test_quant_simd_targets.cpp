// The CPU quantized-matmul kernels on every SIMD target this build compiled (AVX3, AVX2, SSE4, scalar ...)
// that this CPU runs: the AVX2 intrinsics paths and the portable Highway paths must give the same results.
// Each target is compared with a double reference built from dequantized weights and activations.
#include <cmath>
#include <random>

#include <hwy/targets.h>

#include "common/harness.h"
#include "rbee/ops.h"

namespace rbee::test {
namespace {

DType activation_type(DType w) {
  switch (w) {
    case DType::Q4_1:
    case DType::Q5_1: return DType::Q8_1;
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0:
    case DType::Q8_1: return DType::Q8_0;
    case DType::F32: return DType::F32;
    case DType::F16: return DType::F16;  // x rounded to w's 16-bit type (op_table.def, QMatmul)
    case DType::BF16: return DType::BF16;
    default: return DType::Q8_K;
  }
}

// Restores Highway's own target choice when a test ends, even on failure.
struct TargetGuard {
  ~TargetGuard() { hwy::SetSupportedTargetsForTest(0); }
};

class QuantSimdTargets : public ::testing::TestWithParam<DType> {};

TEST_P(QuantSimdTargets, EveryTargetMatchesTheReference) {
  const DType wtype = GetParam();
  Device& device = cpu_device();
  const int64_t m = 5, n = 19, k = 768;
  std::mt19937_64 rng(99 + (int)wtype);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> wf((size_t)(n * k)), xf((size_t)(m * k));
  for (auto& v : wf) v = normal(rng) * 0.1f;
  for (auto& v : xf) v = normal(rng);
  Tensor w = Tensor::from_vector(wf, {n, k}, device);
  w = is_quantized(wtype) ? ops::quantize(w, wtype) : ops::cast(w, wtype);
  const Tensor x = Tensor::from_vector(xf, {m, k}, device);
  const auto w_hat = to_doubles(is_quantized(wtype) ? ops::dequantize(w) : ops::cast(w, DType::F32));
  const DType atype = activation_type(wtype);
  const auto x_hat = atype == DType::F32   ? to_doubles(x)
                     : !is_quantized(atype) ? to_doubles(ops::cast(ops::cast(x, atype), DType::F32))
                                            : to_doubles(ops::dequantize(ops::quantize(x, atype)));
  std::vector<double> want((size_t)(m * n)), mag((size_t)(m * n));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < k; ++i) {
        want[r * n + j] += w_hat[j * k + i] * x_hat[r * k + i];
        mag[r * n + j] += std::fabs(w_hat[j * k + i] * x_hat[r * k + i]);
      }

  TargetGuard guard;
  const auto targets = hwy::SupportedAndGeneratedTargets();
#ifdef HWY_COMPILE_ONLY_STATIC
  // RBEE_SIMD_ONE_TARGET (the sanitizer build) compiles one target: there is nothing to compare it with.
  if (targets.size() < 2) GTEST_SKIP() << "one SIMD target compiled (RBEE_SIMD_ONE_TARGET)";
#endif
  ASSERT_GE(targets.size(), 2u) << "expected a SIMD target and a fallback";
  std::vector<double> first;
  for (int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    const auto got = to_doubles(ops::qmatmul(x, w));
    if (first.empty()) first = got;
    for (size_t i = 0; i < got.size(); ++i) {
      // Q4_1/Q5_1 take the activation block sums as f16 (2^-11 relative), the rest is f32 rounding. Targets
      // share that f16 rounding, so they agree with each other to f32 rounding.
      const double tol = 2e-5 * mag[i] + (atype == DType::Q8_1 ? 2e-3 * mag[i] : 0.0) + 1e-6;
      ASSERT_NEAR(got[i], want[i], tol) << hwy::TargetName(target) << " output " << i;
      ASSERT_NEAR(got[i], first[i], 2e-5 * mag[i] + 1e-6) << hwy::TargetName(target) << " vs "
                                                            << hwy::TargetName(targets[0]) << " output " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Quant, QuantSimdTargets,
                         ::testing::Values(DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                                           DType::Q8_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K,
                                           DType::Q6_K, DType::Q8_K, DType::F32, DType::F16, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace rbee::test
