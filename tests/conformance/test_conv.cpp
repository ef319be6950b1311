// Conformance: conv1d/2d, conv_transpose1d/2d, im2col, avg/max pool2d and upsample_nearest2d on every backend,
// against naive double-precision loops written here. The transposed-convolution reference scatters each input
// element into the output (the kernels gather), so the two formulations check each other.
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "common/expect_error.h"
#include "common/harness.h"
#include "conformance/op_suites.h"
#include "rbee/core/error.h"
#include "rbee/ops.h"

namespace rbee::test {
namespace {

const std::vector<DType> kFloatDTypes = {DType::F32, DType::F16, DType::BF16, DType::F64};

// Sums of `depth` products in f32 drift by about sqrt(depth) ulps; 16-bit results are dominated by their own
// rounding, which the default relative tolerance covers.
Tolerance conv_tolerance(DType dtype, int64_t depth) {
  Tolerance tol = default_tolerance(dtype);
  if (dtype == DType::F32 || dtype == DType::F64) tol.atol *= 2.0 * std::sqrt((double)std::max<int64_t>(depth, 1));
  return tol;
}

std::string dtype_str(DType d) { return std::string(dtype_name(d)); }

// ------------------------------------------------------------------------------------------ references
// Everything NCHW; 1-D cases use these with h = kh = 1.
struct Geometry {
  int64_t n, cin, h, w, cout, kh, kw;
  int64_t sh, sw, ph, pw, dh, dw, oph, opw, groups;
};

int64_t ref_conv_len(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }
int64_t ref_conv_transpose_len(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int64_t op) {
  return (in - 1) * s - 2 * p + d * (k - 1) + op + 1;
}

// out[n, co, oy, ox] = sum_{ci, ky, kx} x[n, g * cin_g + ci, oy*sh - ph + ky*dh, ox*sw - pw + kx*dw] * w[co, ci, ky, kx]
std::vector<double> ref_conv(const std::vector<double>& x, const std::vector<double>& w, const Geometry& g,
                             int64_t ho, int64_t wo) {
  const int64_t cin_g = g.cin / g.groups, cout_g = g.cout / g.groups;
  std::vector<double> out((size_t)(g.n * g.cout * ho * wo), 0.0);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t co = 0; co < g.cout; ++co)
      for (int64_t oy = 0; oy < ho; ++oy)
        for (int64_t ox = 0; ox < wo; ++ox) {
          const int64_t grp = co / cout_g;
          double s = 0;
          for (int64_t ci = 0; ci < cin_g; ++ci)
            for (int64_t ky = 0; ky < g.kh; ++ky)
              for (int64_t kx = 0; kx < g.kw; ++kx) {
                const int64_t iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                s += x[(size_t)(((n * g.cin + grp * cin_g + ci) * g.h + iy) * g.w + ix)] *
                     w[(size_t)(((co * cin_g + ci) * g.kh + ky) * g.kw + kx)];
              }
          out[(size_t)(((n * g.cout + co) * ho + oy) * wo + ox)] = s;
        }
  return out;
}

// Scatter: every x[n, ci, iy, ix] adds x * w[ci, co_g, ky, kx] to out[n, g * cout_g + co_g, iy*sh - ph + ky*dh, ...].
std::vector<double> ref_conv_transpose(const std::vector<double>& x, const std::vector<double>& w,
                                       const Geometry& g, int64_t ho, int64_t wo) {
  const int64_t cin_g = g.cin / g.groups, cout_g = g.cout / g.groups;
  std::vector<double> out((size_t)(g.n * g.cout * ho * wo), 0.0);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t ci = 0; ci < g.cin; ++ci)
      for (int64_t iy = 0; iy < g.h; ++iy)
        for (int64_t ix = 0; ix < g.w; ++ix) {
          const double xv = x[(size_t)(((n * g.cin + ci) * g.h + iy) * g.w + ix)];
          const int64_t grp = ci / cin_g;
          for (int64_t cog = 0; cog < cout_g; ++cog)
            for (int64_t ky = 0; ky < g.kh; ++ky)
              for (int64_t kx = 0; kx < g.kw; ++kx) {
                const int64_t oy = iy * g.sh - g.ph + ky * g.dh, ox = ix * g.sw - g.pw + kx * g.dw;
                if (oy < 0 || oy >= ho || ox < 0 || ox >= wo) continue;
                const int64_t co = grp * cout_g + cog;
                out[(size_t)(((n * g.cout + co) * ho + oy) * wo + ox)] +=
                    xv * w[(size_t)(((ci * cout_g + cog) * g.kh + ky) * g.kw + kx)];
              }
        }
  return out;
}

// --------------------------------------------------------------------------------------------- conv2d
struct Conv2dCase {
  const char* name;
  int64_t n, cin, h, w, cout, kh, kw;
  Conv2dParams p;
};

void PrintTo(const Conv2dCase& c, std::ostream* os) { *os << c.name; }

Geometry geometry(const Conv2dCase& c) {
  return {c.n,          c.cin,        c.h,          c.w,          c.cout,         c.kh,           c.kw,      c.p.stride_h,
          c.p.stride_w, c.p.pad_h,    c.p.pad_w,    c.p.dilation_h, c.p.dilation_w, c.p.output_pad_h, c.p.output_pad_w,
          c.p.groups};
}

Conv2dParams params2d(int sh, int sw, int ph, int pw, int dh = 1, int dw = 1, int groups = 1, int oph = 0,
                      int opw = 0) {
  Conv2dParams p;
  p.stride_h = sh, p.stride_w = sw, p.pad_h = ph, p.pad_w = pw, p.dilation_h = dh, p.dilation_w = dw;
  p.groups = groups, p.output_pad_h = oph, p.output_pad_w = opw;
  return p;
}

const std::vector<Conv2dCase> kConv2dCases = {
    {"k3_plain", 2, 3, 7, 9, 5, 3, 3, params2d(1, 1, 0, 0)},
    {"k3_pad1_odd", 1, 4, 11, 13, 6, 3, 3, params2d(1, 1, 1, 1)},
    {"k3_stride2_pad1", 2, 5, 13, 10, 7, 3, 3, params2d(2, 2, 1, 1)},
    {"k3_dilation2_pad2", 1, 3, 12, 11, 4, 3, 3, params2d(1, 1, 2, 2, 2, 2)},
    {"groups2", 2, 6, 9, 7, 4, 3, 3, params2d(1, 1, 1, 1, 1, 1, 2)},
    {"depthwise_stride2", 1, 5, 10, 9, 5, 3, 3, params2d(2, 2, 1, 1, 1, 1, 5)},
    {"depthwise_multiplier2", 2, 3, 8, 6, 6, 3, 3, params2d(1, 1, 1, 1, 1, 1, 3)},
    {"k1_pointwise", 2, 8, 6, 7, 5, 1, 1, params2d(1, 1, 0, 0)},
    {"k1_pointwise_many_tiles", 1, 16, 23, 29, 12, 1, 1, params2d(1, 1, 0, 0)},
    {"k1_stride2", 1, 6, 9, 8, 4, 1, 1, params2d(2, 2, 0, 0)},
    {"k1_padded", 1, 3, 4, 5, 2, 1, 1, params2d(1, 1, 1, 2)},
    {"asymmetric", 2, 3, 10, 12, 4, 2, 5, params2d(1, 2, 1, 0, 2, 1)},
    {"kernel_fills_padded_input", 1, 2, 3, 3, 3, 5, 5, params2d(1, 1, 1, 1)},
    {"k4_stride3_pad2_dilation3", 1, 4, 17, 15, 6, 4, 4, params2d(3, 3, 2, 2, 3, 3)},
    {"large_gemm_blocks", 1, 30, 40, 37, 100, 3, 3, params2d(1, 1, 1, 1)},
    {"many_channels_k1", 1, 300, 5, 7, 20, 1, 1, params2d(1, 1, 0, 0)},
};

using Conv2dParam = std::tuple<std::string, Conv2dCase, DType>;
class Conv2dConformance : public ::testing::TestWithParam<Conv2dParam> {};

TEST_P(Conv2dConformance, MatchesDoubleReference) {
  const auto& [backend, c, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const Geometry g = geometry(c);
  const Shape x_shape{c.n, c.cin, c.h, c.w}, w_shape{c.cout, c.cin / c.p.groups, c.kh, c.kw};
  const auto xv = random_values(x_shape.numel(), dtype, 101);
  const auto wv = random_values(w_shape.numel(), dtype, 202);
  const Tensor x = make_tensor(xv, x_shape, dtype, *device);
  const Tensor w = make_tensor(wv, w_shape, dtype, *device);
  const int64_t ho = ref_conv_len(c.h, c.kh, c.p.stride_h, c.p.pad_h, c.p.dilation_h);
  const int64_t wo = ref_conv_len(c.w, c.kw, c.p.stride_w, c.p.pad_w, c.p.dilation_w);
  poison_allocations(*device, (size_t)(c.n * c.cout * ho * wo * dtype_type_size(dtype)));
  const Tensor out = ops::conv2d(x, w, c.p);
  ASSERT_EQ(out.shape(), (Shape{c.n, c.cout, ho, wo}));
  ASSERT_EQ(out.dtype(), dtype);
  EXPECT_TRUE(all_close(to_doubles(out), ref_conv(xv, wv, g, ho, wo),
                        conv_tolerance(dtype, c.cin / c.p.groups * c.kh * c.kw)));
}

std::string conv2d_name(const ::testing::TestParamInfo<Conv2dParam>& info) {
  return std::get<0>(info.param) + "_" + std::get<1>(info.param).name + "_" + dtype_str(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Ops, Conv2dConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kConv2dCases), ::testing::ValuesIn(kFloatDTypes)),
                         conv2d_name);
RBEE_CONFORMANCE_SUITE(Conv2d, Conv2dConformance);

// ---------------------------------------------------------------------------------- conv_transpose2d
// Weights are [cin, cout / groups, kh, kw]; `cout` below is the op's output channel count.
const std::vector<Conv2dCase> kConvTranspose2dCases = {
    {"k3_plain", 2, 3, 5, 6, 4, 3, 3, params2d(1, 1, 0, 0)},
    {"k3_stride2_pad1_outpad1", 1, 4, 5, 7, 3, 3, 3, params2d(2, 2, 1, 1, 1, 1, 1, 1, 1)},
    {"k4_stride2_pad1", 2, 3, 6, 5, 5, 4, 4, params2d(2, 2, 1, 1)},
    {"k3_stride3_dilation2_outpad1", 1, 2, 4, 5, 3, 3, 3, params2d(3, 3, 1, 2, 2, 2, 1, 1, 2)},
    {"outpad_below_dilation", 1, 3, 5, 4, 2, 2, 2, params2d(1, 1, 0, 0, 3, 3, 1, 2, 1)},
    {"groups2", 2, 4, 5, 6, 6, 3, 3, params2d(2, 2, 1, 1, 1, 1, 2, 1, 0)},
    {"depthwise", 1, 3, 6, 5, 3, 3, 3, params2d(2, 1, 1, 1, 1, 1, 3)},
    {"k1_stride2_empty_phases", 1, 3, 4, 5, 2, 1, 1, params2d(2, 2, 0, 0, 1, 1, 1, 1, 1)},
    {"k1_pointwise", 2, 5, 3, 4, 4, 1, 1, params2d(1, 1, 0, 0)},
    {"asymmetric", 2, 3, 5, 6, 4, 3, 2, params2d(2, 1, 1, 0, 1, 2, 1, 1, 0)},
    {"large_pad", 1, 2, 6, 6, 3, 5, 5, params2d(2, 2, 4, 3, 1, 1, 1, 1, 0)},
    {"large_gemm_blocks", 1, 40, 9, 8, 24, 3, 3, params2d(2, 2, 1, 1, 1, 1, 1, 1, 1)},
    {"wide_channels", 1, 36, 7, 6, 100, 3, 3, params2d(1, 1, 1, 1)},
};

class ConvTranspose2dConformance : public ::testing::TestWithParam<Conv2dParam> {};

TEST_P(ConvTranspose2dConformance, MatchesScatterReference) {
  const auto& [backend, c, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const Geometry g = geometry(c);
  const Shape x_shape{c.n, c.cin, c.h, c.w}, w_shape{c.cin, c.cout / c.p.groups, c.kh, c.kw};
  const auto xv = random_values(x_shape.numel(), dtype, 303);
  const auto wv = random_values(w_shape.numel(), dtype, 404);
  const Tensor x = make_tensor(xv, x_shape, dtype, *device);
  const Tensor w = make_tensor(wv, w_shape, dtype, *device);
  const int64_t ho = ref_conv_transpose_len(c.h, c.kh, c.p.stride_h, c.p.pad_h, c.p.dilation_h, c.p.output_pad_h);
  const int64_t wo = ref_conv_transpose_len(c.w, c.kw, c.p.stride_w, c.p.pad_w, c.p.dilation_w, c.p.output_pad_w);
  poison_allocations(*device, (size_t)(c.n * c.cout * ho * wo * dtype_type_size(dtype)));
  const Tensor out = ops::conv_transpose2d(x, w, c.p);
  ASSERT_EQ(out.shape(), (Shape{c.n, c.cout, ho, wo}));
  ASSERT_EQ(out.dtype(), dtype);
  EXPECT_TRUE(all_close(to_doubles(out), ref_conv_transpose(xv, wv, g, ho, wo),
                        conv_tolerance(dtype, c.cin / c.p.groups * c.kh * c.kw)));
}

INSTANTIATE_TEST_SUITE_P(Ops, ConvTranspose2dConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kConvTranspose2dCases),
                                            ::testing::ValuesIn(kFloatDTypes)),
                         conv2d_name);
RBEE_CONFORMANCE_SUITE(ConvTranspose2d, ConvTranspose2dConformance);

// ------------------------------------------------------------------------------------ 1-D convolutions
struct Conv1dCase {
  const char* name;
  int64_t n, cin, l, cout, k;
  Conv1dParams p;
};

void PrintTo(const Conv1dCase& c, std::ostream* os) { *os << c.name; }

Conv1dParams params1d(int stride, int padding, int dilation = 1, int groups = 1, int output_padding = 0) {
  Conv1dParams p;
  p.stride = stride, p.padding = padding, p.dilation = dilation, p.groups = groups, p.output_padding = output_padding;
  return p;
}

Geometry geometry(const Conv1dCase& c) {
  return {c.n, c.cin, 1, c.l, c.cout, 1, c.k, 1, c.p.stride, 0, c.p.padding, 1, c.p.dilation, 0, c.p.output_padding,
          c.p.groups};
}

const std::vector<Conv1dCase> kConv1dCases = {
    {"k3_plain", 2, 3, 17, 4, 3, params1d(1, 0)},
    {"k5_stride2_pad2", 1, 4, 23, 6, 5, params1d(2, 2)},
    {"k3_dilation3_pad1", 2, 2, 19, 3, 3, params1d(1, 1, 3)},
    {"groups2", 1, 6, 15, 4, 3, params1d(1, 1, 1, 2)},
    {"depthwise", 2, 4, 13, 4, 4, params1d(3, 1, 1, 4)},
    {"k1", 1, 7, 9, 5, 1, params1d(1, 0)},
};

using Conv1dParam = std::tuple<std::string, Conv1dCase, DType>;
std::string conv1d_name(const ::testing::TestParamInfo<Conv1dParam>& info) {
  return std::get<0>(info.param) + "_" + std::get<1>(info.param).name + "_" + dtype_str(std::get<2>(info.param));
}

class Conv1dConformance : public ::testing::TestWithParam<Conv1dParam> {};
TEST_P(Conv1dConformance, MatchesDoubleReference) {
  const auto& [backend, c, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const Shape x_shape{c.n, c.cin, c.l}, w_shape{c.cout, c.cin / c.p.groups, c.k};
  const auto xv = random_values(x_shape.numel(), dtype, 505);
  const auto wv = random_values(w_shape.numel(), dtype, 606);
  const int64_t lo = ref_conv_len(c.l, c.k, c.p.stride, c.p.padding, c.p.dilation);
  poison_allocations(*device, (size_t)(c.n * c.cout * lo * dtype_type_size(dtype)));
  const Tensor out = ops::conv1d(make_tensor(xv, x_shape, dtype, *device), make_tensor(wv, w_shape, dtype, *device), c.p);
  ASSERT_EQ(out.shape(), (Shape{c.n, c.cout, lo}));
  EXPECT_TRUE(all_close(to_doubles(out), ref_conv(xv, wv, geometry(c), 1, lo),
                        conv_tolerance(dtype, c.cin / c.p.groups * c.k)));
}
INSTANTIATE_TEST_SUITE_P(Ops, Conv1dConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kConv1dCases), ::testing::ValuesIn(kFloatDTypes)),
                         conv1d_name);
RBEE_CONFORMANCE_SUITE(Conv1d, Conv1dConformance);

const std::vector<Conv1dCase> kConvTranspose1dCases = {
    {"k3_plain", 2, 3, 9, 4, 3, params1d(1, 0)},
    {"k4_stride2_pad1", 1, 4, 11, 3, 4, params1d(2, 1)},
    {"k3_stride3_dilation2_outpad2", 2, 2, 7, 5, 3, params1d(3, 2, 2, 1, 2)},
    {"groups2_outpad1", 1, 4, 8, 6, 3, params1d(2, 1, 1, 2, 1)},
    {"depthwise", 1, 3, 10, 3, 5, params1d(1, 2, 1, 3)},
};

class ConvTranspose1dConformance : public ::testing::TestWithParam<Conv1dParam> {};
TEST_P(ConvTranspose1dConformance, MatchesScatterReference) {
  const auto& [backend, c, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const Shape x_shape{c.n, c.cin, c.l}, w_shape{c.cin, c.cout / c.p.groups, c.k};
  const auto xv = random_values(x_shape.numel(), dtype, 707);
  const auto wv = random_values(w_shape.numel(), dtype, 808);
  const int64_t lo = ref_conv_transpose_len(c.l, c.k, c.p.stride, c.p.padding, c.p.dilation, c.p.output_padding);
  poison_allocations(*device, (size_t)(c.n * c.cout * lo * dtype_type_size(dtype)));
  const Tensor out =
      ops::conv_transpose1d(make_tensor(xv, x_shape, dtype, *device), make_tensor(wv, w_shape, dtype, *device), c.p);
  ASSERT_EQ(out.shape(), (Shape{c.n, c.cout, lo}));
  EXPECT_TRUE(all_close(to_doubles(out), ref_conv_transpose(xv, wv, geometry(c), 1, lo),
                        conv_tolerance(dtype, c.cin / c.p.groups * c.k)));
}
INSTANTIATE_TEST_SUITE_P(Ops, ConvTranspose1dConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kConvTranspose1dCases),
                                            ::testing::ValuesIn(kFloatDTypes)),
                         conv1d_name);
RBEE_CONFORMANCE_SUITE(ConvTranspose1d, ConvTranspose1dConformance);

// ------------------------------------------------------------------------------- layouts and batch 0
// Views with any strides go through the front-end's contiguous() step.
using BackendDTypeParam = std::tuple<std::string, DType>;
std::string backend_dtype_name(const ::testing::TestParamInfo<BackendDTypeParam>& info) {
  return std::get<0>(info.param) + "_" + dtype_str(std::get<1>(info.param));
}

class ConvLayoutConformance : public ::testing::TestWithParam<BackendDTypeParam> {};
TEST_P(ConvLayoutConformance, StridedAndTransposedInputs) {
  const auto& [backend, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const Conv2dCase c{"views", 2, 4, 7, 6, 6, 3, 3, params2d(2, 1, 1, 1, 1, 1, 2, 1, 0)};
  const Shape x_shape{c.n, c.cin, c.h, c.w}, w_shape{c.cout, c.cin / 2, c.kh, c.kw};
  const auto xv = random_values(x_shape.numel(), dtype, 909);
  const auto wv = random_values(w_shape.numel(), dtype, 910);
  const Tensor x = make_tensor(xv, x_shape, dtype, *device, Layout::Strided);
  const Tensor w = make_tensor(wv, w_shape, dtype, *device, Layout::Transposed);
  Conv2dParams forward = c.p;
  forward.output_pad_h = 0;
  const int64_t ho = ref_conv_len(c.h, c.kh, 2, 1, 1), wo = ref_conv_len(c.w, c.kw, 1, 1, 1);
  EXPECT_TRUE(all_close(to_doubles(ops::conv2d(x, w, forward)), ref_conv(xv, wv, geometry(c), ho, wo),
                        conv_tolerance(dtype, 18)));
  // Transposed, same x: w [Cin, Cout / groups, KH, KW] = [4, 3, 3, 3], stored transposed.
  const Shape wt_shape{c.cin, c.cout / 2, c.kh, c.kw};
  const auto wtv = random_values(wt_shape.numel(), dtype, 911);
  const Tensor wt = make_tensor(wtv, wt_shape, dtype, *device, Layout::Transposed);
  const int64_t tho = ref_conv_transpose_len(c.h, c.kh, 2, 1, 1, 1), two = ref_conv_transpose_len(c.w, c.kw, 1, 1, 1, 0);
  EXPECT_TRUE(all_close(to_doubles(ops::conv_transpose2d(x, wt, c.p)),
                        ref_conv_transpose(xv, wtv, geometry(c), tho, two), conv_tolerance(dtype, 18)));
}
INSTANTIATE_TEST_SUITE_P(Ops, ConvLayoutConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFloatDTypes)),
                         backend_dtype_name);

class ConvEmptyBatch : public ::testing::TestWithParam<std::string> {};
TEST_P(ConvEmptyBatch, ReturnsEmptyOutputs) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  const Tensor x = make_tensor({}, {0, 4, 5, 5}, DType::F32, *device);
  const Tensor w = make_tensor(random_values(4 * 4 * 9, DType::F32, 1), {4, 4, 3, 3}, DType::F32, *device);
  EXPECT_EQ(ops::conv2d(x, w, params2d(1, 1, 1, 1)).shape(), (Shape{0, 4, 5, 5}));
  EXPECT_EQ(ops::conv_transpose2d(x, w, params2d(2, 2, 1, 1, 1, 1, 1, 1, 1)).shape(), (Shape{0, 4, 10, 10}));
  EXPECT_EQ(ops::max_pool2d(x, Pool2dParams{}).shape(), (Shape{0, 4, 2, 2}));
}
INSTANTIATE_TEST_SUITE_P(Ops, ConvEmptyBatch, ::testing::ValuesIn(conformance_backends()));

// --------------------------------------------------------------------------------------------- im2col
struct Im2colCase {
  const char* name;
  int64_t n, c, h, w, kh, kw;
  Conv2dParams p;
};
void PrintTo(const Im2colCase& c, std::ostream* os) { *os << c.name; }
const std::vector<Im2colCase> kIm2colCases = {
    {"k3_plain", 2, 3, 5, 6, 3, 3, params2d(1, 1, 0, 0)},
    {"k3_stride2_pad1", 1, 2, 7, 8, 3, 3, params2d(2, 2, 1, 1)},
    {"k2x3_dilation2_pad", 2, 3, 9, 7, 2, 3, params2d(1, 2, 1, 2, 2, 1)},
    {"k1", 1, 4, 3, 5, 1, 1, params2d(1, 1, 0, 0)},
};

using Im2colParam = std::tuple<std::string, Im2colCase, DType>;
class Im2colConformance : public ::testing::TestWithParam<Im2colParam> {};
TEST_P(Im2colConformance, MatchesReference) {
  const auto& [backend, c, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const Shape x_shape{c.n, c.c, c.h, c.w};
  const auto xv = random_values(x_shape.numel(), dtype, 1111);
  const int64_t ho = ref_conv_len(c.h, c.kh, c.p.stride_h, c.p.pad_h, c.p.dilation_h);
  const int64_t wo = ref_conv_len(c.w, c.kw, c.p.stride_w, c.p.pad_w, c.p.dilation_w);
  const int64_t cols = c.c * c.kh * c.kw;
  poison_allocations(*device, (size_t)(c.n * ho * wo * cols * dtype_type_size(dtype)));
  const Tensor out = ops::im2col(make_tensor(xv, x_shape, dtype, *device), (int)c.kh, (int)c.kw, c.p);
  ASSERT_EQ(out.shape(), (Shape{c.n, ho * wo, cols}));
  std::vector<double> want((size_t)(c.n * ho * wo * cols));
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t oy = 0; oy < ho; ++oy)
      for (int64_t ox = 0; ox < wo; ++ox)
        for (int64_t ch = 0; ch < c.c; ++ch)
          for (int64_t ky = 0; ky < c.kh; ++ky)
            for (int64_t kx = 0; kx < c.kw; ++kx) {
              const int64_t iy = oy * c.p.stride_h - c.p.pad_h + ky * c.p.dilation_h;
              const int64_t ix = ox * c.p.stride_w - c.p.pad_w + kx * c.p.dilation_w;
              const bool inside = iy >= 0 && iy < c.h && ix >= 0 && ix < c.w;
              want[(size_t)(((n * ho + oy) * wo + ox) * cols + (ch * c.kh + ky) * c.kw + kx)] =
                  inside ? xv[(size_t)(((n * c.c + ch) * c.h + iy) * c.w + ix)] : 0.0;
            }
  EXPECT_TRUE(all_close(to_doubles(out), want, {0, 0}));
}
INSTANTIATE_TEST_SUITE_P(Ops, Im2colConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kIm2colCases), ::testing::ValuesIn(kFloatDTypes)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param).name + "_" +
                                  dtype_str(std::get<2>(info.param));
                         });
RBEE_CONFORMANCE_SUITE(Im2col, Im2colConformance);

// ---------------------------------------------------------------------------------------------- pool2d
enum class PoolKind { AvgIncludePad, AvgExcludePad, Max };
const char* pool_kind_name(PoolKind k) {
  return k == PoolKind::AvgIncludePad ? "avg_include_pad" : k == PoolKind::AvgExcludePad ? "avg_exclude_pad" : "max";
}

struct PoolCase {
  const char* name;
  int64_t n, c, h, w;
  int kh, kw, sh, sw, ph, pw;
};
void PrintTo(const PoolCase& c, std::ostream* os) { *os << c.name; }
void PrintTo(PoolKind k, std::ostream* os) { *os << pool_kind_name(k); }
const std::vector<PoolCase> kPoolCases = {
    {"k2_stride2", 2, 3, 8, 10, 2, 2, 2, 2, 0, 0},
    {"k2_stride2_odd", 1, 2, 7, 9, 2, 2, 2, 2, 0, 0},
    {"k3_stride2_pad1", 2, 3, 9, 8, 3, 3, 2, 2, 1, 1},
    {"k3_stride1_pad1", 1, 4, 6, 7, 3, 3, 1, 1, 1, 1},
    {"k2x3_stride1x2_pad1", 2, 2, 7, 11, 2, 3, 1, 2, 1, 1},
    {"k4x5_pad2_stride3", 1, 3, 10, 13, 4, 5, 3, 3, 2, 2},
};

using PoolParam = std::tuple<std::string, PoolCase, PoolKind, DType>;
class Pool2dConformance : public ::testing::TestWithParam<PoolParam> {};
TEST_P(Pool2dConformance, MatchesReference) {
  const auto& [backend, c, kind, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const Shape x_shape{c.n, c.c, c.h, c.w};
  const auto xv = random_values(x_shape.numel(), dtype, 1212, -2.0, 1.0);  // mostly negative: padding must not win
  Pool2dParams p;
  p.kernel_h = c.kh, p.kernel_w = c.kw, p.stride_h = c.sh, p.stride_w = c.sw, p.pad_h = c.ph, p.pad_w = c.pw;
  p.count_include_pad = kind == PoolKind::AvgIncludePad;
  const int64_t ho = (c.h + 2 * c.ph - c.kh) / c.sh + 1, wo = (c.w + 2 * c.pw - c.kw) / c.sw + 1;
  poison_allocations(*device, (size_t)(c.n * c.c * ho * wo * dtype_type_size(dtype)));
  const Tensor x = make_tensor(xv, x_shape, dtype, *device);
  const Tensor out = kind == PoolKind::Max ? ops::max_pool2d(x, p) : ops::avg_pool2d(x, p);
  ASSERT_EQ(out.shape(), (Shape{c.n, c.c, ho, wo}));
  std::vector<double> want((size_t)(c.n * c.c * ho * wo));
  for (int64_t plane = 0; plane < c.n * c.c; ++plane)
    for (int64_t oy = 0; oy < ho; ++oy)
      for (int64_t ox = 0; ox < wo; ++ox) {
        double sum = 0, best = -INFINITY;
        int64_t inside = 0;
        for (int64_t ky = 0; ky < c.kh; ++ky)
          for (int64_t kx = 0; kx < c.kw; ++kx) {
            const int64_t iy = oy * c.sh - c.ph + ky, ix = ox * c.sw - c.pw + kx;
            if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
            const double v = xv[(size_t)((plane * c.h + iy) * c.w + ix)];
            sum += v, best = std::max(best, v), ++inside;
          }
        double r = best;
        if (kind == PoolKind::AvgIncludePad) r = sum / (double)(c.kh * c.kw);
        if (kind == PoolKind::AvgExcludePad) r = sum / (double)inside;
        want[(size_t)((plane * ho + oy) * wo + ox)] = r;
      }
  const Tolerance tol = kind == PoolKind::Max ? Tolerance{0, 0} : conv_tolerance(dtype, c.kh * c.kw);
  EXPECT_TRUE(all_close(to_doubles(out), want, tol));
}
INSTANTIATE_TEST_SUITE_P(Ops, Pool2dConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()), ::testing::ValuesIn(kPoolCases),
                                            ::testing::Values(PoolKind::AvgIncludePad, PoolKind::AvgExcludePad,
                                                              PoolKind::Max),
                                            ::testing::ValuesIn(kFloatDTypes)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param).name + "_" +
                                  pool_kind_name(std::get<2>(info.param)) + "_" + dtype_str(std::get<3>(info.param));
                         });
RBEE_CONFORMANCE_SUITE(Pool2d, Pool2dConformance);

class MaxPoolNaN : public ::testing::TestWithParam<BackendDTypeParam> {};
TEST_P(MaxPoolNaN, PropagatesNaN) {
  const auto& [backend, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  std::vector<double> xv = random_values(16, dtype, 1313);
  xv[5] = NAN;  // row 1, column 1: inside the top-left 2x2 window only
  Pool2dParams p;  // 2x2, stride 2
  const auto got = to_doubles(ops::max_pool2d(make_tensor(xv, {1, 1, 4, 4}, dtype, *device), p));
  ASSERT_EQ(got.size(), 4u);
  EXPECT_TRUE(std::isnan(got[0]));
  for (int i = 1; i < 4; ++i) EXPECT_FALSE(std::isnan(got[(size_t)i])) << i;
}
INSTANTIATE_TEST_SUITE_P(Ops, MaxPoolNaN,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFloatDTypes)),
                         backend_dtype_name);

// --------------------------------------------------------------------------------- upsample_nearest2d
struct UpsampleCase {
  const char* name;
  int64_t n, c, h, w, oh, ow;
};
const std::vector<UpsampleCase> kUpsampleCases = {
    {"x2", 2, 3, 5, 7, 10, 14},
    {"non_integer", 1, 2, 5, 7, 8, 10},
    {"down", 1, 3, 7, 9, 3, 4},
    {"mixed", 2, 2, 4, 6, 12, 5},
};
void PrintTo(const UpsampleCase& c, std::ostream* os) { *os << c.name; }
using UpsampleParam = std::tuple<std::string, UpsampleCase, DType>;
class UpsampleConformance : public ::testing::TestWithParam<UpsampleParam> {};
TEST_P(UpsampleConformance, MatchesReference) {
  const auto& [backend, c, dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const Shape x_shape{c.n, c.c, c.h, c.w};
  const auto xv = random_values(x_shape.numel(), dtype, 1414);
  poison_allocations(*device, (size_t)(c.n * c.c * c.oh * c.ow * dtype_type_size(dtype)));
  const Tensor out = ops::upsample_nearest2d(make_tensor(xv, x_shape, dtype, *device), c.oh, c.ow);
  ASSERT_EQ(out.shape(), (Shape{c.n, c.c, c.oh, c.ow}));
  std::vector<double> want((size_t)(c.n * c.c * c.oh * c.ow));
  for (int64_t plane = 0; plane < c.n * c.c; ++plane)
    for (int64_t oy = 0; oy < c.oh; ++oy)
      for (int64_t ox = 0; ox < c.ow; ++ox) {
        const auto iy = (int64_t)std::floor((double)oy * (double)c.h / (double)c.oh);
        const auto ix = (int64_t)std::floor((double)ox * (double)c.w / (double)c.ow);
        want[(size_t)((plane * c.oh + oy) * c.ow + ox)] = xv[(size_t)((plane * c.h + iy) * c.w + ix)];
      }
  EXPECT_TRUE(all_close(to_doubles(out), want, {0, 0}));
}
INSTANTIATE_TEST_SUITE_P(Ops, UpsampleConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kUpsampleCases), ::testing::ValuesIn(kFloatDTypes)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param).name + "_" +
                                  dtype_str(std::get<2>(info.param));
                         });
RBEE_CONFORMANCE_SUITE(UpsampleNearest2d, UpsampleConformance);

// ------------------------------------------------------------------------------------------ bad input
class ConvErrors : public ::testing::Test {
 protected:
  Tensor t(const Shape& shape, DType dtype = DType::F32) {
    return make_tensor(random_values(shape.numel(), dtype, 7), shape, dtype, cpu_device());
  }
};

TEST_F(ConvErrors, Conv2dShapesAndChannels) {
  const Tensor x = t({1, 4, 8, 8});
  expect_invalid([&] { ops::conv2d(t({4, 8, 8}), t({2, 4, 3, 3})); }, {"conv2d", "x must be 4-D"});
  expect_invalid([&] { ops::conv2d(x, t({2, 4, 3})); }, {"conv2d", "w must be 4-D"});
  expect_invalid([&] { ops::conv2d(x, t({2, 3, 3, 3})); }, {"conv2d", "w.dim(1) is 3", "4 input channels"});
  expect_invalid([&] { ops::conv2d(x, t({2, 4, 3, 3}, DType::F16)); }, {"conv2d", "x is f32 but w is f16"});
  expect_invalid([&] { ops::conv2d(t({1, 4, 8, 8}, DType::I32), t({2, 4, 3, 3}, DType::I32)); }, {"conv2d", "i32"});
  expect_invalid([&] { ops::conv2d(x, t({2, 4, 3, 3}), params2d(1, 1, 0, 0, 1, 1, 0)); }, {"conv2d", "groups", "0"});
  expect_invalid([&] { ops::conv2d(t({1, 6, 8, 8}), t({2, 2, 3, 3}), params2d(1, 1, 0, 0, 1, 1, 4)); },
                 {"conv2d", "6 input channels", "groups = 4"});
  expect_invalid([&] { ops::conv2d(x, t({3, 2, 3, 3}), params2d(1, 1, 0, 0, 1, 1, 2)); },
                 {"conv2d", "3 output channels", "groups = 2"});
  expect_invalid([&] { ops::conv2d(t({1, 4, 0, 8}), t({2, 4, 3, 3})); }, {"conv2d", "empty"});
}

TEST_F(ConvErrors, Conv2dParameters) {
  const Tensor x = t({1, 4, 8, 8}), w = t({2, 4, 3, 3});
  expect_invalid([&] { ops::conv2d(x, w, params2d(0, 1, 0, 0)); }, {"conv2d", "stride_h", "got 0"});
  expect_invalid([&] { ops::conv2d(x, w, params2d(1, -2, 0, 0)); }, {"conv2d", "stride_w", "got -2"});
  expect_invalid([&] { ops::conv2d(x, w, params2d(1, 1, 0, 0, 0, 1)); }, {"conv2d", "dilation_h", "got 0"});
  expect_invalid([&] { ops::conv2d(x, w, params2d(1, 1, 0, -1)); }, {"conv2d", "pad_w", "got -1"});
  expect_invalid([&] { ops::conv2d(x, w, params2d(1, 1, 0, 0, 1, 1, 1, 1, 0)); },
                 {"conv2d", "output_pad_h", "transposed"});
  // Kernel larger than the padded input: 3 + 2*0 < 5, and dilation 4 makes a 3-tap kernel span 9 > 8.
  expect_invalid([&] { ops::conv2d(t({1, 4, 3, 8}), t({2, 4, 5, 3})); }, {"conv2d", "height", "larger than the padded input"});
  expect_invalid([&] { ops::conv2d(x, w, params2d(1, 1, 0, 0, 1, 4)); }, {"conv2d", "width extent 9", "padded input 8"});
}

TEST_F(ConvErrors, Conv1d) {
  const Tensor x = t({2, 4, 10}), w = t({3, 4, 3});
  expect_invalid([&] { ops::conv1d(t({4, 10}), w); }, {"conv1d", "x must be 3-D"});
  expect_invalid([&] { ops::conv1d(x, w, params1d(0, 0)); }, {"conv1d", "stride", "got 0"});
  expect_invalid([&] { ops::conv1d(x, w, params1d(1, -1)); }, {"conv1d", "padding", "got -1"});
  expect_invalid([&] { ops::conv1d(x, w, params1d(1, 0, 0)); }, {"conv1d", "dilation", "got 0"});
  expect_invalid([&] { ops::conv1d(x, w, params1d(1, 0, 1, 1, 1)); }, {"conv1d", "output_padding", "transposed"});
  expect_invalid([&] { ops::conv1d(x, w, params1d(1, 0, 5)); }, {"conv1d", "length extent 11", "padded input 10"});
  expect_invalid([&] { ops::conv1d(x, t({3, 2, 3}), params1d(1, 0, 1, 3)); }, {"conv1d", "groups = 3"});
}

TEST_F(ConvErrors, TransposedConvolutions) {
  const Tensor x = t({1, 4, 5, 5});
  expect_invalid([&] { ops::conv_transpose2d(x, t({3, 2, 3, 3})); }, {"conv_transpose2d", "w.dim(0) is 3", "4 input channels"});
  expect_invalid([&] { ops::conv_transpose2d(t({1, 3, 5, 5}), t({3, 2, 3, 3}), params2d(1, 1, 0, 0, 1, 1, 2)); },
                 {"conv_transpose2d", "3 input channels", "groups = 2"});
  // output padding must be below the stride or the dilation
  expect_invalid([&] { ops::conv_transpose2d(x, t({4, 2, 3, 3}), params2d(2, 2, 1, 1, 1, 1, 1, 2, 0)); },
                 {"conv_transpose2d", "output_pad_h is 2", "stride (2)", "dilation (1)"});
  expect_invalid([&] { ops::conv_transpose2d(x, t({4, 2, 3, 3}), params2d(1, 2, 0, 0, 1, 1, 1, 0, 2)); },
                 {"conv_transpose2d", "output_pad_w is 2"});
  expect_invalid([&] { ops::conv_transpose2d(x, t({4, 2, 3, 3}), params2d(1, 1, 0, 0, 1, 1, 1, -1, 0)); },
                 {"conv_transpose2d", "output_pad_h", "got -1"});
  expect_invalid([&] { ops::conv_transpose2d(x, t({4, 2, 3, 3}), params2d(1, 0, 0, 0)); },
                 {"conv_transpose2d", "stride_w", "got 0"});
  // (1 - 1) * 1 - 2 * 3 + 2 + 1 = -3 output rows
  expect_invalid([&] { ops::conv_transpose2d(t({1, 4, 1, 5}), t({4, 2, 3, 3}), params2d(1, 1, 3, 0)); },
                 {"conv_transpose2d", "output height would be -3"});
  expect_invalid([&] { ops::conv_transpose1d(t({1, 4, 5}), t({4, 2, 3}), params1d(2, 0, 3, 1, 3)); },
                 {"conv_transpose1d", "output_padding is 3", "stride (2)", "dilation (3)"});
  expect_invalid([&] { ops::conv_transpose1d(t({1, 4, 5}), t({4, 2, 3, 3})); }, {"conv_transpose1d", "w must be 3-D"});
}

TEST_F(ConvErrors, Im2colPoolUpsample) {
  const Tensor x = t({1, 2, 6, 6});
  expect_invalid([&] { ops::im2col(x, 0, 3); }, {"im2col", "kernel_h", "got 0"});
  expect_invalid([&] { ops::im2col(x, 3, 3, params2d(1, 1, 0, 0, 1, 1, 2)); }, {"im2col", "groups must be 1"});
  expect_invalid([&] { ops::im2col(x, 7, 3); }, {"im2col", "height", "larger than the padded input"});
  expect_invalid([&] { ops::im2col(t({2, 6, 6}), 3, 3); }, {"im2col", "4-D"});

  Pool2dParams p;
  p.kernel_h = 0;
  expect_invalid([&] { ops::avg_pool2d(x, p); }, {"avg_pool2d", "kernel_h", "got 0"});
  p = {};
  p.stride_w = 0;
  expect_invalid([&] { ops::max_pool2d(x, p); }, {"max_pool2d", "stride_w", "got 0"});
  p = {};
  p.pad_h = 2;  // kernel 2: at most 1
  expect_invalid([&] { ops::max_pool2d(x, p); }, {"max_pool2d", "pad_h 2", "half of kernel_h 2"});
  p = {};
  p.pad_w = -1;
  expect_invalid([&] { ops::avg_pool2d(x, p); }, {"avg_pool2d", "pad_w", "got -1"});
  p = {};
  p.kernel_w = 9, p.pad_w = 1;
  expect_invalid([&] { ops::avg_pool2d(x, p); }, {"avg_pool2d", "kernel_w 9", "padded input width 8"});
  expect_invalid([&] { ops::max_pool2d(t({6, 6}), Pool2dParams{}); }, {"max_pool2d", "4-D"});

  expect_invalid([&] { ops::upsample_nearest2d(x, 0, 4); }, {"upsample_nearest2d", "out_h", "got 0"});
  expect_invalid([&] { ops::upsample_nearest2d(x, 4, -3); }, {"upsample_nearest2d", "out_w", "got -3"});
  expect_invalid([&] { ops::upsample_nearest2d(t({2, 6, 6}), 4, 4); }, {"upsample_nearest2d", "4-D"});
  expect_invalid([&] { ops::upsample_nearest2d(t({1, 2, 6, 6}, DType::I64), 4, 4); }, {"upsample_nearest2d", "i64"});
}

TEST_F(ConvErrors, UndefinedTensors) {
  expect_invalid([&] { ops::conv2d(Tensor(), t({2, 4, 3, 3})); }, {"conv2d", "'x'", "undefined"});
  expect_invalid([&] { ops::conv_transpose1d(t({1, 4, 5}), Tensor()); }, {"conv_transpose1d", "'w'", "undefined"});
  expect_invalid([&] { ops::avg_pool2d(Tensor(), Pool2dParams{}); }, {"avg_pool2d", "undefined"});
}

}  // namespace
}  // namespace rbee::test
