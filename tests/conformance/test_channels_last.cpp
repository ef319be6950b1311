// Conformance: the channels-last (NHWC) ops conv2d_fused_nhwc and group_norm_nhwc on every backend, against naive
// double-precision loops written here over NHWC indices (not through the NCHW ops). The conv cases cover the GPU
// paths (conv_nhwc.cu): the vendor library's NHWC kernels (F16 / BF16 k x k: bias, [N, Cout] bias, residual, SiLU,
// stride 2, Cin 4 and odd channel counts it may refuse), 1x1 kernels as linear layers (bias, [N, Cout] bias per
// image, residual), and the permuted fallback (1x1 with SiLU, 1x1 with padding, F64, odd sizes). The group-norm
// cases cover strips of 1, 2, 3, 4, 8 and 10 channels (the kernel's vector widths), rank-3 and rank-4 inputs, a
// [N, C] shift added before the statistics, SD 1.5's UNet shapes and SDXL's 128x128x320 map in 16 bits, groups split
// over many blocks, vectors that straddle two groups, wide rows, the one-block fallback and 1M-value groups.
#include <algorithm>
#include <cmath>
#include <string>

#include "common/harness.h"
#include "conformance/op_suites.h"
#include "rbee/core/error.h"
#include "rbee/ops.h"

namespace rbee::test {
namespace {

enum class BiasKind { None, PerChannel, PerImage };

struct NhwcConvCase {
  const char* name;
  int64_t n, cin, h, w, cout, k;
  int stride, pad;
  BiasKind bias;
  bool residual, silu;
};

void PrintTo(const NhwcConvCase& c, std::ostream* os) { *os << c.name; }

const std::vector<NhwcConvCase> kConvCases = {
    {"k3_bias", 1, 8, 9, 11, 16, 3, 1, 1, BiasKind::PerChannel, false, false},
    {"k3_image_bias_residual", 2, 16, 12, 10, 24, 3, 1, 1, BiasKind::PerImage, true, false},
    {"k3_image_bias_silu", 2, 24, 10, 7, 32, 3, 1, 1, BiasKind::PerImage, false, true},
    {"k3_residual_only", 2, 32, 8, 8, 16, 3, 1, 1, BiasKind::None, true, false},
    {"k3_stride2", 2, 16, 13, 10, 24, 3, 2, 1, BiasKind::PerChannel, false, false},
    {"k3_cin4", 2, 4, 9, 10, 8, 3, 1, 1, BiasKind::PerChannel, false, false},
    {"k3_cout4_odd", 2, 40, 7, 9, 4, 3, 1, 1, BiasKind::PerChannel, false, false},
    {"k3_odd_channels", 2, 5, 6, 7, 7, 3, 1, 1, BiasKind::PerImage, true, true},
    {"k3_sd_like", 2, 64, 32, 32, 96, 3, 1, 1, BiasKind::PerImage, true, false},
    {"k1_bias_residual", 2, 32, 9, 8, 48, 1, 1, 0, BiasKind::PerChannel, true, false},
    {"k1_image_bias", 3, 48, 8, 12, 40, 1, 1, 0, BiasKind::PerImage, true, false},
    {"k1_no_bias", 1, 24, 5, 6, 16, 1, 1, 0, BiasKind::None, false, false},
    {"k1_silu", 1, 16, 5, 5, 17, 1, 1, 0, BiasKind::PerChannel, false, true},
    {"k1_pad1", 2, 8, 4, 5, 8, 1, 1, 1, BiasKind::PerChannel, true, false},
    {"k1_stride2", 2, 16, 11, 9, 24, 1, 2, 0, BiasKind::PerChannel, false, false},
    {"k5", 1, 8, 9, 9, 6, 5, 1, 2, BiasKind::PerChannel, false, true},
};

const std::vector<DType> kDTypes = {DType::F32, DType::F16, DType::BF16, DType::F64};

using ConvParam = std::tuple<std::string, NhwcConvCase, DType>;
class Conv2dFusedNhwcConformance : public ::testing::TestWithParam<ConvParam> {};

TEST_P(Conv2dFusedNhwcConformance, MatchesDoubleReference) {
  const auto& [backend, c, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const int64_t ho = (c.h + 2 * c.pad - c.k) / c.stride + 1, wo = (c.w + 2 * c.pad - c.k) / c.stride + 1;
  const Shape x_shape{c.n, c.h, c.w, c.cin}, w_shape{c.cout, c.k, c.k, c.cin}, out_shape{c.n, ho, wo, c.cout};
  const Shape b_shape = c.bias == BiasKind::PerImage ? Shape{c.n, c.cout} : Shape{c.cout};
  const auto xv = random_values(x_shape.numel(), dtype, 21);
  const auto wv = random_values(w_shape.numel(), dtype, 22, -0.5, 0.5);
  const auto bv = random_values(b_shape.numel(), dtype, 23);
  const auto rv = random_values(out_shape.numel(), dtype, 24);
  const Tensor x = make_tensor(xv, x_shape, dtype, *device);
  const Tensor w = make_tensor(wv, w_shape, dtype, *device);
  const Tensor b = c.bias == BiasKind::None ? Tensor() : make_tensor(bv, b_shape, dtype, *device);
  const Tensor r = c.residual ? make_tensor(rv, out_shape, dtype, *device) : Tensor();
  Conv2dParams p;
  p.stride_h = p.stride_w = c.stride;
  p.pad_h = p.pad_w = c.pad;
  poison_allocations(*device, (size_t)(out_shape.numel() * dtype_type_size(dtype)));
  const Tensor out = ops::conv2d_fused_nhwc(x, w, b, r, p, c.silu);
  ASSERT_EQ(out.shape(), out_shape);
  ASSERT_EQ(out.dtype(), dtype);

  std::vector<double> want((size_t)out_shape.numel());
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t oy = 0; oy < ho; ++oy)
      for (int64_t ox = 0; ox < wo; ++ox)
        for (int64_t co = 0; co < c.cout; ++co) {
          double s = 0;
          for (int64_t ky = 0; ky < c.k; ++ky)
            for (int64_t kx = 0; kx < c.k; ++kx) {
              const int64_t iy = oy * c.stride - c.pad + ky, ix = ox * c.stride - c.pad + kx;
              if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
              for (int64_t ci = 0; ci < c.cin; ++ci)
                s += xv[(size_t)(((n * c.h + iy) * c.w + ix) * c.cin + ci)] *
                     wv[(size_t)(((co * c.k + ky) * c.k + kx) * c.cin + ci)];
            }
          const size_t o = (size_t)(((n * ho + oy) * wo + ox) * c.cout + co);
          if (c.bias == BiasKind::PerChannel) s += bv[(size_t)co];
          if (c.bias == BiasKind::PerImage) s += bv[(size_t)(n * c.cout + co)];
          if (c.residual) s += rv[o];
          if (c.silu) s = s / (1.0 + std::exp(-s));
          want[o] = s;
        }
  Tolerance tol = default_tolerance(dtype);
  if (dtype == DType::F32 || dtype == DType::F64) tol.atol *= 2.0 * std::sqrt((double)(c.cin * c.k * c.k));
  EXPECT_TRUE(all_close(to_doubles(out), want, tol));
}

std::string conv_name(const ::testing::TestParamInfo<ConvParam>& info) {
  return std::get<0>(info.param) + "_" + std::get<1>(info.param).name + "_" +
         std::string(dtype_name(std::get<2>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(Ops, Conv2dFusedNhwcConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kConvCases), ::testing::ValuesIn(kDTypes)),
                         conv_name);
RBEE_CONFORMANCE_SUITE(Conv2dFusedNhwc, Conv2dFusedNhwcConformance);

// Bad arguments are refused with the op and the argument named.
class Conv2dFusedNhwcErrors : public ::testing::TestWithParam<std::string> {};

TEST_P(Conv2dFusedNhwcErrors, RefusesBadShapes) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  const Tensor x = make_tensor(random_values(2 * 5 * 5 * 8, DType::F32, 1), {2, 5, 5, 8}, DType::F32, *device);
  const Tensor w = make_tensor(random_values(4 * 9 * 8, DType::F32, 2), {4, 3, 3, 8}, DType::F32, *device);
  const Tensor w_nchw = make_tensor(random_values(4 * 9 * 8, DType::F32, 2), {4, 8, 3, 3}, DType::F32, *device);
  const Tensor bad_bias = make_tensor(random_values(3, DType::F32, 3), {3}, DType::F32, *device);
  const Tensor bad_res = make_tensor(random_values(2 * 4 * 5 * 5, DType::F32, 4), {2, 4, 5, 5}, DType::F32, *device);
  Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  auto expect_error = [&](const Tensor& wt, const Tensor& bias, const Tensor& res, const Conv2dParams& q,
                          const std::string& needle) {
    try {
      (void)ops::conv2d_fused_nhwc(x, wt, bias, res, q, false);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(w_nchw, Tensor(), Tensor(), p, "conv2d_fused_nhwc: w.dim(3) is 3");
  expect_error(w, bad_bias, Tensor(), p, "conv2d_fused_nhwc: bias must be");
  expect_error(w, Tensor(), bad_res, p, "conv2d_fused_nhwc: residual must have");
  Conv2dParams grouped = p;
  grouped.groups = 2;
  expect_error(w, Tensor(), Tensor(), grouped, "conv2d_fused_nhwc: groups must be 1");
}

INSTANTIATE_TEST_SUITE_P(Ops, Conv2dFusedNhwcErrors, ::testing::ValuesIn(conformance_backends()));

// ---------------------------------------------------------------------------------------------- group norm

using NormParam = std::tuple<std::string, DType>;
class GroupNormNhwcConformance : public ::testing::TestWithParam<NormParam> {};

TEST_P(GroupNormNhwcConformance, MatchesDoubleReference) {
  const auto& [backend, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  struct Case {
    Shape shape;  // [N, ..., C]
    int groups;
    double offset = 0;  // added to the values' range [-1, 3)
  };
  // The GPU runs maps of more than 256 positions through its row-chunk kernels, which split each image's rows over
  // about two blocks a multiprocessor, and smaller ones through one block per (image, group); the cases cover both.
  // On the row chunks: a 16-byte vector holding parts of two groups (C/groups = 15, 3 or 10 channels), more than
  // 256 vector columns a row (f32 1280, 16-bit 2560 and 4096: several column passes a thread), 8192 channels (and
  // 4096 in f32 / f64) past the statistics' shared memory (the one-block fallback). `offset` moves the values' mean
  // away from zero: 1M values a group around 100 (the VAE's group sizes) check the statistics' cancellation.
  std::vector<Case> cases = {Case{{2, 35, 6}, 3},           Case{{2, 5, 7, 24}, 4},     Case{{1, 9, 7}, 7},
                             Case{{2, 30, 12}, 4},          Case{{3, 17, 64}, 8},       Case{{2, 12, 11, 40}, 4},
                             Case{{1, 100, 100, 8}, 2},     Case{{2, 3, 9}, 3},         Case{{2, 33, 45}, 3},
                             Case{{2, 289, 45}, 3},         Case{{2, 260, 24}, 8},      Case{{2, 257, 1280}, 32},
                             Case{{1, 260, 4096}, 32},      Case{{1, 260, 8192}, 32},   Case{{2, 300, 320}, 32},
                             Case{{1, 262144, 8}, 2, 100}};
  if (dtype == DType::F16 || dtype == DType::BF16) {
    for (const Case& c : {Case{{2, 64, 64, 320}, 32}, Case{{2, 64, 64, 960}, 32}, Case{{2, 32, 32, 640}, 32},
                          Case{{2, 8, 8, 2560}, 32}, Case{{2, 16, 16, 1920}, 32}, Case{{2, 17, 17, 2560}, 32},
                          Case{{2, 128, 128, 320}, 32}})
      cases.push_back(c);
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.shape.to_string());
    const int64_t batch = c.shape[0], channels = c.shape[c.shape.rank() - 1];
    const int64_t spatial = c.shape.numel() / (batch * channels), per_group = channels / c.groups;
    const auto xv = random_values(c.shape.numel(), dtype, 400 + channels, c.offset - 1, c.offset + 3);
    const auto wv = random_values(channels, dtype, 401, 0.5, 1.5);
    const auto bv = random_values(channels, dtype, 402, -1, 1);
    const Tensor x = make_tensor(xv, c.shape, dtype, *device);
    const Tensor w = make_tensor(wv, {channels}, dtype, *device);
    const Tensor b = make_tensor(bv, {channels}, dtype, *device);
    const auto sv = random_values(batch * channels, dtype, 403, -2, 2);
    const Tensor sh = make_tensor(sv, {batch, channels}, dtype, *device);
    for (int variant = 0; variant < 6; ++variant) {
      const bool silu = variant % 2 == 1, affine = variant / 2 != 1, shifted = variant >= 4;
      {
        SCOPED_TRACE(variant);
        poison_allocations(*device, (size_t)(c.shape.numel() * dtype_type_size(dtype)));
        const Tensor out = ops::group_norm_nhwc(x, c.groups, affine ? w : Tensor(), affine ? b : Tensor(), 1e-5f, silu,
                                                shifted ? sh : Tensor());
        ASSERT_EQ(out.shape(), c.shape);
        std::vector<double> want(xv.size());
        for (int64_t n = 0; n < batch; ++n) {
          for (int g = 0; g < c.groups; ++g) {
            auto at = [&](int64_t s, int64_t j) { return (size_t)((n * spatial + s) * channels + g * per_group + j); };
            auto val = [&](int64_t s, int64_t j) {
              return xv[at(s, j)] + (shifted ? sv[(size_t)(n * channels + g * per_group + j)] : 0.0);
            };
            double mean = 0, var = 0;
            for (int64_t s = 0; s < spatial; ++s)
              for (int64_t j = 0; j < per_group; ++j) mean += val(s, j);
            mean /= (double)(spatial * per_group);
            // One correcting pass: the plain sum of 1M values near `offset` rounds by ~1e-11 of the mean, more than
            // the f64 kernels' own error.
            double fix = 0;
            for (int64_t s = 0; s < spatial; ++s)
              for (int64_t j = 0; j < per_group; ++j) fix += val(s, j) - mean;
            mean += fix / (double)(spatial * per_group);
            for (int64_t s = 0; s < spatial; ++s)
              for (int64_t j = 0; j < per_group; ++j) var += (val(s, j) - mean) * (val(s, j) - mean);
            var /= (double)(spatial * per_group);
            for (int64_t s = 0; s < spatial; ++s)
              for (int64_t j = 0; j < per_group; ++j) {
                const int64_t ch = g * per_group + j;
                const double norm = (val(s, j) - mean) / std::sqrt(var + (double)1e-5f);
                const double v = affine ? norm * wv[ch] + bv[ch] : norm;
                want[at(s, j)] = silu ? v / (1.0 + std::exp(-v)) : v;
              }
          }
        }
        // Values near `offset` give an f32 mean with up to offset * 2^-24 of rounding, which every f32 output carries
        // whatever the algorithm (3e-5 here); a variance off by 1% (squares summed unshifted in f32) is 1e-2.
        Tolerance tol = default_tolerance(dtype);
        if (dtype == DType::F32 && c.offset != 0) tol.atol = std::max(tol.atol, c.offset * 3e-7);
        EXPECT_TRUE(all_close(to_doubles(out), want, tol))
            << (affine ? "affine" : "plain") << (silu ? " silu" : "") << (shifted ? " shift" : "");
      }
    }
  }
}

std::string norm_name(const ::testing::TestParamInfo<NormParam>& info) {
  return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(Ops, GroupNormNhwcConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()), ::testing::ValuesIn(kDTypes)),
                         norm_name);
RBEE_CONFORMANCE_SUITE(GroupNormNhwc, GroupNormNhwcConformance);

}  // namespace
}  // namespace rbee::test
