// Conformance: conv2d_fused (a convolution with bias, residual and silu in its epilogue) on every backend, against
// naive double-precision loops written here. The cases cover the GPU paths: the vendor convolution library (cuDNN:
// every F16 / BF16 case of groups 1 without SiLU, dnn_* cases for its per-image calls and zero bias; RBEE_CONV_CUDNN=0
// turns it off for the other paths), the pipelined implicit GEMM (sd_* cases;
// all F16 / BF16 cases with Cin % 8 == 0 under RBEE_CONV_IMPLICIT=1), the implicit GEMM on matrix tiles
// (F16 / BF16, groups 1, 1x1 or 3x3, Cin * KH * KW % 8 == 0; partial tiles in every direction, split-K on small
// maps with deep K; the im2col + Blas path's split-K of deep K on small maps, its columns kernel on small maps:
// small_* cases) and the im2col fallback (F32, F64, groups, Cin 4, 5x5 kernels).
#include <cmath>
#include <string>

#include "common/harness.h"
#include "conformance/op_suites.h"
#include "rbee/core/error.h"
#include "rbee/ops.h"

namespace rbee::test {
namespace {

enum class BiasKind { None, PerChannel, PerImage };

struct FusedCase {
  const char* name;
  int64_t n, cin, h, w, cout, k;
  int stride, pad, groups;
  BiasKind bias;
  bool residual, silu;
};

void PrintTo(const FusedCase& c, std::ostream* os) { *os << c.name; }

const std::vector<FusedCase> kCases = {
    {"k3_bias", 1, 8, 9, 11, 6, 3, 1, 1, 1, BiasKind::PerChannel, false, false},
    {"k3_bias_residual", 2, 16, 12, 12, 130, 3, 1, 1, 1, BiasKind::PerChannel, true, false},
    {"k3_image_bias_silu", 2, 24, 10, 7, 20, 3, 1, 1, 1, BiasKind::PerImage, false, true},
    {"k3_stride2", 2, 16, 13, 10, 24, 3, 2, 1, 1, BiasKind::PerChannel, false, false},
    {"k3_split_k", 2, 64, 6, 5, 40, 3, 1, 1, 1, BiasKind::PerImage, true, false},
    // Deep K on a 4x4 map: the 16-bit im2col + Blas path splits K (8 slices on 132 SMs, 2 on the emulator's 4).
    {"k3_split_k_deep", 2, 256, 4, 4, 64, 3, 1, 1, 1, BiasKind::PerImage, true, true},
    {"k3_no_epilogue", 1, 8, 17, 19, 9, 3, 1, 1, 1, BiasKind::None, false, false},
    {"k1_residual", 2, 32, 9, 8, 48, 1, 1, 0, 1, BiasKind::PerChannel, true, false},
    {"k1_silu_only", 1, 16, 5, 5, 17, 1, 1, 0, 1, BiasKind::None, false, true},
    // SD-like sizes at reduced channel counts for the pipelined implicit GEMM (conv_implicit.cu), which takes them
    // (and the small cases above with Cin % 8 == 0) under RBEE_CONV_IMPLICIT=1: K steps spanning two or four taps
    // (Cin 16, 8) and a partial last step, 64-row tiles (Cout 192), stride 2 with odd output sizes, a pointwise
    // case read straight from NCHW. sd_k3_512x512 is a shape it takes by default (<= 128 channels, >= 2^18
    // positions: the VAE decoder's last level).
    {"sd_k3_64x68", 2, 16, 64, 68, 192, 3, 1, 1, 1, BiasKind::PerImage, true, true},
    {"sd_k3_stride2", 2, 8, 130, 132, 136, 3, 2, 1, 1, BiasKind::PerChannel, false, false},
    {"sd_k1_64x66", 2, 40, 64, 66, 200, 1, 1, 0, 1, BiasKind::PerChannel, true, false},
    {"sd_k3_512x512", 1, 8, 512, 512, 8, 3, 1, 1, 1, BiasKind::PerChannel, true, true},
    // The vendor convolution library's path (conv_dnn.cu: cuDNN takes F16 / BF16, groups 1, no SiLU): a [N, Cout]
    // bias as one call per image (3 images) with Cin 4, a residual without bias (the library's zero bias), 1x1
    // stride 2. Cases above without SiLU cover a [Cout] bias, residuals, 3x3 stride 2 and no epilogue there.
    {"dnn_k3_cin4_image_bias", 3, 4, 9, 10, 12, 3, 1, 1, 1, BiasKind::PerImage, true, false},
    {"dnn_k1_residual_only", 2, 24, 6, 7, 40, 1, 1, 0, 1, BiasKind::None, true, false},
    {"dnn_k1_stride2", 2, 16, 11, 9, 24, 1, 2, 0, 1, BiasKind::PerChannel, false, false},
    // SD's small maps on the im2col + Blas path (F16 / BF16 cases that cuDNN and the implicit GEMM leave): 8x8 and
    // 16x16 maps whose columns rows hold 64 and 256 positions (several rows per block of the columns kernel), with
    // a residual, a [N, Cout] bias, deep K (split-K slices on 132 SMs), and 1x1 kernels read from x in place (a
    // 32x32 map, and 3 images with a per-image bias).
    {"small_k3_8x8_residual", 2, 128, 8, 8, 96, 3, 1, 1, 1, BiasKind::PerChannel, true, false},
    {"small_k3_16x16_image_bias", 2, 64, 16, 16, 80, 3, 1, 1, 1, BiasKind::PerImage, true, false},
    {"small_k3_8x8_image_bias_deep", 2, 320, 8, 8, 64, 3, 1, 1, 1, BiasKind::PerImage, false, false},
    {"small_k1_32x32_residual", 2, 64, 32, 32, 72, 1, 1, 0, 1, BiasKind::PerChannel, true, false},
    {"small_k1_image_bias", 3, 48, 8, 12, 40, 1, 1, 0, 1, BiasKind::PerImage, false, false},
    {"fallback_cin4", 2, 4, 8, 9, 10, 3, 1, 1, 1, BiasKind::PerChannel, true, true},
    {"fallback_groups2", 1, 16, 7, 6, 8, 3, 1, 1, 2, BiasKind::PerImage, true, false},
    {"fallback_k5", 1, 8, 9, 9, 6, 5, 1, 2, 1, BiasKind::PerChannel, false, true},
};

const std::vector<DType> kDTypes = {DType::F32, DType::F16, DType::BF16, DType::F64};

using FusedParam = std::tuple<std::string, FusedCase, DType>;
class Conv2dFusedConformance : public ::testing::TestWithParam<FusedParam> {};

TEST_P(Conv2dFusedConformance, MatchesDoubleReference) {
  const auto& [backend, c, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const int64_t ho = (c.h + 2 * c.pad - c.k) / c.stride + 1, wo = (c.w + 2 * c.pad - c.k) / c.stride + 1;
  const int64_t cin_g = c.cin / c.groups, cout_g = c.cout / c.groups;
  const Shape x_shape{c.n, c.cin, c.h, c.w}, w_shape{c.cout, cin_g, c.k, c.k}, out_shape{c.n, c.cout, ho, wo};
  const Shape b_shape = c.bias == BiasKind::PerImage ? Shape{c.n, c.cout} : Shape{c.cout};
  const auto xv = random_values(x_shape.numel(), dtype, 11);
  const auto wv = random_values(w_shape.numel(), dtype, 12, -0.5, 0.5);
  const auto bv = random_values(b_shape.numel(), dtype, 13);
  const auto rv = random_values(out_shape.numel(), dtype, 14);
  const Tensor x = make_tensor(xv, x_shape, dtype, *device);
  const Tensor w = make_tensor(wv, w_shape, dtype, *device);
  const Tensor b = c.bias == BiasKind::None ? Tensor() : make_tensor(bv, b_shape, dtype, *device);
  const Tensor r = c.residual ? make_tensor(rv, out_shape, dtype, *device) : Tensor();
  Conv2dParams p;
  p.stride_h = p.stride_w = c.stride;
  p.pad_h = p.pad_w = c.pad;
  p.groups = c.groups;
  poison_allocations(*device, (size_t)(out_shape.numel() * 4 * dtype_type_size(dtype)));
  const Tensor out = ops::conv2d_fused(x, w, b, r, p, c.silu);
  ASSERT_EQ(out.shape(), out_shape);
  ASSERT_EQ(out.dtype(), dtype);

  std::vector<double> want((size_t)out_shape.numel());
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t co = 0; co < c.cout; ++co)
      for (int64_t oy = 0; oy < ho; ++oy)
        for (int64_t ox = 0; ox < wo; ++ox) {
          const int64_t grp = co / cout_g;
          double s = 0;
          for (int64_t ci = 0; ci < cin_g; ++ci)
            for (int64_t ky = 0; ky < c.k; ++ky)
              for (int64_t kx = 0; kx < c.k; ++kx) {
                const int64_t iy = oy * c.stride - c.pad + ky, ix = ox * c.stride - c.pad + kx;
                if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
                s += xv[(size_t)(((n * c.cin + grp * cin_g + ci) * c.h + iy) * c.w + ix)] *
                     wv[(size_t)(((co * cin_g + ci) * c.k + ky) * c.k + kx)];
              }
          const size_t o = (size_t)(((n * c.cout + co) * ho + oy) * wo + ox);
          if (c.bias == BiasKind::PerChannel) s += bv[(size_t)co];
          if (c.bias == BiasKind::PerImage) s += bv[(size_t)(n * c.cout + co)];
          if (c.residual) s += rv[o];
          if (c.silu) s = s / (1.0 + std::exp(-s));
          want[o] = s;
        }
  Tolerance tol = default_tolerance(dtype);
  if (dtype == DType::F32 || dtype == DType::F64) tol.atol *= 2.0 * std::sqrt((double)(cin_g * c.k * c.k));
  EXPECT_TRUE(all_close(to_doubles(out), want, tol));
}

std::string fused_name(const ::testing::TestParamInfo<FusedParam>& info) {
  return std::get<0>(info.param) + "_" + std::get<1>(info.param).name + "_" +
         std::string(dtype_name(std::get<2>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(Ops, Conv2dFusedConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()), ::testing::ValuesIn(kCases),
                                            ::testing::ValuesIn(kDTypes)),
                         fused_name);
RBEE_CONFORMANCE_SUITE(Conv2dFused, Conv2dFusedConformance);

// Bad arguments are refused with the op and the argument named.
class Conv2dFusedErrors : public ::testing::TestWithParam<std::string> {};

TEST_P(Conv2dFusedErrors, RefusesBadBiasAndResidual) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  const Tensor x = make_tensor(random_values(2 * 8 * 5 * 5, DType::F32, 1), {2, 8, 5, 5}, DType::F32, *device);
  const Tensor w = make_tensor(random_values(4 * 8 * 9, DType::F32, 2), {4, 8, 3, 3}, DType::F32, *device);
  Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  const Tensor bad_bias = make_tensor(random_values(3, DType::F32, 3), {3}, DType::F32, *device);
  const Tensor bad_res = make_tensor(random_values(2 * 4 * 5 * 4, DType::F32, 4), {2, 4, 5, 4}, DType::F32, *device);
  const Tensor f16_bias = make_tensor(random_values(4, DType::F16, 5), {4}, DType::F16, *device);
  auto expect_error = [&](const Tensor& b, const Tensor& r, const std::string& needle) {
    try {
      (void)ops::conv2d_fused(x, w, b, r, p, false);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(bad_bias, Tensor(), "conv2d_fused: bias must be");
  expect_error(Tensor(), bad_res, "conv2d_fused: residual must have");
  expect_error(f16_bias, Tensor(), "conv2d_fused: bias is f16");
}

INSTANTIATE_TEST_SUITE_P(Ops, Conv2dFusedErrors, ::testing::ValuesIn(conformance_backends()));

}  // namespace
}  // namespace rbee::test
