// Conformance: the fused decoder ops against their definitions, on every backend.
//
// (a) rms_norm_qmatmul / add_rms_norm_qmatmul: h = rms_norm(x [+ residual]) * w with the CPU's rms_norm numerics
//     (f32 squares summed in double, the mean rounded to f32, 1 / sqrtf, x * rstd * w), computed here on the
//     host; then qmatmul's two double references (test_quant.cpp): tight, on the activations the kernel
//     multiplies (h quantized to the weight's activation format, or rounded to F16 / BF16 weights' type;
//     2e-5 * sum |w^ x^|), and exact-h (plus the
//     activation rounding bound). The sum output equals x + residual exactly.
// (b) swiglu_qmatmul: act = the backend's own swiglu of the two halves (its numerics are swiglu's conformance
//     case), then the same two references; the residual adds one f32 rounding.
// (c) rope_kv_cache_write equals rope(q), rope(k) and kv_cache_write on the same backend bit for bit, on views of
//     one stacked q/k/v row, for both rope modes, a partial rotary dim and llama.cpp's angles.
// On GPUs M = 1 and 7 run the matvec / gemv kernels; 20 and 144 run MMQ (block types) or the vendor GEMM (float
// weights), where the residual is added by a separate launch; residual variants of each.
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>

#include <fmt/format.h>

#include "common/harness.h"
#include "conformance/op_suites.h"
#include "conformance/qmatmul_reference.h"
#include "rbee/core/half.h"
#include "rbee/ops.h"

namespace rbee::test {
namespace {

const std::vector<DType> kWeightTypes = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                                         DType::Q8_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K,
                                         DType::Q6_K, DType::Q8_K, DType::F32,  DType::F16,  DType::BF16};

// Weights, make_weights, expect_qmatmul: qmatmul's references (qmatmul_reference.h).

struct FusedCase {
  const char* name;
  int64_t m;
  bool residual;
  int64_t k = 512, n = 37;  // k: the norm's / silu's width (the weights' row length), n: output features
};
// m1_wide: rows of 2304 (9 x 256: the single-row fused gemv of float weights ends each row on a partial round of
// its 4-chunk loads) and 600 of them, more than the grid of that kernel has warps on tools/gpu_emu (4 emulated
// multiprocessors: 8 blocks x 16 warps), so warps take several rows there and load the next row ahead (an H100's
// 264 x 16 warps take one row each).
const std::vector<FusedCase> kFusedCases = {
    {"m1", 1, false},   {"m1_residual", 1, true},           {"m7_residual", 7, true},
    {"m20", 20, false}, {"m144_residual", 144, true},        {"m1_wide_residual", 1, true, 2304, 600},
};

using FusedParam = std::tuple<std::string, DType, int>;
std::string fused_name(const ::testing::TestParamInfo<FusedParam>& info) {
  return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param))) + "_" +
         kFusedCases[(size_t)std::get<2>(info.param)].name;
}

// Values: N(0, 1) times (1 + r % 4), one outlier per row.
std::vector<double> hidden_states(int64_t m, int64_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<double> v((size_t)(m * k));
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < k; ++c) v[(size_t)(r * k + c)] = (double)normal(rng) * (1.0 + (double)(r % 4));
    v[(size_t)(r * k + (r * 37 + (int64_t)seed) % k)] = 12.0;
  }
  return v;
}

// ------------------------------------------------------------------------------ (a) rms_norm_qmatmul
class NormQMatmulConformance : public ::testing::TestWithParam<FusedParam> {};

TEST_P(NormQMatmulConformance, MatchesNormThenQMatmul) {
  const auto& [backend, wtype, case_index] = GetParam();
  const FusedCase& c = kFusedCases[(size_t)case_index];
  RBEE_REQUIRE_DEVICE(backend, device);
  const int64_t m = c.m, k = c.k, n = c.n;
  const float eps = 1e-5f;
  std::mt19937_64 weight_rng(4321 + (int)wtype);
  const Weights w = make_weights(*device, wtype, n, k, weight_rng);
  const auto xv = hidden_states(m, k, 5);
  const auto rv = hidden_states(m, k, 6);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> uniform(0.5f, 1.5f);
  std::vector<double> nw((size_t)k);
  for (auto& v : nw) v = (double)uniform(rng);

  // h as the CPU's rms_norm computes it.
  std::vector<double> s((size_t)(m * k)), h((size_t)(m * k));
  for (int64_t r = 0; r < m; ++r) {
    double ss = 0;
    for (int64_t i = r * k; i < (r + 1) * k; ++i) {
      const float v = c.residual ? (float)xv[i] + (float)rv[i] : (float)xv[i];
      s[i] = v;
      ss += (double)(v * v);
    }
    const float mean = (float)(ss / (double)k);
    const float rstd = 1.0f / std::sqrt(mean + eps);
    for (int64_t i = r * k; i < (r + 1) * k; ++i) {
      const float scaled = (float)s[i] * rstd;
      h[i] = (double)(scaled * (float)nw[i - r * k]);
    }
  }

  const Tensor x = make_tensor(xv, {m, k}, DType::F32, *device);
  const Tensor res = make_tensor(rv, {m, k}, DType::F32, *device);
  const Tensor norm_w = make_tensor(nw, {k}, DType::F32, *device);
  poison_allocations(*device, (size_t)(m * n * 4));
  poison_allocations(*device, (size_t)(m * k * 4));
  Tensor out, sum;
  if (c.residual) std::tie(sum, out) = ops::add_rms_norm_qmatmul(x, res, norm_w, eps, w.w);
  else out = ops::rms_norm_qmatmul(x, norm_w, eps, w.w);
  ASSERT_EQ(out.shape(), (Shape{m, n}));
  ASSERT_EQ(out.dtype(), DType::F32);
  if (c.residual) {
    ASSERT_EQ(sum.shape(), (Shape{m, k}));
    EXPECT_TRUE(all_close(to_doubles(sum), s, {0, 0})) << "sum output";
  }
  expect_qmatmul(to_doubles(out), w, wtype, h, m, n, k, {}, cpu_device());
}

INSTANTIATE_TEST_SUITE_P(Fused, NormQMatmulConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kWeightTypes),
                                            ::testing::Range(0, (int)kFusedCases.size())),
                         fused_name);
RBEE_CONFORMANCE_SUITE(NormQMatmul, NormQMatmulConformance);

// -------------------------------------------------------------------------------- (b) swiglu_qmatmul
class SwigluQMatmulConformance : public ::testing::TestWithParam<FusedParam> {};

TEST_P(SwigluQMatmulConformance, MatchesSwigluThenQMatmul) {
  const auto& [backend, wtype, case_index] = GetParam();
  const FusedCase& c = kFusedCases[(size_t)case_index];
  RBEE_REQUIRE_DEVICE(backend, device);
  const int64_t m = c.m, inner = c.k, n = c.n;
  std::mt19937_64 weight_rng(8765 + (int)wtype);
  const Weights w = make_weights(*device, wtype, n, inner, weight_rng);
  const auto gv = hidden_states(m, inner, 11);
  const auto uv = hidden_states(m, inner, 12);
  std::vector<double> guv((size_t)(m * 2 * inner));
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < inner; ++i) {
      guv[(size_t)(r * 2 * inner + i)] = gv[(size_t)(r * inner + i)];
      guv[(size_t)(r * 2 * inner + inner + i)] = uv[(size_t)(r * inner + i)];
    }
  }
  const auto act = to_doubles(ops::swiglu(make_tensor(gv, {m, inner}, DType::F32, *device),
                                          make_tensor(uv, {m, inner}, DType::F32, *device)));
  const std::vector<double> rv = c.residual ? random_values(m * n, DType::F32, 13, -3, 3) : std::vector<double>{};
  const Tensor gate_up = make_tensor(guv, {m, 2 * inner}, DType::F32, *device);
  poison_allocations(*device, (size_t)(m * n * 4));
  const Tensor out = c.residual
                         ? ops::swiglu_qmatmul(gate_up, w.w, make_tensor(rv, {m, n}, DType::F32, *device))
                         : ops::swiglu_qmatmul(gate_up, w.w);
  ASSERT_EQ(out.shape(), (Shape{m, n}));
  expect_qmatmul(to_doubles(out), w, wtype, act, m, n, inner, rv, cpu_device());
}

INSTANTIATE_TEST_SUITE_P(Fused, SwigluQMatmulConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kWeightTypes),
                                            ::testing::Range(0, (int)kFusedCases.size())),
                         fused_name);
RBEE_CONFORMANCE_SUITE(SwigluQMatmul, SwigluQMatmulConformance);

// ---------------------------------------------------------------------------- (c) rope_kv_cache_write
struct RopeKvCase {
  const char* name;
  RopeMode mode;
  int d, rotary_dim;
  float freq_ratio;
  int64_t hq = 4, hkv = 2;
};
// The GPU kernel gives each token `chunks` blocks of 256 work units sharing one cos / sin table: the wide cases
// take several blocks a token (Llama-2-7B's 96 heads of 16 units: 6; 20 + 2 x 5 heads of 128: 480 units, the
// second block part-filled).
const std::vector<RopeKvCase> kRopeKvCases = {
    {"neox_d64", RopeMode::Neox, 64, 0, 0.f},
    {"normal_d64", RopeMode::Normal, 64, 0, 0.f},
    {"normal_d64_llamacpp_angles", RopeMode::Normal, 64, 0, 0.f /* set below */},
    {"neox_d40_rotary24", RopeMode::Neox, 40, 24, 0.f},
    {"normal_d6_rotary4", RopeMode::Normal, 6, 4, 0.f},  // element-wise kernels (d not a multiple of 4)
    {"normal_d128_llama7b_heads_llamacpp_angles", RopeMode::Normal, 128, 0, 0.f, 32, 32},
    {"neox_d128_ragged_blocks", RopeMode::Neox, 128, 0, 0.f, 20, 5},
};

using RopeKvParam = std::tuple<std::string, int, DType>;
class RopeKvCacheWriteConformance : public ::testing::TestWithParam<RopeKvParam> {};

TEST_P(RopeKvCacheWriteConformance, EqualsRopeThenKvCacheWrite) {
  const auto& [backend, case_index, cache_dtype] = GetParam();
  const RopeKvCase& c = kRopeKvCases[(size_t)case_index];
  RBEE_REQUIRE_DEVICE(backend, device);
  const int64_t n = 5, hq = c.hq, hkv = c.hkv, d = c.d, width = (hq + 2 * hkv) * d;
  const int rot = c.rotary_dim == 0 ? c.d : c.rotary_dim;
  RopeParams params;
  params.mode = c.mode;
  params.rotary_dim = c.rotary_dim;
  params.mscale = 1.0f;
  if (std::string(c.name).find("llamacpp") != std::string::npos) params.freq_ratio = std::pow(10000.f, -2.f / (float)rot);
  // q / k / v heads as views of stacked rows [n, (hq + 2 hkv) * d] (what the qkv projection gives).
  const Tensor qkv = make_tensor(random_values(n * width, DType::F32, 21, -2, 2), {n, width}, DType::F32, *device);
  auto heads = [&](int64_t first, int64_t count) {
    return qkv.as_strided({n, count, d}, {width, d, 1}, qkv.offset() + first * d);
  };
  const Tensor q = heads(0, hq), k = heads(hq, hkv), v = heads(hq + hkv, hkv);
  const Tensor positions = make_tensor({0, 7, 300, 4095, 31}, {n}, DType::I32, *device);
  std::vector<double> freq((size_t)(rot / 2));
  for (int i = 0; i < rot / 2; ++i) freq[(size_t)i] = round_to_dtype(std::pow(10000.0, -2.0 * i / rot), DType::F32);
  const Tensor inv_freq = make_tensor(freq, {rot / 2}, DType::F32, *device);
  const Tensor slots = make_tensor({9, 0, 31, 17, 4}, {n}, DType::I32, *device);
  const Shape cache_shape{4, 8, hkv, d};  // 32 slots
  auto cache = [&](double fill) {
    return make_tensor(std::vector<double>(cache_shape.numel(), fill), cache_shape, cache_dtype, *device);
  };
  const Tensor kc = cache(5.0), vc = cache(-5.0), kc_ref = cache(5.0), vc_ref = cache(-5.0);

  poison_allocations(*device, (size_t)(n * hq * d * 4));
  const Tensor q_rot = ops::rope_kv_cache_write(q, k, v, positions, inv_freq, params, slots, kc, vc);
  const Tensor q_ref = ops::rope(q, positions, inv_freq, params);
  ops::kv_cache_write(ops::rope(k, positions, inv_freq, params), v, slots, kc_ref, vc_ref);
  ASSERT_EQ(q_rot.shape(), (Shape{n, hq, d}));
  EXPECT_TRUE(all_close(to_doubles(q_rot), to_doubles(q_ref), {0, 0})) << "rope(q)";
  EXPECT_TRUE(all_close(to_doubles(kc), to_doubles(kc_ref), {0, 0})) << "k cache";
  EXPECT_TRUE(all_close(to_doubles(vc), to_doubles(vc_ref), {0, 0})) << "v cache";
}

INSTANTIATE_TEST_SUITE_P(Fused, RopeKvCacheWriteConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::Range(0, (int)kRopeKvCases.size()),
                                            ::testing::Values(DType::F32, DType::F16, DType::BF16)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + kRopeKvCases[(size_t)std::get<1>(info.param)].name +
                                  "_" + std::string(dtype_name(std::get<2>(info.param)));
                         });
RBEE_CONFORMANCE_SUITE(RopeKvCacheWrite, RopeKvCacheWriteConformance);

// Bad arguments name the op and the argument.
TEST(FusedOpArguments, ClearErrors) {
  Device& cpu = cpu_device();
  const Tensor x = Tensor::from_vector(std::vector<float>(64, 1.f), {2, 32}, cpu);
  const Tensor w = ops::quantize(Tensor::from_vector(std::vector<float>(3 * 32, 0.5f), {3, 32}, cpu), DType::Q8_0);
  const Tensor nw = Tensor::from_vector(std::vector<float>(32, 1.f), {32}, cpu);
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { (void)ops::rms_norm_qmatmul(x, nw.narrow(0, 0, 16), 1e-5f, w); }).find("norm_weight"),
            std::string::npos);
  EXPECT_NE(message([&] { (void)ops::add_rms_norm_qmatmul(x, nw, nw, 1e-5f, w); }).find("residual"), std::string::npos);
  EXPECT_NE(message([&] { (void)ops::swiglu_qmatmul(x, w); }).find("swiglu_qmatmul"), std::string::npos);
  EXPECT_NE(message([&] { (void)ops::swiglu_qmatmul(x.narrow(1, 0, 31), w); }).find("gate_up"), std::string::npos);
}

}  // namespace
}  // namespace rbee::test
