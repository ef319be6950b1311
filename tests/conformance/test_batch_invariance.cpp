// Batch invariance (docs/DESIGN.md, "Batch invariance"): one row's result computed alone and inside larger
// launches.
//
// (a) qmatmul (every block type, F32 / F16 / BF16 weights) and the fused decoder projections (rms_norm_qmatmul,
//     add_rms_norm_qmatmul, swiglu_qmatmul): each of 64 activation rows alone (M = 1) against the same row at the
//     same position inside launches of M = 2..9, 16 and 64 rows (a GPU's matvec / gemv for few rows, MMQ or the
//     16-bit GEMM for more).
// (b) paged_attention: the last 9 positions of one sequence as decode steps (one query each, the block table just
//     wide enough) against the same query rows as a speculative verify chunk, a prefill chunk over a cached prefix,
//     a whole prompt, inside a batch of other sequences with a wider block table, and inside a batch of decode
//     steps of other sequences.
// With RBEE_BATCH_INVARIANT=1 every pair must be bit-identical. With the switch off (the default dispatch) the
// differences are printed and must be rounding-sized, which tells numerics from a bug:
//   products: |diff| <= 2 (K + 16) 2^-24 * 1.05 sum_k |w^_jk x_rk| (two summation orders of the same rounded terms,
//             x as the host sees it; the activations the kernels multiply lie within 1% of it);
//   attention (values in [-1, 1]): |diff| <= 2 u + 2 (ctx + 64) 2^-24, u the rounding of the probabilities to a
//             16-bit cache (2^-11 F16, 2^-8 BF16, 0 F32; op_table.def's PagedAttention bound).
// The CPU backend is invariant by construction: both modes give zero there.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "common/harness.h"
#include "common/scoped_env.h"
#include "rbee/ops.h"

namespace rbee::test {
namespace {

// Differences of `got` against `want`, element by element, with a per-element rounding bound.
struct DiffStats {
  double max_diff = 0, worst_ratio = 0;  // max |diff| and max |diff| / bound
  int64_t differing = 0, total = 0;
  void add(double got, double want, double bound) {
    ++total;
    const double d = std::fabs(got - want);
    if (!(d == 0) || std::isnan(got) != std::isnan(want)) ++differing;
    if (std::isnan(d)) {
      worst_ratio = INFINITY;
      max_diff = INFINITY;
      return;
    }
    max_diff = std::max(max_diff, d);
    worst_ratio = std::max(worst_ratio, bound > 0 ? d / bound : (d > 0 ? INFINITY : 0.0));
  }
};

// Checks the mode's promise: bit-identical when on, rounding-sized (and printed) when off.
void expect_invariance(const DiffStats& s, bool on, const std::string& what) {
  fmt::print("[batch-invariance] {} (mode {}): max |diff| {:.3g}, {:.3g}x the rounding bound, {} of {} values differ\n",
             what, on ? "on" : "off", s.max_diff, s.worst_ratio, s.differing, s.total);
  if (on) {
    EXPECT_EQ(s.differing, 0) << what << ": with RBEE_BATCH_INVARIANT=1 a row must not depend on its launch (max |diff| "
                              << s.max_diff << ")";
  } else {
    EXPECT_LE(s.worst_ratio, 1.0) << what << ": more than rounding apart (a bug, not numerics): max |diff| "
                                  << s.max_diff;
  }
}

// ------------------------------------------------------------------------------------------- (a) products
const std::vector<DType> kAllWeights = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                                        DType::Q8_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K,
                                        DType::Q6_K, DType::Q8_K, DType::F32,  DType::F16,  DType::BF16};
const std::vector<DType> kFusedWeights = {DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::F16};
const std::vector<int64_t> kBatchRows = {2, 3, 4, 5, 6, 7, 8, 9, 16, 64};
constexpr int64_t kRows = 64, kK = 512, kN = 72;
constexpr float kEps = 1e-5f;

enum class Product { QMatmul, NormQMatmul, AddNormQMatmul, SwigluQMatmul };
const char* product_name(Product p) {
  switch (p) {
    case Product::QMatmul: return "qmatmul";
    case Product::NormQMatmul: return "rms_norm_qmatmul";
    case Product::AddNormQMatmul: return "add_rms_norm_qmatmul";
    case Product::SwigluQMatmul: return "swiglu_qmatmul";
  }
  return "?";
}

struct ProductInputs {
  Tensor w;                   // [N, K'] (K' = K, or K / 2 for swiglu's inner size)
  std::vector<double> w_hat;  // what w holds
  Tensor x, res, norm_w;      // x [rows, K] (swiglu: gate_up [rows, K]), residual [rows, K or N], norm weight [K]
  std::vector<double> h;      // host approximation of the activations multiplied [rows, K']
  int64_t kin = kK;           // K'
};

ProductInputs make_inputs(Device& device, Product op, DType type, uint64_t seed) {
  ProductInputs in;
  in.kin = op == Product::SwigluQMatmul ? kK / 2 : kK;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> wf((size_t)(kN * in.kin));
  for (int64_t r = 0; r < kN; ++r)
    for (int64_t c = 0; c < in.kin; ++c) wf[(size_t)(r * in.kin + c)] = normal(rng) * 0.05f * (float)(1 + r % 5);
  in.w = Tensor::from_vector(wf, {kN, in.kin}, device);
  if (is_quantized(type)) in.w = ops::quantize(in.w, type);
  else if (type != DType::F32) in.w = ops::cast(in.w, type);
  in.w_hat = to_doubles(is_quantized(type) ? ops::dequantize(in.w) : ops::cast(in.w, DType::F32));

  std::vector<double> xv((size_t)(kRows * kK)), rv((size_t)(kRows * kK)), nw((size_t)kK);
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kK; ++c) {
      xv[(size_t)(r * kK + c)] = (double)normal(rng) * (1.0 + (double)(r % 4));
      rv[(size_t)(r * kK + c)] = (double)normal(rng);
    }
  for (auto& v : nw) v = 0.5 + std::fabs((double)normal(rng)) * 0.5;
  in.x = make_tensor(xv, {kRows, kK}, DType::F32, device);
  in.norm_w = make_tensor(nw, {kK}, DType::F32, device);
  in.h.assign((size_t)(kRows * in.kin), 0.0);
  for (int64_t r = 0; r < kRows; ++r) {
    if (op == Product::SwigluQMatmul) {
      for (int64_t i = 0; i < in.kin; ++i) {
        const double g = xv[(size_t)(r * kK + i)], u = xv[(size_t)(r * kK + in.kin + i)];
        in.h[(size_t)(r * in.kin + i)] = g / (1 + std::exp(-g)) * u;
      }
    } else {
      double ss = 0;
      for (int64_t i = 0; i < kK; ++i) {
        const double s = xv[(size_t)(r * kK + i)] + (op == Product::AddNormQMatmul ? rv[(size_t)(r * kK + i)] : 0.0);
        ss += s * s;
        in.h[(size_t)(r * kK + i)] = s;
      }
      const double rstd = op == Product::QMatmul ? 1.0 : 1.0 / std::sqrt(ss / (double)kK + kEps);
      for (int64_t i = 0; i < kK; ++i) in.h[(size_t)(r * kK + i)] *= rstd * (op == Product::QMatmul ? 1.0 : nw[(size_t)i]);
    }
  }
  if (op == Product::AddNormQMatmul) in.res = make_tensor(rv, {kRows, kK}, DType::F32, device);
  if (op == Product::SwigluQMatmul) {
    std::vector<double> res_n((size_t)(kRows * kN));
    for (auto& v : res_n) v = (double)normal(rng);
    in.res = make_tensor(res_n, {kRows, kN}, DType::F32, device);
  }
  return in;
}

// The op on rows [r0, r0 + m) of the inputs, as [m, N] doubles (fresh contiguous copies of the rows, as a step's
// activations are).
std::vector<double> run_rows(const ProductInputs& in, Product op, int64_t r0, int64_t m) {
  const Tensor x = in.x.narrow(0, r0, m).contiguous();
  switch (op) {
    case Product::QMatmul: return to_doubles(ops::qmatmul(x, in.w));
    case Product::NormQMatmul: return to_doubles(ops::rms_norm_qmatmul(x, in.norm_w, kEps, in.w));
    case Product::AddNormQMatmul:
      return to_doubles(ops::add_rms_norm_qmatmul(x, in.res.narrow(0, r0, m).contiguous(), in.norm_w, kEps, in.w).second);
    case Product::SwigluQMatmul: return to_doubles(ops::swiglu_qmatmul(x, in.w, in.res.narrow(0, r0, m).contiguous()));
  }
  return {};
}

void check_products(Device& device, Product op, DType type, bool on) {
  const ScopedInvariant mode(on);
  const ProductInputs in = make_inputs(device, op, type, 1234 + (uint64_t)type);
  // Rounding bound per output element.
  std::vector<double> bound((size_t)(kRows * kN));
  const double gamma = 2.0 * (double)(in.kin + 16) * std::ldexp(1.0, -24) * 1.05;
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t j = 0; j < kN; ++j) {
      double a = 0;
      for (int64_t i = 0; i < in.kin; ++i)
        a += std::fabs(in.w_hat[(size_t)(j * in.kin + i)] * in.h[(size_t)(r * in.kin + i)]);
      bound[(size_t)(r * kN + j)] = gamma * a + 1e-30;
    }
  std::vector<double> alone((size_t)(kRows * kN));
  for (int64_t r = 0; r < kRows; ++r) {
    const auto row = run_rows(in, op, r, 1);
    std::copy(row.begin(), row.end(), alone.begin() + r * kN);
  }
  DiffStats stats;
  for (const int64_t m : kBatchRows) {
    const auto got = run_rows(in, op, 0, m);
    ASSERT_EQ(got.size(), (size_t)(m * kN));
    for (size_t i = 0; i < got.size(); ++i) stats.add(got[i], alone[i], bound[i]);
  }
  expect_invariance(stats, on, fmt::format("{} {} {}", product_name(op), dtype_name(type), device.id()));
}

using ProductParam = std::tuple<std::string, DType>;
std::string product_param_name(const ::testing::TestParamInfo<ProductParam>& info) {
  return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param)));
}

class BatchInvariantQMatmul : public ::testing::TestWithParam<ProductParam> {};

TEST_P(BatchInvariantQMatmul, RowAloneEqualsRowInBatchWithModeOn) {
  const auto& [backend, type] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  check_products(*device, Product::QMatmul, type, true);
}
TEST_P(BatchInvariantQMatmul, RowAloneIsWithinRoundingOfRowInBatchWithModeOff) {
  const auto& [backend, type] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  check_products(*device, Product::QMatmul, type, false);
}
INSTANTIATE_TEST_SUITE_P(Ops, BatchInvariantQMatmul,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()), ::testing::ValuesIn(kAllWeights)),
                         product_param_name);

class BatchInvariantFused : public ::testing::TestWithParam<ProductParam> {};

TEST_P(BatchInvariantFused, RowAloneEqualsRowInBatchWithModeOn) {
  const auto& [backend, type] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  for (const Product op : {Product::NormQMatmul, Product::AddNormQMatmul, Product::SwigluQMatmul})
    check_products(*device, op, type, true);
}
TEST_P(BatchInvariantFused, RowAloneIsWithinRoundingOfRowInBatchWithModeOff) {
  const auto& [backend, type] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  for (const Product op : {Product::NormQMatmul, Product::AddNormQMatmul, Product::SwigluQMatmul})
    check_products(*device, op, type, false);
}
INSTANTIATE_TEST_SUITE_P(Ops, BatchInvariantFused,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::ValuesIn(kFusedWeights)),
                         product_param_name);

// ------------------------------------------------------------------------------------------- (b) attention
struct AttnCase {
  const char* name;
  int hq, hkv, d, block_size, window;
  DType cache;
};
// d = 64 / 128 take the tensor-core kernel on GPUs for 16-bit caches; d = 32 and F32 caches the scalar kernel.
const AttnCase kAttnCases[] = {
    {"gqa64_f16", 6, 2, 64, 16, 0, DType::F16},     {"mha128_bf16", 4, 4, 128, 16, 0, DType::BF16},
    {"window64_f16", 4, 2, 64, 8, 37, DType::F16},  {"scalar32_f16", 4, 2, 32, 16, 0, DType::F16},
    {"f32_64", 4, 1, 64, 16, 0, DType::F32},        {"window32_f32", 4, 2, 32, 4, 21, DType::F32},
};
constexpr int kTarget = 300;  // the sequence whose last kVerify positions are compared
constexpr int kVerify = 9;

struct SeqSpec {
  int q_len, ctx;
  bool target;  // the sequence under test (its block table), else another sequence
};

struct AttnFixture {
  AttnCase c;
  Device* device;
  Tensor k_cache, v_cache;
  std::vector<int> target_blocks, other_blocks;  // block ids of the target's positions, and of other sequences
  int num_blocks = 0;

  // q row of the target at position pos (head-major [hq, d]), the same in every launch.
  std::vector<double> q_row(int pos, bool target) const {
    return random_values((int64_t)c.hq * c.d, DType::F32, (target ? 5000 : 9000) + (uint64_t)pos, -1, 1);
  }

  // One paged_attention launch over `seqs` with block tables `width` wide; returns the target rows
  // [kTarget - kVerify, kTarget) that the launch holds, keyed by position.
  std::vector<std::pair<int, std::vector<double>>> launch(const std::vector<SeqSpec>& seqs, int width) const {
    std::vector<double> q, info, tables;
    int start = 0;
    for (const auto& s : seqs) {
      for (int t = 0; t < s.q_len; ++t) {
        const auto row = q_row(s.ctx - s.q_len + t, s.target);
        q.insert(q.end(), row.begin(), row.end());
      }
      info.insert(info.end(), {(double)start, (double)s.q_len, (double)s.ctx});
      start += s.q_len;
      const auto& blocks = s.target ? target_blocks : other_blocks;
      for (int j = 0; j < width; ++j) tables.push_back(j < (int)blocks.size() ? blocks[(size_t)j] : 0);
    }
    const int n_seq = (int)seqs.size();
    const Tensor qt = make_tensor(q, {start, c.hq, c.d}, DType::F32, *device);
    AttentionParams params;
    params.scale = 0.3f;
    params.causal = true;
    params.window = c.window;
    poison_allocations(*device, (size_t)start * c.hq * c.d * 4);
    const auto out = to_doubles(ops::paged_attention(qt, k_cache, v_cache, make_tensor(info, {n_seq, 3}, DType::I32, *device),
                                                     make_tensor(tables, {n_seq, width}, DType::I32, *device), params));
    std::vector<std::pair<int, std::vector<double>>> rows;
    const size_t row_size = (size_t)c.hq * c.d;
    int row = 0;
    for (const auto& s : seqs) {
      for (int t = 0; t < s.q_len; ++t, ++row) {
        const int pos = s.ctx - s.q_len + t;
        if (s.target && s.ctx == kTarget && pos >= kTarget - kVerify)
          rows.emplace_back(pos, std::vector<double>(out.begin() + row * row_size, out.begin() + (row + 1) * row_size));
        if (s.target && s.ctx < kTarget && s.q_len == 1 && pos >= kTarget - kVerify)  // a decode step at pos
          rows.emplace_back(pos, std::vector<double>(out.begin() + row * row_size, out.begin() + (row + 1) * row_size));
      }
    }
    return rows;
  }
};

AttnFixture make_attn(Device& device, const AttnCase& c, uint64_t seed) {
  AttnFixture f{c, &device, {}, {}, {}, {}, 0};
  const int target_blocks = (kTarget + c.block_size - 1) / c.block_size;
  const int other_len = 1000;  // the longest other sequence
  const int other_blocks = (other_len + c.block_size - 1) / c.block_size;
  f.num_blocks = target_blocks + other_blocks + 3;
  std::vector<int> perm((size_t)f.num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
  f.target_blocks.assign(perm.begin(), perm.begin() + target_blocks);
  f.other_blocks.assign(perm.begin() + target_blocks, perm.begin() + target_blocks + other_blocks);
  const Shape shape{f.num_blocks, c.block_size, c.hkv, c.d};
  f.k_cache = make_tensor(random_values(shape.numel(), c.cache, seed + 1, -1, 1), shape, c.cache, device);
  f.v_cache = make_tensor(random_values(shape.numel(), c.cache, seed + 2, -1, 1), shape, c.cache, device);
  return f;
}

void check_attention(Device& device, const AttnCase& c, bool on) {
  const ScopedInvariant mode(on);
  const AttnFixture f = make_attn(device, c, 77);
  const int bs = c.block_size;
  auto blocks_for = [&](int ctx) { return (ctx + bs - 1) / bs; };
  // Reference: each position as a decode step alone, its block table just wide enough.
  std::map<int, std::vector<double>> ref;
  for (int pos = kTarget - kVerify; pos < kTarget; ++pos) {
    // A decode step at pos: ctx = pos + 1 (kTarget only for the last one; launch() keys both by position).
    const auto rows = f.launch({{1, pos + 1, true}}, blocks_for(pos + 1));
    ASSERT_EQ(rows.size(), 1u);
    ref[pos] = rows[0].second;
  }
  const int wide = blocks_for(1000) + 8;  // a batch's table: its longest sequence, rounded up like decode graphs'
  struct Variant {
    const char* name;
    std::vector<std::vector<SeqSpec>> launches;  // each launch's sequences
    int width;
  };
  std::vector<Variant> variants = {
      {"verify chunk", {{{kVerify, kTarget, true}}}, blocks_for(kTarget)},
      {"prefill chunk over a cached prefix", {{{50, kTarget, true}}}, blocks_for(kTarget)},
      {"whole prompt", {{{kTarget, kTarget, true}}}, blocks_for(kTarget)},
      {"verify chunk in a mixed batch",
       {{{1, 1000, false}, {33, 64, false}, {1, 5, false}, {kVerify, kTarget, true}, {1, 700, false}}},
       wide},
  };
  Variant decodes{"decode steps in a batch of 16 decodes", {}, wide};
  for (int pos = kTarget - kVerify; pos < kTarget; ++pos) {
    std::vector<SeqSpec> batch;
    for (int i = 0; i < 16; ++i) batch.push_back(i == 5 ? SeqSpec{1, pos + 1, true} : SeqSpec{1, 3 + (i * 397) % 990, false});
    decodes.launches.push_back(batch);
  }
  variants.push_back(decodes);

  const double u = c.cache == DType::F16 ? std::ldexp(1.0, -11) : c.cache == DType::BF16 ? std::ldexp(1.0, -8) : 0.0;
  const double bound = 2 * u + 2 * (kTarget + 64) * std::ldexp(1.0, -24);
  for (const auto& v : variants) {
    DiffStats stats;
    int seen = 0;
    for (const auto& seqs : v.launches) {
      for (const auto& [pos, row] : f.launch(seqs, v.width)) {
        ++seen;
        const auto& want = ref.at(pos);
        for (size_t i = 0; i < row.size(); ++i) stats.add(row[i], want[i], bound);
      }
    }
    ASSERT_EQ(seen, kVerify) << v.name;
    expect_invariance(stats, on, fmt::format("paged_attention {} {}: {}", c.name, device.id(), v.name));
  }
}

using AttnParam = std::tuple<std::string, int>;
class BatchInvariantAttention : public ::testing::TestWithParam<AttnParam> {};

TEST_P(BatchInvariantAttention, DecodeRowEqualsVerifyPrefillAndBatchRowsWithModeOn) {
  const auto& [backend, index] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  check_attention(*device, kAttnCases[index], true);
}
TEST_P(BatchInvariantAttention, DecodeRowIsWithinRoundingOfOtherLaunchesWithModeOff) {
  const auto& [backend, index] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  check_attention(*device, kAttnCases[index], false);
}
INSTANTIATE_TEST_SUITE_P(Ops, BatchInvariantAttention,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::Range(0, (int)(sizeof(kAttnCases) / sizeof(kAttnCases[0])))),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + kAttnCases[std::get<1>(info.param)].name;
                         });

}  // namespace
}  // namespace rbee::test
