// Conformance: quantize, dequantize and qmatmul for every GGUF block type on every backend.
//
// (a) dequantize of random packed blocks equals gguf-py's dequantization bit for bit
//     (goldens: tools/goldens/make_quant_goldens.py -> tests/data/quant/dequant_<type>.bin);
// (b) legacy quantize (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) equals gguf-py's quantize byte for byte;
// (c) round-trip error bounds per type, on Gaussian data and on ggml's own synthetic test data;
// (d) qmatmul against double references built from dequantized weights (and activations): M from 1 to 520 around
//     the GPU's path thresholds and tile edges, N and K not multiples of its tiles, strided x with batch dims;
//     16-bit weights multiply x rounded to their type (checked exactly);
// (e) bad arguments raise InvalidArgument naming the op and the argument.
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include <fmt/format.h>

#include "common/expect_error.h"
#include "common/harness.h"
#include "common/source_dir.h"
#include "conformance/op_suites.h"
#include "conformance/qmatmul_reference.h"
#include "rbee/core/half.h"
#include "rbee/ops.h"

namespace rbee::test {
namespace {

const std::vector<DType> kBlockTypes = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                                        DType::Q8_0, DType::Q8_1, DType::Q2_K, DType::Q3_K,
                                        DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K};
const std::vector<DType> kLegacyQuantizeTypes = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0};

std::vector<unsigned char> read_file(const std::string& name) {
  const std::string path = test::source_dir() + "/tests/data/quant/" + name;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open golden file " + path);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}
uint32_t read_u32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
std::vector<float> read_floats(const unsigned char* p, size_t n) {
  std::vector<float> v(n);
  std::memcpy(v.data(), p, n * 4);
  return v;
}
std::vector<unsigned char> host_bytes(const Tensor& t) {
  std::vector<unsigned char> bytes((size_t)t.nbytes());
  t.copy_to_host(bytes.data(), bytes.size());
  return bytes;
}
std::vector<double> as_doubles(const std::vector<float>& v) { return {v.begin(), v.end()}; }

using TypeParam = std::tuple<std::string, DType>;
std::string type_param_name(const ::testing::TestParamInfo<TypeParam>& info) {
  return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param)));
}

// ------------------------------------------------------------------------------- (a) dequantize goldens
class DequantizeGolden : public ::testing::TestWithParam<TypeParam> {};

TEST_P(DequantizeGolden, MatchesGgufPyExactly) {
  const auto& [backend, type] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const auto file = read_file("dequant_" + std::string(dtype_name(type)) + ".bin");
  const int64_t blocks = read_u32(file.data());
  const int bs = dtype_block_size(type), ts = dtype_type_size(type);
  ASSERT_EQ(file.size(), 4 + (size_t)blocks * ts + (size_t)blocks * bs * 4);
  const unsigned char* packed = file.data() + 4;
  const auto want = as_doubles(read_floats(packed + blocks * ts, (size_t)(blocks * bs)));

  // As [rows, K] (K = 4 blocks): every row is dequantized from its own bytes.
  const int64_t k = 4 * bs, rows = blocks / 4;
  const Tensor q = Tensor::from_host(packed, (size_t)(blocks * ts), {rows, k}, type, *device);
  poison_allocations(*device, (size_t)(blocks * bs * 4));
  const Tensor out = ops::dequantize(q);
  ASSERT_EQ(out.shape(), (Shape{rows, k}));
  ASSERT_EQ(out.dtype(), DType::F32);
  EXPECT_TRUE(all_close(to_doubles(out), want, {0, 0}));

  // A view of every other row (row stride 2K) reads the right blocks.
  const Tensor odd = q.slice(0, 1, rows, 2);
  const auto got = to_doubles(ops::dequantize(odd));
  std::vector<double> want_odd;
  for (int64_t r = 1; r < rows; r += 2) want_odd.insert(want_odd.end(), want.begin() + r * k, want.begin() + (r + 1) * k);
  EXPECT_TRUE(all_close(got, want_odd, {0, 0}));
}

INSTANTIATE_TEST_SUITE_P(Quant, DequantizeGolden,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kBlockTypes)),
                         type_param_name);
RBEE_CONFORMANCE_SUITE(Dequantize, DequantizeGolden);

// --------------------------------------------------------------------------------- (b) quantize goldens
class QuantizeGolden : public ::testing::TestWithParam<TypeParam> {};

TEST_P(QuantizeGolden, MatchesGgufPyBytes) {
  const auto& [backend, type] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const auto file = read_file("quantize_" + std::string(dtype_name(type)) + ".bin");
  const int64_t n = read_u32(file.data());
  const int bs = dtype_block_size(type), ts = dtype_type_size(type);
  const int64_t blocks = n / bs;
  ASSERT_EQ(file.size(), 4 + (size_t)n * 4 + (size_t)blocks * ts);
  const auto x = read_floats(file.data() + 4, (size_t)n);
  const unsigned char* want = file.data() + 4 + n * 4;

  const Tensor xt = Tensor::from_vector(x, {2, n / 2}, *device);
  poison_allocations(*device, (size_t)(blocks * ts));
  const Tensor q = ops::quantize(xt, type);
  ASSERT_EQ(q.dtype(), type);
  ASSERT_EQ(q.shape(), (Shape{2, n / 2}));
  const auto got = host_bytes(q);
  ASSERT_EQ(got.size(), (size_t)(blocks * ts));
  int bad = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    if (std::memcmp(got.data() + b * ts, want + b * ts, (size_t)ts) != 0 && bad++ < 3) {
      std::string g, w;
      for (int64_t i = 0; i < ts; ++i) {
        g += fmt::format("{:02x}", got[(size_t)(b * ts + i)]);
        w += fmt::format("{:02x}", want[b * ts + i]);
      }
      ADD_FAILURE() << "block " << b << " differs from gguf-py\n  got  " << g << "\n  want " << w;
    }
  }
  EXPECT_EQ(bad, 0) << bad << " of " << blocks << " blocks differ";
}

INSTANTIATE_TEST_SUITE_P(Quant, QuantizeGolden,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kLegacyQuantizeTypes)),
                         type_param_name);
RBEE_CONFORMANCE_SUITE(Quantize, QuantizeGolden);

// ------------------------------------------------------------------------------------ (c) round trips
// Relative RMS error sqrt(mean((deq(q(x)) - x)^2) / mean(x^2)) on N(0, 1) data, rows of 1024 each scaled by a
// different power of ten. Bounds sit ~15% above what our quantizers give (measured values beside each bound);
// the uniform-step estimate step / sqrt(12) / sigma agrees, e.g. Q8_0: step = max|x_32| / 127 ~ 2.1 sigma / 127
// gives 0.0047; Q8_K (max over 256, ~2.9 sigma) 0.0066; Q4_0: step ~ 2.1 sigma / 8 gives 0.075 before clipping.
double rmse_bound(DType type) {
  switch (type) {
    case DType::Q4_0: return 0.104;  // measured max over rows 0.090
    case DType::Q4_1: return 0.092;  // 0.080
    case DType::Q5_0: return 0.052;  // 0.045
    case DType::Q5_1: return 0.045;  // 0.039
    case DType::Q8_0:
    case DType::Q8_1: return 0.0065;  // 0.0056
    case DType::Q2_K: return 0.35;   // 0.305
    case DType::Q3_K: return 0.18;   // 0.156
    case DType::Q4_K: return 0.085;  // 0.073
    case DType::Q5_K: return 0.045;  // 0.039
    case DType::Q6_K: return 0.022;  // 0.0185
    case DType::Q8_K: return 0.0092;  // 0.0080
    default: return 0;
  }
}

class RoundTrip : public ::testing::TestWithParam<TypeParam> {};

TEST_P(RoundTrip, RelativeRmseWithinBound) {
  const auto& [backend, type] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const int64_t rows = 8, k = 1024;
  std::mt19937_64 rng(42 + (int)type);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x((size_t)(rows * k));
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = std::pow(10.f, (float)(r % 5) - 2.f);
    for (int64_t i = 0; i < k; ++i) x[(size_t)(r * k + i)] = normal(rng) * scale;
  }
  const Tensor xt = Tensor::from_vector(x, {rows, k}, *device);
  const auto back = to_doubles(ops::dequantize(ops::quantize(xt, type)));
  for (int64_t r = 0; r < rows; ++r) {
    double err2 = 0, ref2 = 0;
    for (int64_t i = r * k; i < (r + 1) * k; ++i) {
      err2 += (back[i] - x[i]) * (back[i] - x[i]);
      ref2 += (double)x[i] * x[i];
    }
    const double rel = std::sqrt(err2 / ref2);
    EXPECT_LE(rel, rmse_bound(type)) << "row " << r << ": x[0..3] " << x[(size_t)(r * k)] << " "
                                     << x[(size_t)(r * k + 1)] << " " << x[(size_t)(r * k + 2)] << " back "
                                     << back[(size_t)(r * k)] << " " << back[(size_t)(r * k + 1)] << " "
                                     << back[(size_t)(r * k + 2)];
    EXPECT_GT(rel, 0.0) << "row " << r << ": a lossy format reproduced Gaussian data exactly";
  }
}

// ggml's test-quantize-fns data (0.1 + 2 cos(i + offset), 4096 values) and its error measure
// sqrt(sum err^2) / n, against ggml's thresholds for the reference quantizers: 0.0075 (2-bit), 0.004 (3-bit),
// 0.002 (every other type).
TEST_P(RoundTrip, WithinGgmlThresholdsOnGgmlData) {
  const auto& [backend, type] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const int64_t n = 32 * 128;
  std::vector<float> x((size_t)n);
  for (int64_t i = 0; i < n; ++i) x[i] = 0.1f + 2.f * std::cos((float)i + 0.0f);
  const auto back = to_doubles(ops::dequantize(ops::quantize(Tensor::from_vector(x, {n}, *device), type)));
  double err2 = 0;
  for (int64_t i = 0; i < n; ++i) err2 += (back[i] - x[i]) * (back[i] - x[i]);
  const double total = std::sqrt(err2) / (double)n;
  const double threshold = type == DType::Q2_K ? 0.0075 : type == DType::Q3_K ? 0.0040 : 0.002;
  EXPECT_LT(total, threshold);
}

INSTANTIATE_TEST_SUITE_P(Quant, RoundTrip,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kBlockTypes)),
                         type_param_name);

// The activation formats carry sums: Q8_1's s = d * sum(qs) (rounded to f16 with d before d's own rounding),
// Q8_K's bsums[i] = sum of qs[16i .. 16i + 15] exactly, with every quant in [-127, 127] and 127 reached.
TEST(QuantActivationFormats, CarryTheirSums) {
  Device& device = cpu_device();
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<float> x(1024);
  for (auto& v : x) v = normal(rng);
  const Tensor xt = Tensor::from_vector(x, {1024}, device);
  const auto q81 = host_bytes(ops::quantize(xt, DType::Q8_1));
  for (int b = 0; b < 1024 / 32; ++b) {
    const unsigned char* blk = q81.data() + b * 36;
    uint16_t d, s;
    std::memcpy(&d, blk, 2);
    std::memcpy(&s, blk + 2, 2);
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += (int8_t)blk[4 + j];
    const double want = (double)sum * f16_bits_to_f32(d);
    EXPECT_NEAR(f16_bits_to_f32(s), want, std::fabs(want) * 2e-3 + 1e-6) << "block " << b;
  }
  const auto q8k = host_bytes(ops::quantize(xt, DType::Q8_K));
  for (int b = 0; b < 1024 / 256; ++b) {
    const unsigned char* blk = q8k.data() + b * 292;
    int max_abs = 0;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) {
        const int q = (int8_t)blk[4 + 16 * g + j];
        sum += q;
        max_abs = std::max(max_abs, std::abs(q));
      }
      int16_t bsum;
      std::memcpy(&bsum, blk + 260 + 2 * g, 2);
      EXPECT_EQ(bsum, sum) << "block " << b << " group " << g;
    }
    EXPECT_EQ(max_abs, 127) << "block " << b;
  }
}

// ------------------------------------------------------------------------------------------ (d) qmatmul
// x [..., K] f32 times w [N, K]^T. Two references in double:
//  - tight: sum_k w^[n, k] * x^[m, k], with w^ = dequantize(w) and x^ the activations the kernel really
//    multiplies: 8-bit blocks for Q4_0/Q5_0/Q8_0/Q8_1 and Q4_1/Q5_1 weights by the activation rule
//    (qmatmul_reference.h, naive_activation_q8), dequantize(quantize(x, Q8_K)) for K-quants, x rounded to
//    f16 / bf16 for f16 / bf16 weights (naive_round16), x itself for f32. The kernel's integer sums and its
//    16-bit products are exact, so only f32 scaling and accumulation remain: 2e-5 * sum |w^ x^| (K = 512 f32
//    sums in any order, tensor-core accumulation included). For Q4_1/Q5_1 the activation block sum s enters as f16, adding up to
//    2^-10 * |m_w * sum_block x^| per block.
//  - exact x: sum_k w^[n, k] * x[m, k]; activation quantization moves each x by at most half a step
//    (d = max|x_block| / 127) plus d's f16 rounding: |x^ - x| <= 0.57 * max|x_block| / 127; rounding to a 16-bit
//    type by at most half an ulp: 2^-p |x| + 2^(emin - p) (p = 11 for f16, 8 for bf16).
struct QMatmulCase {
  const char* name;
  Shape x_shape;  // [..., K]; K is rounded up to the weight type's block size (256 for K-quants)
  Layout layout;
  int64_t n = 37;
};
const int64_t kDefaultK = 512;
// GPU paths for block types (quant_qmatmul.cu): the matvec below 16 rows; MMQ (quant_mmq.cuh) from 16 rows with
// tiles of 16 / 32 / 64 / 128 rows (M <= 16 / 32 / 64 / more) x 64 weight rows, K in steps of 128, split over K
// when the tiles are few. Float weights: gemv up to 8 rows, the vendor BLAS above.
const std::vector<QMatmulCase> kQMatmulCases = {
    {"m1", {1, kDefaultK}, Layout::Contiguous},
    {"m7", {7, kDefaultK}, Layout::Contiguous},
    {"m15", {15, kDefaultK}, Layout::Contiguous},  // GPU: the largest matvec
    // GPU matvec over long rows: 136 items of 32 per row, so a warp's lanes loop (64 items a pass with 32 lanes at
    // M <= 4) and the last pass is partial; odd N leaves a two-row warp with one clamped row.
    {"m1_n67_k4352", {1, 4352}, Layout::Contiguous, 67},
    {"m3_n64_k4352", {3, 4352}, Layout::Contiguous, 64},
    {"m16", {16, kDefaultK}, Layout::Contiguous},  // GPU: the smallest MMQ (16-row tile, split K)
    {"m20", {20, kDefaultK}, Layout::Contiguous},
    {"m17_n100_k256", {17, 256}, Layout::Contiguous, 100},  // 32-row tile; N not a multiple of 64
    {"m33_n129_k544", {33, 544}, Layout::Contiguous, 129},  // 64-row tile; K not a multiple of 128 (K-quants: 768)
    {"m64", {64, kDefaultK}, Layout::Contiguous},
    {"m65_n64_k1024", {65, 1024}, Layout::Contiguous, 64},  // 128-row tile, one weight tile
    {"m144", {144, kDefaultK}, Layout::Contiguous},
    {"m130_n200_k4096", {130, 4096}, Layout::Contiguous, 200},
    {"m520_n70_k2048", {520, 2048}, Layout::Contiguous, 70},  // prompt-sized: 5 row tiles
    // Split K over many steps with rows and columns past M / N in the last tiles (the split-K sum reads the last
    // row's / column's partial for them); with RBEE_MMQ_PATH=2 the 64 x 128 and 128 x 128 tiles.
    {"m40_n200_k2048", {40, 2048}, Layout::Contiguous, 200},
    {"m100_n300_k4096", {100, 4096}, Layout::Contiguous, 300},
    {"batch2x3_strided", {2, 3, kDefaultK}, Layout::Strided},
    {"batch5_transposed", {5, 1, kDefaultK}, Layout::Transposed},
    {"vector", {kDefaultK}, Layout::Contiguous},
};

// naive_activation_q8, naive_round16, activation_type, make_weights, expect_qmatmul: qmatmul_reference.h.

using QMatmulParam = std::tuple<std::string, DType, int>;
class QMatmulConformance : public ::testing::TestWithParam<QMatmulParam> {};

TEST_P(QMatmulConformance, MatchesDoubleReference) {
  const auto& [backend, wtype, case_index] = GetParam();
  const QMatmulCase& c = kQMatmulCases[(size_t)case_index];
  RBEE_REQUIRE_DEVICE(backend, device);
  Shape x_shape = c.x_shape;
  const int64_t bs = is_quantized(wtype) ? dtype_block_size(wtype) : 1;
  const int64_t kK = (x_shape[x_shape.rank() - 1] + bs - 1) / bs * bs, kN = c.n;
  x_shape[x_shape.rank() - 1] = kK;
  const int64_t m = x_shape.numel() / kK;

  // Weights: N(0, 1) rows with varied scales, quantized (or rounded) to wtype; w^ = what w holds.
  std::mt19937_64 rng(1234 + (int)wtype);
  const Weights w = make_weights(*device, wtype, kN, kK, rng);

  // Activations: mixed magnitudes, with an outlier per row as real hidden states have.
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<double> xv((size_t)(m * kK));
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t k = 0; k < kK; ++k) xv[(size_t)(r * kK + k)] = (double)normal(rng) * (1.0 + (double)(r % 4));
    xv[(size_t)(r * kK + (r * 37) % kK)] = 12.0;
  }
  const Tensor x = make_tensor(xv, x_shape, DType::F32, *device, c.layout);

  poison_allocations(*device, (size_t)(m * kN * 4));
  const Tensor out = ops::qmatmul(x, w.w);
  Shape want_shape = x_shape;
  want_shape[want_shape.rank() - 1] = kN;
  ASSERT_EQ(out.shape(), want_shape);
  ASSERT_EQ(out.dtype(), DType::F32);
  // Q8_K activations through the device's own quantizer; the other references are computed here.
  expect_qmatmul(to_doubles(out), w, wtype, xv, m, kN, kK, {}, *device);
}

std::vector<DType> qmatmul_weight_types() {
  std::vector<DType> t = kBlockTypes;
  t.push_back(DType::F32);
  t.push_back(DType::F16);
  t.push_back(DType::BF16);
  return t;
}

INSTANTIATE_TEST_SUITE_P(Quant, QMatmulConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(qmatmul_weight_types()),
                                            ::testing::Range(0, (int)kQMatmulCases.size())),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param))) +
                                  "_" + kQMatmulCases[(size_t)std::get<2>(info.param)].name;
                         });
RBEE_CONFORMANCE_SUITE(QMatmul, QMatmulConformance);

// Float weights whose rows are not a whole number of 16-byte vectors (K = 100: the element-wise GPU kernels),
// with M below and above the GPU's BLAS threshold. Reference: sum_k w[n, k] * x'[m, k] in double, x' = x for f32
// weights and x rounded to the weight's type for f16 / bf16 (naive_round16).
using FloatOddKParam = std::tuple<std::string, DType, int>;
class QMatmulFloatOddK : public ::testing::TestWithParam<FloatOddKParam> {};

TEST_P(QMatmulFloatOddK, MatchesDoubleReference) {
  const auto& [backend, wtype, m] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const int64_t k = 100, n = 9;
  const auto wv = random_values(n * k, wtype, 77, -1, 1);
  const auto xv = random_values(m * k, DType::F32, 78, -2, 2);
  const auto xr = wtype == DType::F32 ? xv : naive_round16(xv, wtype);
  const Tensor w = make_tensor(wv, {n, k}, wtype, *device);
  const Tensor x = make_tensor(xv, {m, k}, DType::F32, *device);
  poison_allocations(*device, (size_t)(m * n * 4));
  const auto got = to_doubles(ops::qmatmul(x, w));
  int64_t bad = 0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0, mag = 0;
      for (int64_t i = 0; i < k; ++i) {
        want += wv[j * k + i] * xr[r * k + i];
        mag += std::fabs(wv[j * k + i] * xr[r * k + i]);
      }
      if (!(std::fabs(got[r * n + j] - want) <= 2e-5 * mag + 1e-6) && bad++ < 3) {
        ADD_FAILURE() << "[" << r << ", " << j << "] got " << got[r * n + j] << " want " << want;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(Quant, QMatmulFloatOddK,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::Values(DType::F32, DType::F16, DType::BF16),
                                            ::testing::Values(3, 70)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param))) +
                                  "_m" + std::to_string(std::get<2>(info.param));
                         });

// 16-bit weights multiply x rounded to their type, nearest even, on every path (GPU: the gemv kernels for
// M <= 8, the one-GEMM BLAS path above). Every x sits a quarter, a half (a tie) or three quarters of an ulp
// above a point of the 16-bit grid in [1, 2) (negated in odd rows), weights are multiples of 1/8: each product
// of round16(x) and w, and every partial sum, is exact in f32, so the result must equal the reference exactly,
// while a kernel that multiplied x itself, truncated, or broke ties away from zero would be off by >= 2^-13.
using HalfRoundParam = std::tuple<std::string, DType, int, int>;
class QMatmulHalfRoundsActivations : public ::testing::TestWithParam<HalfRoundParam> {};

TEST_P(QMatmulHalfRoundsActivations, ExactOnTheRoundedActivations) {
  const auto& [backend, wtype, m, k] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const int64_t n = 5;
  const HalfFormat f = half_format(wtype);
  const double ulp = std::ldexp(1.0, 1 - f.p);  // spacing of the grid in [1, 2)
  std::mt19937_64 rng(99 + (int)wtype);
  std::uniform_int_distribution<int> grid(0, (1 << (f.p - 1)) - 1), quarter(1, 3);
  std::vector<double> xv((size_t)(m * k)), wv((size_t)(n * k));
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < k; ++i) {
      const double g = 1.0 + grid(rng) * ulp;
      xv[(size_t)(r * k + i)] = (r % 2 ? -1.0 : 1.0) * (g + quarter(rng) * 0.25 * ulp);
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < k; ++i) wv[(size_t)(j * k + i)] = 0.125 * (double)(1 + (j + i) % 4);
  }
  const Tensor x = make_tensor(xv, {(int64_t)m, (int64_t)k}, DType::F32, *device);
  const Tensor w = make_tensor(wv, {n, (int64_t)k}, wtype, *device);
  poison_allocations(*device, (size_t)(m * n * 4));
  const auto got = to_doubles(ops::qmatmul(x, w));
  int64_t bad = 0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t i = 0; i < k; ++i) want += wv[j * k + i] * naive_round16(xv[r * k + i], f);
      if (got[r * n + j] != want && bad++ < 3) {
        ADD_FAILURE() << "[" << r << ", " << j << "] got " << got[r * n + j] << " want " << want;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(Quant, QMatmulHalfRoundsActivations,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::Values(DType::F16, DType::BF16), ::testing::Values(1, 3, 20, 70),
                                            ::testing::Values(100, 256)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param))) +
                                  "_m" + std::to_string(std::get<2>(info.param)) + "_k" +
                                  std::to_string(std::get<3>(info.param));
                         });
RBEE_CONFORMANCE_SUITE(QMatmul, QMatmulHalfRoundsActivations);

// ---------------------------------------------------------------------------------------- (e) bad input

class QuantArguments : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantArguments, BadArgumentsAreInvalidArgument) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  const Tensor x100 = ops::ones({3, 100}, DType::F32, *device);
  const Tensor x128 = ops::ones({2, 128}, DType::F32, *device);
  const Tensor x64 = ops::ones({2, 64}, DType::F32, *device);
  // K not a multiple of the block size.
  expect_invalid([&] { ops::quantize(x100, DType::Q4_0); }, "multiple of the q4_0 block size 32");
  expect_invalid([&] { ops::quantize(x128, DType::Q4_K); }, "multiple of the q4_k block size 256");
  // Wrong dtypes.
  expect_invalid([&] { ops::quantize(ops::ones({2, 64}, DType::F16, *device), DType::Q8_0); }, "x must be f32");
  expect_invalid([&] { ops::quantize(x64, DType::F16); }, "not a block type");
  expect_invalid([&] { ops::dequantize(x64); }, "q must have a block dtype");
  const Tensor w = ops::quantize(x64, DType::Q8_0);  // [2, 64]
  expect_invalid([&] { ops::qmatmul(ops::ones({1, 64}, DType::F16, *device), w); }, "x must be f32");
  expect_invalid([&] { ops::qmatmul(x64, ops::ones({2, 64}, DType::I32, *device)); }, "w must be a block dtype");
  // Shapes.
  expect_invalid([&] { ops::qmatmul(ops::ones({1, 96}, DType::F32, *device), w); }, "w expects K = 64");
  expect_invalid([&] { ops::qmatmul(x64, ops::ones({1, 2, 64}, DType::F32, *device)); }, "w must be [N, K]");
  expect_invalid([&] { ops::qmatmul(Tensor(), w); }, "'x' is an undefined tensor");
}

// Empty products: K = 0 gives zeros, M = 0 or N = 0 gives an empty result of the right shape.
TEST_P(QuantArguments, EmptyShapes) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  poison_allocations(*device, 3 * 4 * 4);
  const Tensor zero_k = ops::qmatmul(ops::ones({3, 0}, DType::F32, *device), ops::ones({4, 0}, DType::F16, *device));
  ASSERT_EQ(zero_k.shape(), (Shape{3, 4}));
  EXPECT_TRUE(all_close(to_doubles(zero_k), std::vector<double>(12, 0.0), {0, 0}));
  const Tensor w = ops::quantize(ops::ones({5, 64}, DType::F32, *device), DType::Q8_0);
  EXPECT_EQ(ops::qmatmul(ops::ones({0, 64}, DType::F32, *device), w).shape(), (Shape{0, 5}));
  EXPECT_EQ(ops::dequantize(ops::quantize(ops::ones({0, 64}, DType::F32, *device), DType::Q4_0)).shape(),
            (Shape{0, 64}));
}

INSTANTIATE_TEST_SUITE_P(Quant, QuantArguments, ::testing::ValuesIn(conformance_backends()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace rbee::test
