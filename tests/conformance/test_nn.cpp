// Conformance: rms_norm, layer_norm, group_norm, add_rms_norm, swiglu, geglu, rope (+ rope_inv_freq) and attention on
// every backend vs naive double references written here, plus the ops' error paths.
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>

#include <hwy/targets.h>

#include "common/expect_error.h"
#include "common/harness.h"
#include "conformance/op_suites.h"
#include "rbee/ops.h"

namespace rbee::test {
namespace {

const std::vector<DType> kFloatDTypes = {DType::F32, DType::F16, DType::BF16, DType::F64};
const std::vector<Layout> kLayouts = {Layout::Contiguous, Layout::Strided, Layout::Transposed};

using DTypeLayoutParam = std::tuple<std::string, DType, Layout>;
std::string dtype_layout_name(const ::testing::TestParamInfo<DTypeLayoutParam>& info) {
  return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param))) + "_" +
         layout_name(std::get<2>(info.param));
}

size_t bytes_of(const Shape& shape, DType dtype) { return (size_t)(shape.numel() * dtype_type_size(dtype)); }

// Shapes for the row-wise ops: odd sizes for SIMD tails, and one big enough to run on several threads.
// The last one is longer than a GPU block keeps in shared memory.
const std::vector<Shape> kRowShapes = {Shape{3, 5, 67}, Shape{48, 520}, Shape{2, 9000}};

// ------------------------------------------------------------------------------------------ rms / layer norm
// out = (x - mean) / sqrt(var + eps) * w + b, with mean = 0 and var = mean(x^2) for the RMS variant.
std::vector<double> norm_reference(const std::vector<double>& x, int64_t n, const std::vector<double>* w,
                                   const std::vector<double>* b, double eps, bool rms) {
  std::vector<double> out(x.size());
  for (size_t r = 0; r < x.size() / (size_t)n; ++r) {
    const double* row = x.data() + r * n;
    double mean = 0;
    if (!rms) {
      for (int64_t i = 0; i < n; ++i) mean += row[i];
      mean /= (double)n;
    }
    double var = 0;
    for (int64_t i = 0; i < n; ++i) var += (row[i] - mean) * (row[i] - mean);
    var /= (double)n;
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < n; ++i) {
      out[r * n + i] = (row[i] - mean) * rstd * (w ? (*w)[i] : 1.0) + (b ? (*b)[i] : 0.0);
    }
  }
  return out;
}

class RmsNormConformance : public ::testing::TestWithParam<DTypeLayoutParam> {};
TEST_P(RmsNormConformance, MatchesDoubleReference) {
  const auto& [backend, dtype, layout] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  for (const Shape& shape : kRowShapes) {
    const int64_t n = shape[shape.rank() - 1];
    const auto xv = random_values(shape.numel(), dtype, 100 + n, -2, 2);
    const auto wv = random_values(n, dtype, 101 + n, 0.5, 1.5);
    const Tensor x = make_tensor(xv, shape, dtype, *device, layout);
    const Tensor w = make_tensor(wv, {n}, dtype, *device);
    for (bool with_weight : {true, false}) {
      SCOPED_TRACE(shape.to_string() + (with_weight ? " with weight" : " without weight"));
      poison_allocations(*device, bytes_of(shape, dtype));
      const Tensor out = ops::rms_norm(x, with_weight ? w : Tensor(), 1e-5f);
      ASSERT_EQ(out.shape(), shape);
      ASSERT_EQ(out.dtype(), dtype);
      const auto want = norm_reference(xv, n, with_weight ? &wv : nullptr, nullptr, (double)1e-5f, true);
      EXPECT_TRUE(all_close(to_doubles(out), want, default_tolerance(dtype)));
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Ops, RmsNormConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFloatDTypes), ::testing::ValuesIn(kLayouts)),
                         dtype_layout_name);
RBEE_CONFORMANCE_SUITE(RmsNorm, RmsNormConformance);

class LayerNormConformance : public ::testing::TestWithParam<DTypeLayoutParam> {};
TEST_P(LayerNormConformance, MatchesDoubleReference) {
  const auto& [backend, dtype, layout] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  // Beside kRowShapes, SD's transformer widths (320 and 1280 features: one GPU warp per row), a row narrower than
  // a warp's vectors, SD 1.5's 16x16 and 32x32 levels' rows, and a row count that leaves the GPU's last block of 8
  // rows part full.
  std::vector<Shape> shapes = kRowShapes;
  for (const Shape& s : {Shape{256, 320}, Shape{40, 1280}, Shape{7, 64}, Shape{512, 1280}, Shape{2048, 640},
                         Shape{2075, 320}})
    shapes.push_back(s);
  for (const Shape& shape : shapes) {
    const int64_t n = shape[shape.rank() - 1];
    // An offset mean so that forgetting to subtract it shows.
    const auto xv = random_values(shape.numel(), dtype, 200 + n, 1, 5);
    const auto wv = random_values(n, dtype, 201 + n, -1.5, 1.5);
    const auto bv = random_values(n, dtype, 202 + n, -1, 1);
    const Tensor x = make_tensor(xv, shape, dtype, *device, layout);
    const Tensor w = make_tensor(wv, {n}, dtype, *device);
    const Tensor b = make_tensor(bv, {n}, dtype, *device);
    for (int variant = 0; variant < 3; ++variant) {  // weight and bias, weight only, neither
      SCOPED_TRACE(shape.to_string() + " variant " + std::to_string(variant));
      const bool use_w = variant < 2, use_b = variant == 0;
      poison_allocations(*device, bytes_of(shape, dtype));
      const Tensor out = ops::layer_norm(x, use_w ? w : Tensor(), use_b ? b : Tensor(), 1e-5f);
      ASSERT_EQ(out.shape(), shape);
      const auto want =
          norm_reference(xv, n, use_w ? &wv : nullptr, use_b ? &bv : nullptr, (double)1e-5f, false);
      EXPECT_TRUE(all_close(to_doubles(out), want, default_tolerance(dtype)));
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Ops, LayerNormConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFloatDTypes), ::testing::ValuesIn(kLayouts)),
                         dtype_layout_name);
RBEE_CONFORMANCE_SUITE(LayerNorm, LayerNormConformance);

// ------------------------------------------------------------------------------------------------ group norm
// group_norm, or group_norm_silu when `silu` (the reference then applies v / (1 + exp(-v)) in double).
void check_group_norm(const std::string& backend, DType dtype, Layout layout, bool silu) {
  RBEE_REQUIRE_DEVICE(backend, device);
  struct Case {
    Shape shape;
    int groups;
  };
  // [N, C, H, W] with small odd planes, and an SD-like [N, C, H, W] large enough for several threads. Groups of
  // 20000 values take the GPU's one-launch path (one block per group); groups of 180000 values are reduced in
  // several blocks (statistics, finalize and apply kernels). 16-bit contiguous inputs also get SD 1.5's UNet shapes
  // (batch 2 for the two guidance halves, 32 groups, 64x64 .. 8x8 maps; 960 channels: the largest one-launch group).
  std::vector<Case> cases = {Case{{2, 6, 5, 7}, 3}, Case{{2, 32, 12, 16}, 8}, Case{{3, 4}, 2},
                             Case{{1, 4, 100, 100}, 2}, Case{{1, 2, 300, 300}, 1}};
  if ((dtype == DType::F16 || dtype == DType::BF16) && layout == Layout::Contiguous) {
    for (const Case& c : {Case{{2, 320, 64, 64}, 32}, Case{{2, 960, 64, 64}, 32}, Case{{2, 640, 32, 32}, 32},
                          Case{{2, 1280, 16, 16}, 32}, Case{{2, 2560, 8, 8}, 32}, Case{{2, 1280, 8, 8}, 32}}) {
      cases.push_back(c);
    }
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.shape.to_string());
    const int64_t batch = c.shape[0], channels = c.shape[1];
    const int64_t spatial = c.shape.numel() / (batch * channels);
    const auto xv = random_values(c.shape.numel(), dtype, 300 + channels, -1, 3);
    const auto wv = random_values(channels, dtype, 301, 0.5, 1.5);
    const auto bv = random_values(channels, dtype, 302, -1, 1);
    const Tensor x = make_tensor(xv, c.shape, dtype, *device, layout);
    const Tensor w = make_tensor(wv, {channels}, dtype, *device);
    const Tensor b = make_tensor(bv, {channels}, dtype, *device);
    for (bool affine : {true, false}) {
      poison_allocations(*device, bytes_of(c.shape, dtype));
      const Tensor out = silu ? ops::group_norm_silu(x, c.groups, affine ? w : Tensor(), affine ? b : Tensor(), 1e-5f)
                              : ops::group_norm(x, c.groups, affine ? w : Tensor(), affine ? b : Tensor(), 1e-5f);
      ASSERT_EQ(out.shape(), c.shape);
      std::vector<double> want(xv.size());
      const int64_t per_group = channels / c.groups, count = per_group * spatial;
      for (int64_t n = 0; n < batch; ++n) {
        for (int g = 0; g < c.groups; ++g) {
          const int64_t first = (n * channels + g * per_group) * spatial;
          double mean = 0, var = 0;
          for (int64_t i = 0; i < count; ++i) mean += xv[first + i];
          mean /= (double)count;
          for (int64_t i = 0; i < count; ++i) var += (xv[first + i] - mean) * (xv[first + i] - mean);
          var /= (double)count;
          for (int64_t i = 0; i < count; ++i) {
            const int64_t ch = g * per_group + i / spatial;
            const double norm = (xv[first + i] - mean) / std::sqrt(var + (double)1e-5f);
            const double v = affine ? norm * wv[ch] + bv[ch] : norm;
            want[first + i] = silu ? v / (1.0 + std::exp(-v)) : v;
          }
        }
      }
      EXPECT_TRUE(all_close(to_doubles(out), want, default_tolerance(dtype))) << (affine ? "affine" : "plain");
    }
  }
}

class GroupNormConformance : public ::testing::TestWithParam<DTypeLayoutParam> {};
TEST_P(GroupNormConformance, MatchesDoubleReference) {
  const auto& [backend, dtype, layout] = GetParam();
  check_group_norm(backend, dtype, layout, false);
}
INSTANTIATE_TEST_SUITE_P(Ops, GroupNormConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFloatDTypes), ::testing::ValuesIn(kLayouts)),
                         dtype_layout_name);
RBEE_CONFORMANCE_SUITE(GroupNorm, GroupNormConformance);

class GroupNormSiluConformance : public ::testing::TestWithParam<DTypeLayoutParam> {};
TEST_P(GroupNormSiluConformance, MatchesDoubleReference) {
  const auto& [backend, dtype, layout] = GetParam();
  check_group_norm(backend, dtype, layout, true);
}
INSTANTIATE_TEST_SUITE_P(Ops, GroupNormSiluConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFloatDTypes), ::testing::ValuesIn(kLayouts)),
                         dtype_layout_name);
RBEE_CONFORMANCE_SUITE(GroupNormSilu, GroupNormSiluConformance);

// ---------------------------------------------------------------------------------------------- add_rms_norm
class AddRmsNormConformance : public ::testing::TestWithParam<DTypeLayoutParam> {};
TEST_P(AddRmsNormConformance, MatchesDoubleReference) {
  const auto& [backend, dtype, layout] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  for (const Shape& shape : kRowShapes) {
    SCOPED_TRACE(shape.to_string());
    const int64_t n = shape[shape.rank() - 1];
    const auto xv = random_values(shape.numel(), dtype, 400 + n, -2, 2);
    const auto rv = random_values(shape.numel(), dtype, 401 + n, -2, 2);
    const auto wv = random_values(n, dtype, 402 + n, 0.5, 1.5);
    const Tensor x = make_tensor(xv, shape, dtype, *device, layout);
    const Tensor r = make_tensor(rv, shape, dtype, *device, Layout::Contiguous);
    const Tensor w = make_tensor(wv, {n}, dtype, *device);
    poison_allocations(*device, bytes_of(shape, dtype), 8);
    const auto [sum, norm] = ops::add_rms_norm(x, r, w, 1e-6f);
    ASSERT_EQ(sum.shape(), shape);
    ASSERT_EQ(norm.shape(), shape);
    // The sum is stored in the dtype, and the norm is of the stored sum.
    std::vector<double> want_sum(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) want_sum[i] = round_to_dtype(xv[i] + rv[i], dtype);
    const auto want_norm = norm_reference(want_sum, n, &wv, nullptr, (double)1e-6f, true);
    EXPECT_TRUE(all_close(to_doubles(sum), want_sum, default_tolerance(dtype)));
    EXPECT_TRUE(all_close(to_doubles(norm), want_norm, default_tolerance(dtype)));
  }
}
INSTANTIATE_TEST_SUITE_P(Ops, AddRmsNormConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFloatDTypes), ::testing::ValuesIn(kLayouts)),
                         dtype_layout_name);
RBEE_CONFORMANCE_SUITE(AddRmsNorm, AddRmsNormConformance);

// ---------------------------------------------------------------------------------------------------- swiglu
class SwigluConformance : public ::testing::TestWithParam<DTypeLayoutParam> {};
TEST_P(SwigluConformance, MatchesDoubleReference) {
  const auto& [backend, dtype, layout] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  for (const Shape& shape : kRowShapes) {
    SCOPED_TRACE(shape.to_string());
    auto gv = random_values(shape.numel(), dtype, 500, -8, 8);
    gv[0] = round_to_dtype(-95.0, dtype);  // exp(-g) beyond f32 range: silu -> -0
    gv[1] = round_to_dtype(95.0, dtype);
    const auto uv = random_values(shape.numel(), dtype, 501, -2, 2);
    const Tensor g = make_tensor(gv, shape, dtype, *device, layout);
    const Tensor u = make_tensor(uv, shape, dtype, *device, Layout::Transposed);
    poison_allocations(*device, bytes_of(shape, dtype));
    const Tensor out = ops::swiglu(g, u);
    ASSERT_EQ(out.shape(), shape);
    std::vector<double> want(gv.size());
    for (size_t i = 0; i < gv.size(); ++i) want[i] = gv[i] / (1 + std::exp(-gv[i])) * uv[i];
    Tolerance tol = default_tolerance(dtype);
    if (dtype == DType::F32) tol = {2e-6, 2e-5};  // SIMD exp and a division, as for the unary functions
    EXPECT_TRUE(all_close(to_doubles(out), want, tol));
  }
}
INSTANTIATE_TEST_SUITE_P(Ops, SwigluConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFloatDTypes), ::testing::ValuesIn(kLayouts)),
                         dtype_layout_name);
RBEE_CONFORMANCE_SUITE(Swiglu, SwigluConformance);

// ----------------------------------------------------------------------------------------------------- geglu
class GegluConformance : public ::testing::TestWithParam<DTypeLayoutParam> {};
TEST_P(GegluConformance, MatchesDoubleReference) {
  const auto& [backend, dtype, layout] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  // [..., 2F]: odd F (element by element on GPUs), F a multiple of 8 (16-byte vectors), SD's 64x64 rows at width
  // 2 x 1280 (fewer rows), rank 3, one feature.
  for (const Shape& shape : {Shape{5, 2 * 37}, Shape{9, 2 * 64}, Shape{33, 2 * 1280}, Shape{2, 7, 2 * 24}, Shape{1, 2}}) {
    SCOPED_TRACE(shape.to_string());
    const int64_t f = shape.at(-1) / 2, rows = shape.numel() / (2 * f);
    auto xv = random_values(shape.numel(), dtype, 510, -5, 5);
    xv[(size_t)f] = round_to_dtype(-30.0, dtype);  // gates far in the tails: gelu -> -0 and the gate itself
    if (rows > 1) xv[(size_t)(3 * f)] = round_to_dtype(30.0, dtype);
    const Tensor x = make_tensor(xv, shape, dtype, *device, layout);
    Shape out_shape = shape;
    out_shape[out_shape.rank() - 1] = f;
    poison_allocations(*device, bytes_of(out_shape, dtype));
    const Tensor out = ops::geglu(x);
    ASSERT_EQ(out.shape(), out_shape);
    std::vector<double> want((size_t)(rows * f));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < f; ++i) {
        const double h = xv[(size_t)(r * 2 * f + i)], g = xv[(size_t)(r * 2 * f + f + i)];
        want[(size_t)(r * f + i)] = h * 0.5 * g * (1 + std::erf(g / std::sqrt(2.0)));
      }
    }
    Tolerance tol = default_tolerance(dtype);
    if (dtype == DType::F32) tol = {2e-6, 2e-5};  // erff and a product, as for the unary functions
    EXPECT_TRUE(all_close(to_doubles(out), want, tol));
  }
}
INSTANTIATE_TEST_SUITE_P(Ops, GegluConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFloatDTypes), ::testing::ValuesIn(kLayouts)),
                         dtype_layout_name);
RBEE_CONFORMANCE_SUITE(Geglu, GegluConformance);

// ------------------------------------------------------------------------------------------------------ rope
// How the rope input is laid out: [N, H, D] contiguous; [N, H, D] cut out of a fused [N, H, 3, D] qkv buffer
// (head stride 3D);
// [B, T, H, D] heads cut out of [B, T, 2H, D] (leading dims merge into a strided view); [B, T, H, D] permuted
// from [T, B, H, D] storage (leading dims do not merge).
enum class RopeLayout { Contiguous, HeadSlice, Batched, BatchPermuted };
const char* rope_layout_name(RopeLayout l) {
  switch (l) {
    case RopeLayout::Contiguous: return "contiguous";
    case RopeLayout::HeadSlice: return "head_slice";
    case RopeLayout::Batched: return "batched";
    case RopeLayout::BatchPermuted: return "batch_permuted";
  }
  return "?";
}

// x holds logical values of [B*T, H, D] (row-major); returns the tensor in the requested layout.
Tensor make_rope_input(const std::vector<double>& x, int64_t batch, int64_t steps, int64_t heads, int64_t dim,
                       DType dtype, Device& device, RopeLayout layout) {
  const int64_t tokens = batch * steps;
  switch (layout) {
    case RopeLayout::Contiguous: return make_tensor(x, {tokens, heads, dim}, dtype, device);
    case RopeLayout::HeadSlice: {
      std::vector<double> fused((size_t)(tokens * heads * 3 * dim), 1e4);  // q and v parts: values that would show
      for (int64_t n = 0; n < tokens; ++n)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t d = 0; d < dim; ++d) fused[((n * heads + h) * 3 + 1) * dim + d] = x[(n * heads + h) * dim + d];
      return make_tensor(fused, {tokens, heads, 3, dim}, dtype, device).select(2, 1);
    }
    case RopeLayout::Batched: {
      std::vector<double> wide((size_t)(tokens * 2 * heads * dim), 1e4);
      for (int64_t n = 0; n < tokens; ++n)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t d = 0; d < dim; ++d) wide[(n * 2 * heads + h) * dim + d] = x[(n * heads + h) * dim + d];
      return make_tensor(wide, {batch, steps, 2 * heads, dim}, dtype, device).narrow(2, 0, heads);
    }
    case RopeLayout::BatchPermuted: {
      std::vector<double> stored(x.size());
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t t = 0; t < steps; ++t)
          for (int64_t hd = 0; hd < heads * dim; ++hd)
            stored[(t * batch + b) * heads * dim + hd] = x[(b * steps + t) * heads * dim + hd];
      return make_tensor(stored, {steps, batch, heads, dim}, dtype, device).permute({1, 0, 2, 3});
    }
  }
  return {};
}

// x [N, H, D] row-major; pairs (2i, 2i+1) (Normal) or (i, i + rot/2) (Neox) rotate by positions[n] * freq[i].
std::vector<double> rope_reference(const std::vector<double>& x, const std::vector<double>& positions,
                                   const std::vector<float>& freq, int64_t heads, int64_t dim, int64_t rot,
                                   RopeMode mode, double mscale) {
  std::vector<double> out(x);  // dims past rotary_dim pass through
  const int64_t half = rot / 2;
  for (size_t n = 0; n < positions.size(); ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      const double* src = x.data() + ((int64_t)n * heads + h) * dim;
      double* dst = out.data() + ((int64_t)n * heads + h) * dim;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = positions[n] * (double)freq[(size_t)i];
        const double cs = std::cos(angle) * mscale, sn = std::sin(angle) * mscale;
        const int64_t a = mode == RopeMode::Normal ? 2 * i : i;
        const int64_t b = mode == RopeMode::Normal ? 2 * i + 1 : i + half;
        dst[a] = src[a] * cs - src[b] * sn;
        dst[b] = src[b] * cs + src[a] * sn;
      }
    }
  }
  return out;
}

using RopeParam = std::tuple<std::string, DType, RopeMode, RopeLayout>;
class RopeConformance : public ::testing::TestWithParam<RopeParam> {};

TEST_P(RopeConformance, MatchesDoubleReference) {
  const auto& [backend, dtype, mode, layout] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  struct Case {
    int64_t batch, steps, heads, dim;
    int rotary_dim;  // 0: the whole head
    float mscale;
    int max_position;
  };
  const Case cases[] = {
      {2, 20, 8, 64, 0, 1.0f, 5000},       // several threads' worth of tokens
      {1, 7, 3, 40, 24, 1.25f, 100000},    // partial rotary, mscale, large positions
      {2, 3, 2, 18, 18, 0.75f, 300},       // head dim not a multiple of the vector length
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("dim " + std::to_string(c.dim) + " rotary " + std::to_string(c.rotary_dim));
    const int64_t tokens = c.batch * c.steps;
    const int64_t rot = c.rotary_dim == 0 ? c.dim : c.rotary_dim, half = rot / 2;
    const auto xv = random_values(tokens * c.heads * c.dim, dtype, 600 + c.dim, -1, 1);
    const auto posv = random_values(tokens, DType::I32, 601 + c.dim, 0, c.max_position);
    const Tensor x = make_rope_input(xv, c.batch, c.steps, c.heads, c.dim, dtype, *device, layout);
    const bool batched = layout == RopeLayout::Batched || layout == RopeLayout::BatchPermuted;
    const Tensor positions =
        make_tensor(posv, batched ? Shape{c.batch, c.steps} : Shape{tokens}, DType::I32, *device);
    const std::vector<float> freq = ops::rope_inv_freq((int)rot, 10000.0f, {});
    const Tensor inv_freq = Tensor::from_vector(freq, {half}, *device);
    RopeParams params;
    params.mode = mode;
    params.rotary_dim = c.rotary_dim;
    params.mscale = c.mscale;
    poison_allocations(*device, bytes_of(x.shape(), dtype));
    const Tensor out = ops::rope(x, positions, inv_freq, params);
    ASSERT_EQ(out.shape(), x.shape());

    const auto want = rope_reference(xv, posv, freq, c.heads, c.dim, rot, mode, c.mscale);
    Tolerance tol = default_tolerance(dtype);
    if (dtype == DType::F32) tol = {2e-6, 1e-5};  // f32 sin/cos of the reduced angle
    EXPECT_TRUE(all_close(to_doubles(out), want, tol));
  }
}
INSTANTIATE_TEST_SUITE_P(Ops, RopeConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFloatDTypes),
                                            ::testing::Values(RopeMode::Normal, RopeMode::Neox),
                                            ::testing::Values(RopeLayout::Contiguous, RopeLayout::HeadSlice,
                                                              RopeLayout::Batched, RopeLayout::BatchPermuted)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param))) +
                                  (std::get<2>(info.param) == RopeMode::Normal ? "_normal_" : "_neox_") +
                                  rope_layout_name(std::get<3>(info.param));
                         });
RBEE_CONFORMANCE_SUITE(Rope, RopeConformance);

// llama.cpp's angles (RopeParams::freq_ratio): pair i of a token at position p turns by the f32 running product
// p * r * ... * r (i factors), r = powf(base, -2 / rotary_dim); reference cos/sin in double of that f32 angle.
// inv_freq holds NaN: the op must not read it. Positions up to 100000 make the running product differ from
// p * r^i by up to ~1e-2 rad, far outside the tolerance, so the table's angles would fail here.
TEST_P(RopeConformance, LlamaCppAngles) {
  const auto& [backend, dtype, mode, layout] = GetParam();
  if (layout != RopeLayout::Contiguous) GTEST_SKIP() << "angles do not depend on the layout";
  RBEE_REQUIRE_DEVICE(backend, device);
  const int64_t tokens = 24, heads = 3, dim = 64, rot = 48, half = rot / 2;
  const auto xv = random_values(tokens * heads * dim, dtype, 700, -1, 1);
  auto posv = random_values(tokens, DType::I32, 701, 0, 100000);
  posv[0] = 0;
  posv[1] = 1;
  const Tensor x = make_tensor(xv, {tokens, heads, dim}, dtype, *device);
  const Tensor positions = make_tensor(posv, {tokens}, DType::I32, *device);
  const Tensor inv_freq = ops::full({half}, std::nan(""), DType::F32, *device);
  RopeParams params;
  params.mode = mode;
  params.rotary_dim = (int)rot;
  params.mscale = 0.75f;
  params.freq_ratio = std::pow(10000.0f, -2.0f / (float)rot);
  poison_allocations(*device, bytes_of(x.shape(), dtype));
  const Tensor out = ops::rope(x, positions, inv_freq, params);

  std::vector<double> want(xv);
  for (int64_t n = 0; n < tokens; ++n) {
    float angle = (float)posv[(size_t)n];
    for (int64_t i = 0; i < half; ++i, angle *= params.freq_ratio) {
      const double cs = std::cos((double)angle) * 0.75, sn = std::sin((double)angle) * 0.75;
      for (int64_t h = 0; h < heads; ++h) {
        const double* src = xv.data() + (n * heads + h) * dim;
        double* dst = want.data() + (n * heads + h) * dim;
        const int64_t a = mode == RopeMode::Normal ? 2 * i : i;
        const int64_t b = mode == RopeMode::Normal ? 2 * i + 1 : i + half;
        dst[a] = src[a] * cs - src[b] * sn;
        dst[b] = src[b] * cs + src[a] * sn;
      }
    }
  }
  Tolerance tol = default_tolerance(dtype);
  if (dtype == DType::F32) tol = {2e-6, 1e-5};  // f32 cos/sin of the same f32 angle
  EXPECT_TRUE(all_close(to_doubles(out), want, tol));
}

// ------------------------------------------------------------------------------------------- rope_inv_freq
// Expected tables, restated from the published descriptions (Llama 3.1 release code, the YaRN paper's
// reference implementation as Hugging Face ships it) in terms of each pair's frequency.
std::vector<double> base_frequencies(int dim, double theta) {
  std::vector<double> f((size_t)dim / 2);
  for (int i = 0; i < dim / 2; ++i) f[(size_t)i] = 1.0 / std::pow(theta, (2.0 * i) / dim);
  return f;
}

::testing::AssertionResult close_to_table(const std::vector<float>& got, const std::vector<double>& want) {
  std::vector<double> g(got.begin(), got.end());
  return all_close(g, want, {0, 3e-7});  // the table is f32: a rounding of the double value
}

TEST(RopeInvFreq, DefaultIsThetaPowers) {
  const auto got = ops::rope_inv_freq(128, 10000.0f, {});
  ASSERT_EQ(got.size(), 64u);
  EXPECT_FLOAT_EQ(got[0], 1.0f);
  EXPECT_NEAR(got[63], std::pow(10000.0, -126.0 / 128.0), 1e-7 * got[63]);
  EXPECT_TRUE(close_to_table(got, base_frequencies(128, 10000.0)));
}

TEST(RopeInvFreq, LinearDividesByFactor) {
  ops::RopeScaling s;
  s.kind = ops::RopeScaling::Kind::Linear;
  s.factor = 4.0f;
  auto want = base_frequencies(64, 500000.0);
  for (double& f : want) f /= 4.0;
  EXPECT_TRUE(close_to_table(ops::rope_inv_freq(64, 500000.0f, s), want));
}

TEST(RopeInvFreq, Llama3SmoothsBetweenBands) {
  // Llama 3.1 8B: theta 500000, head dim 128, factor 8, low 1, high 4, original context 8192.
  ops::RopeScaling s;
  s.kind = ops::RopeScaling::Kind::Llama3;
  s.factor = 8.0f;
  s.low_freq_factor = 1.0f;
  s.high_freq_factor = 4.0f;
  s.original_max_position = 8192;
  const auto got = ops::rope_inv_freq(128, 500000.0f, s);
  const auto base = base_frequencies(128, 500000.0);
  std::vector<double> want(base.size());
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    // In turns over the original context: >= high_freq_factor turns keeps the frequency, <= low_freq_factor
    // turns divides it by factor, and in between the weight of the kept frequency grows linearly with turns.
    const double turns = 8192.0 * base[i] / (2 * std::numbers::pi);
    if (turns > 4.0) {
      want[i] = base[i];
      ++kept;
    } else if (turns < 1.0) {
      want[i] = base[i] / 8.0;
      ++divided;
    } else {
      const double keep = (turns - 1.0) / (4.0 - 1.0);
      want[i] = keep * base[i] + (1 - keep) * base[i] / 8.0;
      ++blended;
    }
  }
  EXPECT_TRUE(close_to_table(got, want));
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);  // all three bands are exercised
  EXPECT_FLOAT_EQ(got[0], 1.0f);
  EXPECT_NEAR(got[63], std::pow(500000.0, -126.0 / 128.0) / 8.0, 1e-7 * got[63]);
}

TEST(RopeInvFreq, YarnRampsBetweenCorrectionDims) {
  // A Qwen2/DeepSeek-like setup: theta 10000, rotary dim 64, factor 4, original context 4096, beta 32 / 1.
  ops::RopeScaling s;
  s.kind = ops::RopeScaling::Kind::Yarn;
  s.factor = 4.0f;
  s.original_max_position = 4096;
  s.beta_fast = 32.0f;
  s.beta_slow = 1.0f;
  const int dim = 64;
  const double theta = 10000.0;
  const auto got = ops::rope_inv_freq(dim, (float)theta, s);
  const auto base = base_frequencies(dim, theta);
  // The pair index at which a frequency turns `beta` times over the original context solves
  // 4096 * theta^(-2i/dim) = 2 pi beta; the ramp runs from the fast bound (rounded down) to the slow bound
  // (rounded up), frequencies before it are kept and after it divided by the factor.
  auto pair_at_turns = [&](double beta) { return dim / 2.0 * std::log(4096.0 / (2 * std::numbers::pi * beta)) / std::log(theta); };
  const double lo = std::floor(pair_at_turns(32.0)), hi = std::ceil(pair_at_turns(1.0));
  ASSERT_LT(0, lo);
  ASSERT_LT(hi, dim / 2 - 1);
  std::vector<double> want(base.size());
  for (size_t i = 0; i < base.size(); ++i) {
    const double t = std::min(1.0, std::max(0.0, ((double)i - lo) / (hi - lo)));
    want[i] = (1 - t) * base[i] + t * base[i] / 4.0;
  }
  EXPECT_TRUE(close_to_table(got, want));
  EXPECT_FLOAT_EQ(got[0], 1.0f);                                  // fastest pair kept
  EXPECT_NEAR(got[31], base[31] / 4.0, 1e-7 * base[31]);          // slowest pair interpolated
}

// ------------------------------------------------------------------------------------------------- attention
struct AttnCase {
  const char* name;
  int64_t batch, q_heads, kv_heads, tq, tk, dim, dim_v;
  bool causal;
  int window;
  float softcap;
  float scale;  // 0: 1 / sqrt(dim)
};
const AttnCase kAttnCases[] = {
    {"full", 2, 3, 3, 37, 37, 16, 16, false, 0, 0, 0},
    {"causal_prefill", 1, 2, 2, 75, 75, 32, 32, true, 0, 0, 0},
    {"causal_chunk_gqa", 1, 4, 2, 20, 90, 24, 24, true, 0, 0, 0},
    {"gqa_window", 2, 6, 2, 100, 100, 16, 16, true, 17, 0, 0},
    {"window_noncausal", 1, 2, 1, 9, 70, 8, 8, false, 20, 0, 0},
    {"softcap", 1, 2, 2, 33, 70, 24, 24, true, 0, 5.0f, 1.5f},
    {"decode_split", 1, 8, 2, 1, 700, 64, 48, true, 0, 0, 0},
    {"decode_split_window", 1, 4, 1, 1, 600, 32, 32, true, 300, 0, 0},
    {"decode_batch", 3, 4, 4, 1, 300, 32, 32, true, 0, 0, 0},
    {"queries_past_keys", 1, 2, 1, 10, 6, 16, 16, true, 0, 0, 0},
    {"odd_dims", 1, 3, 1, 5, 9, 13, 7, false, 0, 0, 0.7f},
    {"head_dim_128", 1, 4, 2, 40, 40, 128, 128, true, 0, 0, 0},    // GPU: more columns per thread
    {"head_dim_256_decode", 1, 2, 1, 1, 300, 256, 256, true, 0, 0, 0},  // GPU: smallest tiles (f64)
    {"head_dim_200_chunks", 1, 2, 1, 3, 90, 200, 72, true, 0, 0, 0},    // GPU f64: q.k in chunks 64,64,64,8
    // Unmasked (Stable Diffusion): 16-bit GPU inputs of 16 queries or more and head sizes of multiples of 8 up to
    // 160 take the tensor-core flash kernel (attention_flash.cu; tiles of 48, 64, 80, 128, 160 columns), others
    // of 32 queries and keys or more the BLAS path (attention_gemm.cu; RBEE_ATTN_FLASH=0 sends all there).
    {"sd_self_dim40", 2, 8, 8, 96, 96, 40, 40, false, 0, 0, 0},
    {"sd_cross_dim80", 1, 4, 4, 100, 77, 80, 80, false, 0, 0, 0},
    {"gqa_long_dim160", 1, 4, 2, 64, 50, 160, 160, false, 0, 0, 0},
    // With RBEE_ATTN_FLASH=0: the BLAS path's 2 query chunks, and rows past the softmax's registers.
    {"long_query_chunks", 1, 1, 1, 2100, 4000, 8, 8, false, 0, 0, 0},
    {"long_rows_9000", 1, 1, 1, 40, 9000, 8, 8, false, 0, 0, 0},
    {"sd_self_odd_t_dim40", 1, 8, 8, 133, 133, 40, 40, false, 0, 0, 0},   // flash: partial row and key tiles
    {"sd_cross_77_odd_t_dim160", 2, 2, 2, 201, 77, 160, 160, false, 0, 0, 0},
    {"sdxl_cross_dim64", 2, 4, 4, 130, 77, 64, 64, false, 0, 0, 0},
    {"gqa_dim128_scaled", 1, 4, 1, 40, 300, 128, 128, false, 0, 0, 0.3f},
    {"pad_dim24_few_rows", 1, 2, 2, 17, 33, 24, 24, false, 0, 0, 0},    // flash: 24 of 48 columns, one key tile
    {"gemm_dim36", 1, 2, 2, 64, 70, 36, 36, false, 0, 0, 0},            // 36 % 8 != 0: the BLAS path
};

// q/k/v layouts: contiguous [B, H, T, D]; permuted from [B, T, H, D] storage (the usual projection output);
// a window of a longer [B, H, T + 13, D] cache starting at position 5; transposed last two axes (copied).
enum class AttnLayout { Contiguous, Permuted, CacheView, Transposed };
const char* attn_layout_name(AttnLayout l) {
  switch (l) {
    case AttnLayout::Contiguous: return "contiguous";
    case AttnLayout::Permuted: return "permuted";
    case AttnLayout::CacheView: return "cache_view";
    case AttnLayout::Transposed: return "transposed";
  }
  return "?";
}

// values: logical [B, H, T, D] row-major.
Tensor make_attn_input(const std::vector<double>& values, int64_t b, int64_t h, int64_t t, int64_t d, DType dtype,
                       Device& device, AttnLayout layout) {
  switch (layout) {
    case AttnLayout::Contiguous: return make_tensor(values, {b, h, t, d}, dtype, device);
    case AttnLayout::Transposed: return make_tensor(values, {b, h, t, d}, dtype, device, Layout::Transposed);
    case AttnLayout::Permuted: {
      std::vector<double> stored(values.size());
      for (int64_t ib = 0; ib < b; ++ib)
        for (int64_t ih = 0; ih < h; ++ih)
          for (int64_t it = 0; it < t; ++it)
            for (int64_t id = 0; id < d; ++id)
              stored[((ib * t + it) * h + ih) * d + id] = values[((ib * h + ih) * t + it) * d + id];
      return make_tensor(stored, {b, t, h, d}, dtype, device).permute({0, 2, 1, 3});
    }
    case AttnLayout::CacheView: {
      const int64_t cap = t + 13, start = 5;
      std::vector<double> stored((size_t)(b * h * cap * d), 1e3);  // entries outside the view would dominate
      for (int64_t bh = 0; bh < b * h; ++bh)
        for (int64_t it = 0; it < t; ++it)
          for (int64_t id = 0; id < d; ++id) stored[(bh * cap + start + it) * d + id] = values[(bh * t + it) * d + id];
      return make_tensor(stored, {b, h, cap, d}, dtype, device).narrow(2, start, t);
    }
  }
  return {};
}

// Explicit masked softmax(q k^T * scale) v per (batch, head, query).
std::vector<double> attention_reference(const AttnCase& c, double scale, const std::vector<double>& q,
                                        const std::vector<double>& k, const std::vector<double>& v) {
  std::vector<double> out((size_t)(c.batch * c.q_heads * c.tq * c.dim_v), 0.0);
  const int64_t group = c.q_heads / c.kv_heads;
  std::vector<double> score((size_t)c.tk);
  std::vector<bool> seen((size_t)c.tk);
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.q_heads; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < c.tq; ++i) {
        const int64_t pos = c.tk - c.tq + i;
        double max = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < c.tk; ++j) {
          seen[j] = (!c.causal || j <= pos) && (c.window == 0 || j > pos - c.window);
          if (!seen[j]) continue;
          double dot = 0;
          for (int64_t d = 0; d < c.dim; ++d) {
            dot += q[(((b * c.q_heads + h) * c.tq + i) * c.dim) + d] * k[(((b * c.kv_heads + hk) * c.tk + j) * c.dim) + d];
          }
          double s = dot * scale;
          if (c.softcap > 0) s = c.softcap * std::tanh(s / c.softcap);
          score[j] = s;
          max = std::max(max, s);
        }
        double total = 0;
        for (int64_t j = 0; j < c.tk; ++j) {
          if (!seen[j]) continue;
          score[j] = std::exp(score[j] - max);
          total += score[j];
        }
        double* dst = out.data() + ((b * c.q_heads + h) * c.tq + i) * c.dim_v;
        if (total == 0) continue;  // nothing visible: zeros
        for (int64_t j = 0; j < c.tk; ++j) {
          if (!seen[j]) continue;
          for (int64_t d = 0; d < c.dim_v; ++d) {
            dst[d] += score[j] / total * v[(((b * c.kv_heads + hk) * c.tk + j) * c.dim_v) + d];
          }
        }
      }
    }
  }
  return out;
}

using AttnParam = std::tuple<std::string, DType, AttnLayout, int>;
class AttentionConformance : public ::testing::TestWithParam<AttnParam> {};

// Runs case `case_index` of kAttnCases and compares with attention_reference.
::testing::AssertionResult check_attention(Device& device, int case_index, DType dtype, AttnLayout layout) {
  const AttnCase& c = kAttnCases[case_index];
  const double scale = c.scale > 0 ? (double)c.scale : 1.0 / std::sqrt((double)c.dim);
  const auto qv = random_values(c.batch * c.q_heads * c.tq * c.dim, dtype, 700 + case_index, -1, 1);
  const auto kv = random_values(c.batch * c.kv_heads * c.tk * c.dim, dtype, 800 + case_index, -1, 1);
  const auto vv = random_values(c.batch * c.kv_heads * c.tk * c.dim_v, dtype, 900 + case_index, -1, 1);
  const Tensor q = make_attn_input(qv, c.batch, c.q_heads, c.tq, c.dim, dtype, device, layout);
  const Tensor k = make_attn_input(kv, c.batch, c.kv_heads, c.tk, c.dim, dtype, device, layout);
  const Tensor v = make_attn_input(vv, c.batch, c.kv_heads, c.tk, c.dim_v, dtype, device, layout);
  AttentionParams params;
  params.scale = (float)scale;
  params.causal = c.causal;
  params.window = c.window;
  params.softcap = c.softcap;
  const Shape out_shape{c.batch, c.q_heads, c.tq, c.dim_v};
  poison_allocations(device, bytes_of(out_shape, dtype));
  const Tensor out = ops::attention(q, k, v, params);
  if (out.shape() != out_shape || out.dtype() != dtype) {
    return ::testing::AssertionFailure() << "output is " << out.to_string() << ", expected " << out_shape.to_string();
  }
  const auto want = attention_reference(c, (double)params.scale, qv, kv, vv);
  Tolerance tol = default_tolerance(dtype);
  if (dtype == DType::F32) tol = {2e-6, 2e-5};  // SIMD exp and sums over hundreds of keys in f32
  return all_close(to_doubles(out), want, tol);
}

TEST_P(AttentionConformance, MatchesExplicitSoftmaxReference) {
  const auto& [backend, dtype, layout, case_index] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  EXPECT_TRUE(check_attention(*device, case_index, dtype, layout));
}

INSTANTIATE_TEST_SUITE_P(Ops, AttentionConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFloatDTypes),
                                            ::testing::Values(AttnLayout::Contiguous, AttnLayout::Permuted,
                                                              AttnLayout::CacheView, AttnLayout::Transposed),
                                            ::testing::Range(0, (int)std::size(kAttnCases))),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param))) +
                                  "_" + attn_layout_name(std::get<2>(info.param)) + "_" +
                                  kAttnCases[std::get<3>(info.param)].name;
                         });
RBEE_CONFORMANCE_SUITE(Attention, AttentionConformance);

// ----------------------------------------------------------------------------- attention into a caller's view
// ops::attention(q, k, v, params, out) with q / k / v head views of [B, T, H * D] projections and out a head view of
// [B, Tq, H * D] storage: what sd::nn::mha does so that no transpose follows. SD shapes (head sizes 40, 64, 80, 160;
// 77 text keys) take cuDNN or the flash kernel on CUDA, the small and masked ones the generic kernel, dim 36 the BLAS
// path (RBEE_ATTN_FLASH=0 sends more there).
struct AttnIntoCase {
  const char* name;
  int64_t batch, heads, tq, tk, dim;
  bool causal;
};
const AttnIntoCase kAttnIntoCases[] = {
    {"sd_self_dim40", 2, 8, 96, 96, 40, false},
    {"sd_cross_77_odd_t_dim40", 1, 8, 133, 77, 40, false},
    {"sd_self_dim80", 1, 4, 100, 100, 80, false},
    {"sd_cross_77_dim80", 2, 4, 64, 77, 80, false},
    {"sd_self_odd_t_dim160", 1, 2, 70, 70, 160, false},
    {"sd_cross_77_dim160", 2, 2, 33, 77, 160, false},
    {"sdxl_self_dim64", 2, 4, 130, 130, 64, false},
    {"sdxl_cross_77_dim64", 2, 4, 130, 77, 64, false},
    {"clip_causal_dim64", 1, 4, 77, 77, 64, true},   // the text encoders' causal self-attention
    {"few_queries_dim16", 1, 2, 5, 7, 16, false},    // GPU: the generic kernel
    {"gemm_dim36", 1, 2, 64, 70, 36, false},         // GPU: the BLAS path (36 % 8 != 0)
    {"odd_dim13", 2, 3, 9, 11, 13, false},
};

// FusedProjection: self-attention reads q, k, v from one [B, T, 3 * H * D] tensor, cross-attention q from
// [B, Tq, H * D] and k, v from one [B, Tk, 2 * H * D]; out [B, Tq, H * D]. PaddedRows: q, k, v and out each in
// [B, T, H * D + 8] storage (rows longer than the heads; out's 8 extra columns must stay untouched).
enum class AttnIntoLayout { FusedProjection, PaddedRows };

// Storage [B, T, width] holding logical [B, H, T, D] values at column offset col0 (head h at col0 + h * D); the
// other entries are `fill`.
std::vector<double> interleave_heads(const std::vector<double>& values, int64_t b, int64_t h, int64_t t, int64_t d,
                                     int64_t width, int64_t col0, std::vector<double> storage) {
  for (int64_t ib = 0; ib < b; ++ib)
    for (int64_t ih = 0; ih < h; ++ih)
      for (int64_t it = 0; it < t; ++it)
        for (int64_t id = 0; id < d; ++id)
          storage[(size_t)((ib * t + it) * width + col0 + ih * d + id)] = values[(size_t)(((ib * h + ih) * t + it) * d + id)];
  return storage;
}

// The [B, H, T, D] view of heads starting at column col0 of [B, T, width] storage.
Tensor heads_of(const Tensor& storage, int64_t h, int64_t d, int64_t col0) {
  const int64_t b = storage.dim(0), t = storage.dim(1), width = storage.dim(2);
  return storage.as_strided({b, h, t, d}, {t * width, d, width, 1}, storage.offset() + col0);
}

using AttnIntoParam = std::tuple<std::string, DType, AttnIntoLayout, int>;
class AttentionIntoViewConformance : public ::testing::TestWithParam<AttnIntoParam> {};

::testing::AssertionResult check_attention_into(Device& device, int case_index, DType dtype, AttnIntoLayout layout) {
  const AttnIntoCase& c = kAttnIntoCases[case_index];
  const AttnCase ref{c.name, c.batch, c.heads, c.heads, c.tq, c.tk, c.dim, c.dim, c.causal, 0, 0, 0};
  const int64_t C = c.heads * c.dim;
  const auto qv = random_values(c.batch * c.heads * c.tq * c.dim, dtype, 1700 + case_index, -1, 1);
  const auto kv = random_values(c.batch * c.heads * c.tk * c.dim, dtype, 1800 + case_index, -1, 1);
  const auto vv = random_values(c.batch * c.heads * c.tk * c.dim, dtype, 1900 + case_index, -1, 1);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor q, k, v, out_storage;
  const int64_t pad = layout == AttnIntoLayout::PaddedRows ? 8 : 0;
  if (layout == AttnIntoLayout::FusedProjection && c.tq == c.tk) {
    std::vector<double> qkv((size_t)(c.batch * c.tq * 3 * C), 0.0);
    qkv = interleave_heads(qv, c.batch, c.heads, c.tq, c.dim, 3 * C, 0, std::move(qkv));
    qkv = interleave_heads(kv, c.batch, c.heads, c.tk, c.dim, 3 * C, C, std::move(qkv));
    qkv = interleave_heads(vv, c.batch, c.heads, c.tk, c.dim, 3 * C, 2 * C, std::move(qkv));
    const Tensor fused = make_tensor(qkv, {c.batch, c.tq, 3 * C}, dtype, device);
    q = heads_of(fused, c.heads, c.dim, 0);
    k = heads_of(fused, c.heads, c.dim, C);
    v = heads_of(fused, c.heads, c.dim, 2 * C);
  } else if (layout == AttnIntoLayout::FusedProjection) {
    const auto qs =
        interleave_heads(qv, c.batch, c.heads, c.tq, c.dim, C, 0, std::vector<double>((size_t)(c.batch * c.tq * C)));
    std::vector<double> kvs((size_t)(c.batch * c.tk * 2 * C), 0.0);
    kvs = interleave_heads(kv, c.batch, c.heads, c.tk, c.dim, 2 * C, 0, std::move(kvs));
    kvs = interleave_heads(vv, c.batch, c.heads, c.tk, c.dim, 2 * C, C, std::move(kvs));
    q = heads_of(make_tensor(qs, {c.batch, c.tq, C}, dtype, device), c.heads, c.dim, 0);
    const Tensor fused_kv = make_tensor(kvs, {c.batch, c.tk, 2 * C}, dtype, device);
    k = heads_of(fused_kv, c.heads, c.dim, 0);
    v = heads_of(fused_kv, c.heads, c.dim, C);
  } else {
    auto padded = [&](const std::vector<double>& values, int64_t t) {
      const int64_t width = C + pad;
      const auto st = interleave_heads(values, c.batch, c.heads, t, c.dim, width, 0,
                                       std::vector<double>((size_t)(c.batch * t * width), 1e3));  // gaps would dominate
      return heads_of(make_tensor(st, {c.batch, t, width}, dtype, device), c.heads, c.dim, 0);
    };
    q = padded(qv, c.tq);
    k = padded(kv, c.tk);
    v = padded(vv, c.tk);
  }
  // Poisoned output storage: every element of the view must be written, the pad columns never.
  out_storage = make_tensor(std::vector<double>((size_t)(c.batch * c.tq * (C + pad)), nan), {c.batch, c.tq, C + pad},
                            dtype, device);
  Tensor out = heads_of(out_storage, c.heads, c.dim, 0);
  AttentionParams params;
  params.scale = (float)(1.0 / std::sqrt((double)c.dim));
  params.causal = c.causal;
  ops::attention(q, k, v, params, out);
  const auto want_heads = attention_reference(ref, (double)params.scale, qv, kv, vv);
  const auto got_storage = to_doubles(out_storage);
  std::vector<double> got(want_heads.size());
  for (int64_t ib = 0; ib < c.batch; ++ib)
    for (int64_t it = 0; it < c.tq; ++it)
      for (int64_t col = 0; col < C + pad; ++col) {
        const double x = got_storage[(size_t)((ib * c.tq + it) * (C + pad) + col)];
        if (col >= C) {
          if (!std::isnan(x)) {
            return ::testing::AssertionFailure() << "pad column " << col << " of row " << it << " was written: " << x;
          }
          continue;
        }
        const int64_t ih = col / c.dim, id = col % c.dim;
        got[(size_t)(((ib * c.heads + ih) * c.tq + it) * c.dim + id)] = x;
      }
  Tolerance tol = default_tolerance(dtype);
  if (dtype == DType::F32) tol = {2e-6, 2e-5};
  return all_close(got, want_heads, tol);
}

TEST_P(AttentionIntoViewConformance, MatchesExplicitSoftmaxReference) {
  const auto& [backend, dtype, layout, case_index] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  EXPECT_TRUE(check_attention_into(*device, case_index, dtype, layout));
}

INSTANTIATE_TEST_SUITE_P(Ops, AttentionIntoViewConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFloatDTypes),
                                            ::testing::Values(AttnIntoLayout::FusedProjection,
                                                              AttnIntoLayout::PaddedRows),
                                            ::testing::Range(0, (int)std::size(kAttnIntoCases))),
                         [](const auto& info) {
                           const bool fused = std::get<2>(info.param) == AttnIntoLayout::FusedProjection;
                           return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param))) +
                                  (fused ? "_fused_" : "_padded_") + kAttnIntoCases[std::get<3>(info.param)].name;
                         });
RBEE_CONFORMANCE_SUITE(Attention, AttentionIntoViewConformance);

// ------------------------------------------------------------------------------------------------ errors
class NnErrors : public ::testing::TestWithParam<std::string> {};

TEST_P(NnErrors, NormsRejectBadArguments) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  const Tensor x = ops::ones({4, 8}, DType::F32, *device);
  expect_invalid([&] { ops::rms_norm(x, ops::ones({7}, DType::F32, *device), 1e-5f); }, "weight");
  expect_invalid([&] { ops::rms_norm(x, ops::ones({8}, DType::F16, *device), 1e-5f); }, "weight");
  expect_invalid([&] { ops::rms_norm(x, Tensor(), -1.0f); }, "eps");
  expect_invalid([&] { ops::rms_norm(ops::ones({4, 8}, DType::I32, *device), Tensor(), 1e-5f); }, "rms_norm");
  expect_invalid([&] { ops::layer_norm(x, Tensor(), ops::ones({4, 8}, DType::F32, *device), 1e-5f); }, "bias");
  const Tensor img = ops::ones({2, 6, 3, 3}, DType::F32, *device);
  expect_invalid([&] { ops::group_norm(img, 4, Tensor(), Tensor(), 1e-5f); }, "groups");
  expect_invalid([&] { ops::group_norm(img, 0, Tensor(), Tensor(), 1e-5f); }, "groups");
  expect_invalid([&] { ops::group_norm(ops::ones({6}, DType::F32, *device), 2, Tensor(), Tensor(), 1e-5f); },
                 "[N, C, ...]");
  expect_invalid([&] { ops::group_norm(img, 3, ops::ones({3}, DType::F32, *device), Tensor(), 1e-5f); }, "weight");
  const Tensor w = ops::ones({8}, DType::F32, *device);
  expect_invalid([&] { ops::add_rms_norm(x, ops::ones({4, 7}, DType::F32, *device), w, 1e-5f); }, "residual");
  expect_invalid([&] { ops::add_rms_norm(x, x, Tensor(), 1e-5f); }, "weight");
  expect_invalid([&] { ops::swiglu(x, ops::ones({8, 4}, DType::F32, *device)); }, "shape");
  expect_invalid([&] { ops::swiglu(x, ops::ones({4, 8}, DType::F64, *device)); }, "swiglu");
  expect_invalid([&] { ops::geglu(ops::ones({4, 7}, DType::F32, *device)); }, "even last dimension");
}

TEST_P(NnErrors, RopeRejectsBadArguments) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  const Tensor x = ops::ones({3, 2, 16}, DType::F32, *device);
  const Tensor pos = ops::zeros({3}, DType::I32, *device);
  const auto f16_table = ops::rope_inv_freq(16, 10000.0f, {});
  const Tensor freq = Tensor::from_vector(f16_table, {8}, *device);
  RopeParams p;
  p.rotary_dim = 7;
  expect_invalid([&] { ops::rope(x, pos, freq, p); }, "rotary_dim");  // odd
  p.rotary_dim = 18;
  expect_invalid([&] { ops::rope(x, pos, freq, p); }, "rotary_dim");  // larger than the head
  p.rotary_dim = -2;
  expect_invalid([&] { ops::rope(x, pos, freq, p); }, "rotary_dim");
  p.rotary_dim = 8;
  expect_invalid([&] { ops::rope(x, pos, freq, p); }, "inv_freq");  // table is for 16 dims
  p.rotary_dim = 0;
  expect_invalid([&] { ops::rope(x, ops::zeros({3}, DType::I64, *device), freq, p); }, "positions");
  expect_invalid([&] { ops::rope(x, ops::zeros({4}, DType::I32, *device), freq, p); }, "positions");
  expect_invalid([&] { ops::rope(x, pos, ops::ones({8}, DType::F64, *device), p); }, "inv_freq");
  expect_invalid([&] { ops::rope(ops::ones({3, 16}, DType::F32, *device), pos, freq, p); }, "[..., N, H, D]");
  p.freq_ratio = -0.5f;
  expect_invalid([&] { ops::rope(x, pos, freq, p); }, "freq_ratio");
  p.freq_ratio = 2.0f;
  expect_invalid([&] { ops::rope(x, pos, freq, p); }, "freq_ratio");
  p.freq_ratio = std::numeric_limits<float>::quiet_NaN();
  expect_invalid([&] { ops::rope(x, pos, freq, p); }, "freq_ratio");
  p.freq_ratio = 0.f;

  expect_invalid([&] { ops::rope_inv_freq(15, 10000.0f, {}); }, "rotary_dim");
  expect_invalid([&] { ops::rope_inv_freq(16, 0.5f, {}); }, "theta_base");
  ops::RopeScaling s;
  s.kind = ops::RopeScaling::Kind::Llama3;
  s.low_freq_factor = 4.0f;
  s.high_freq_factor = 1.0f;
  expect_invalid([&] { ops::rope_inv_freq(16, 10000.0f, s); }, "low_freq_factor");
  s.kind = ops::RopeScaling::Kind::Yarn;
  s.beta_fast = 1.0f;
  s.beta_slow = 32.0f;
  expect_invalid([&] { ops::rope_inv_freq(16, 10000.0f, s); }, "beta");
  s.kind = ops::RopeScaling::Kind::Linear;
  s.factor = 0.0f;
  expect_invalid([&] { ops::rope_inv_freq(16, 10000.0f, s); }, "factor");
}

TEST_P(NnErrors, AttentionRejectsBadArguments) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  auto t = [&](Shape s, DType dt = DType::F32) { return ops::ones(s, dt, *device); };
  const Tensor q = t({1, 6, 3, 8}), k = t({1, 2, 5, 8}), v = t({1, 2, 5, 4});
  AttentionParams p;
  expect_invalid([&] { ops::attention(q, t({1, 4, 5, 8}), t({1, 4, 5, 4}), p); }, "multiple of kv heads");
  expect_invalid([&] { ops::attention(q, t({1, 2, 5, 7}), v, p); }, "head dim");
  expect_invalid([&] { ops::attention(q, k, t({1, 2, 6, 4}), p); }, "positions");
  expect_invalid([&] { ops::attention(q, k, t({1, 3, 5, 4}), p); }, "heads");
  expect_invalid([&] { ops::attention(q, t({2, 2, 5, 8}), t({2, 2, 5, 4}), p); }, "batch");
  expect_invalid([&] { ops::attention(t({6, 3, 8}), k, v, p); }, "[B, Hq, Tq, D]");
  expect_invalid([&] { ops::attention(q, k, t({1, 2, 5, 4}, DType::F16), p); }, "attention");
  expect_invalid([&] { ops::attention(t({1, 6, 3, 8}, DType::I32), t({1, 2, 5, 8}, DType::I32),
                                      t({1, 2, 5, 4}, DType::I32), p); },
                 "attention");
  AttentionParams bad = p;
  bad.window = -1;
  expect_invalid([&] { ops::attention(q, k, v, bad); }, "window");
  bad = p;
  bad.softcap = -2;
  expect_invalid([&] { ops::attention(q, k, v, bad); }, "softcap");
  bad = p;
  bad.scale = std::numeric_limits<float>::infinity();
  expect_invalid([&] { ops::attention(q, k, v, bad); }, "scale");
  // Into a caller's view: shape, dtype, last stride, overlap and aliasing.
  Tensor out = t({1, 6, 3, 4});
  expect_invalid([&] { Tensor o = t({1, 6, 3, 5}); ops::attention(q, k, v, p, o); }, "out must be");
  expect_invalid([&] { Tensor o = t({1, 6, 3, 4}, DType::F16); ops::attention(q, k, v, p, o); }, "out is");
  expect_invalid([&] { Tensor o = t({1, 6, 4, 3}).transpose(2, 3); ops::attention(q, k, v, p, o); }, "last axis");
  expect_invalid(
      [&] {
        Tensor o = t({1, 3, 4}).as_strided({1, 6, 3, 4}, {72, 0, 4, 1}, 0);
        ops::attention(q, k, v, p, o);
      },
      "overlap");
  expect_invalid([&] { Tensor o = q.narrow(3, 0, 4); ops::attention(q, k, v, p, o); }, "shares a buffer");
  ops::attention(q, k, v, p, out);  // the valid call goes through
}

INSTANTIATE_TEST_SUITE_P(Ops, NnErrors, ::testing::ValuesIn(conformance_backends()),
                         [](const auto& info) { return info.param; });

// ------------------------------------------------------------------------------------- every SIMD target
// The CPU kernels dispatch at run time to the best Highway target of this CPU; this runs the f32 kernels once
// per target compiled in and supported here (e.g. AVX2, SSE4 and the scalar fallback), so that the paths a
// different CPU would take are tested too.
TEST(NnSimdTargets, EveryCompiledTargetMatchesReference) {
  Device& device = cpu_device();
  const DType f32 = DType::F32;
  struct RestoreTargets {
    ~RestoreTargets() { hwy::SetSupportedTargetsForTest(0); }
  } restore;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    ASSERT_EQ(device.info().simd, std::string(hwy::TargetName(target)));  // the dispatch follows

    const Shape shape{5, 67};
    const auto xv = random_values(shape.numel(), f32, 1000, -2, 2);
    const auto wv = random_values(67, f32, 1001, 0.5, 1.5);
    const Tensor x = make_tensor(xv, shape, f32, device), w = make_tensor(wv, {67}, f32, device);
    EXPECT_TRUE(all_close(to_doubles(ops::rms_norm(x, w, 1e-5f)),
                          norm_reference(xv, 67, &wv, nullptr, (double)1e-5f, true), default_tolerance(f32)));
    EXPECT_TRUE(all_close(to_doubles(ops::layer_norm(x, w, w, 1e-5f)),
                          norm_reference(xv, 67, &wv, &wv, (double)1e-5f, false), default_tolerance(f32)));

    std::vector<double> gate_up(xv);
    std::vector<double> want_swiglu(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) want_swiglu[i] = 4 * xv[i] / (1 + std::exp(-4 * xv[i])) * xv[i];
    const Tensor g4 = make_tensor([&] { for (double& v : gate_up) v *= 4; return gate_up; }(), shape, f32, device);
    EXPECT_TRUE(all_close(to_doubles(ops::swiglu(g4, x)), want_swiglu, {2e-6, 2e-5}));

    const int64_t tokens = 7, heads = 3, dim = 40, rot = 24;
    const auto rv = random_values(tokens * heads * dim, f32, 1002, -1, 1);
    const auto posv = random_values(tokens, DType::I32, 1003, 0, 9000);
    const auto freq = ops::rope_inv_freq((int)rot, 10000.0f, {});
    const Tensor rx = make_tensor(rv, {tokens, heads, dim}, f32, device);
    const Tensor pos = make_tensor(posv, {tokens}, DType::I32, device);
    const Tensor inv_freq = Tensor::from_vector(freq, {rot / 2}, device);
    for (RopeMode mode : {RopeMode::Normal, RopeMode::Neox}) {
      RopeParams p;
      p.mode = mode;
      p.rotary_dim = (int)rot;
      EXPECT_TRUE(all_close(to_doubles(ops::rope(rx, pos, inv_freq, p)),
                            rope_reference(rv, posv, freq, heads, dim, rot, mode, 1.0), {2e-6, 1e-5}));
    }

    for (int case_index = 0; case_index < (int)std::size(kAttnCases); ++case_index) {
      EXPECT_TRUE(check_attention(device, case_index, f32, AttnLayout::Permuted)) << kAttnCases[case_index].name;
    }
  }
}

}  // namespace
}  // namespace rbee::test
