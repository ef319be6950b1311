// Conformance: kv_cache_write and paged_attention against a dense double-precision reference that gathers each
// sequence's keys position by position.
//
// 16-bit caches follow the op contract's tensor-core numerics (PagedAttention in rbee/backend/op_table.def): the
// reference rounds q to the cache's type exactly as the kernels must, and since each probability is rounded to that
// type at a running max that depends on the kernel's key order, every output element gets the contract's rounding slack
// u * sum_j (p_j / sum p) |v_j| (plus 2^-25 |v_j| / sum p per key for f16's subnormal probabilities) on top of the f32
// tolerance. The cases with larger head sizes use larger scales, so the softmax is peaked and a lost or extra key costs
// far more than that slack.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "common/harness.h"
#include "conformance/op_suites.h"
#include "rbee/ops.h"
#include "rbee/backend/paged_rows.h"

namespace rbee::test {
namespace {

struct PagedCase {
  const char* name;
  int hq, hkv, d, block_size;
  AttentionParams params;
};

// Head sizes 64 / 128 / 256 take the tensor-core kernels on GPUs for F16 / BF16 caches (GQA ratios 1, 2, 3, 4, 8),
// or for decode shapes with GQA ratios 1..4 the vector decode kernel; the other head sizes the scalar kernel.
const PagedCase kCases[] = {
    {"mha", 4, 4, 32, 16, {0.17f, true, 0, 0.f}},
    {"gqa", 6, 2, 64, 8, {0.125f, true, 0, 0.f}},
    {"window", 4, 2, 16, 4, {0.25f, true, 5, 0.f}},
    {"softcap", 4, 1, 24, 16, {0.2f, true, 0, 3.0f}},
    {"mha128", 4, 4, 128, 16, {0.35f, true, 0, 0.f}},
    {"gqa4_128", 8, 2, 128, 16, {0.3f, true, 0, 0.f}},
    {"gqa8_64", 8, 1, 64, 16, {0.4f, true, 0, 0.f}},
    {"window128", 4, 2, 128, 8, {0.3f, true, 37, 0.f}},
    {"softcap256", 4, 2, 256, 16, {0.25f, true, 0, 5.0f}},
    {"mha64", 4, 4, 64, 16, {0.3f, true, 0, 0.f}},
    {"gqa2_bs32", 4, 2, 128, 32, {0.3f, true, 0, 0.f}},
};
constexpr int kNumCases = (int)(sizeof(kCases) / sizeof(kCases[0]));

struct Seq {
  int q_len, ctx;
};

// |got - want| <= atol + rtol |want| + slack elementwise (NaN never passes).
::testing::AssertionResult close_with_slack(const std::vector<double>& got, const std::vector<double>& want,
                                            const std::vector<double>& slack, Tolerance tol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  int64_t bad = 0;
  std::string first;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]), allowed = tol.atol + tol.rtol * std::fabs(want[i]) + slack[i];
    if (!(err <= allowed)) {
      if (bad < 5) first += fmt::format("\n  [{}] got {} want {} (allowed {})", i, got[i], want[i], allowed);
      worst = std::max(worst, err / allowed);
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements differ (worst error "
                                       << worst << "x the allowed)" << first;
}

// Runs paged_attention for `seqs` (q rows concatenated in order, each sequence's blocks a random permutation
// of cache blocks) and compares with a dense double reference. The output memory is poisoned (NaN) first. gap = 0:
// every q row belongs to a sequence and the call says so (PagedRows::kAllInSequences: no zero fill, so a kernel
// that leaves any element of a sequence's rows unwritten fails); gap > 0: `gap` rows of no sequence before each
// sequence (random q values), which must come back 0.
void check_paged_attention(Device& device, const PagedCase& c, const std::vector<Seq>& seqs, DType cache_dtype,
                           int seed, int gap = 0) {
  int nq = 0, max_ctx = 0;
  for (const auto& s : seqs) {
    nq += gap + s.q_len;
    max_ctx = std::max(max_ctx, s.ctx);
  }
  const int n_seq = (int)seqs.size();
  const int max_blocks = (max_ctx + c.block_size - 1) / c.block_size;
  const int num_blocks = n_seq * max_blocks + 2;
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
  std::vector<double> tables((size_t)n_seq * max_blocks), info;
  for (int b = 0; b < n_seq; ++b)
    for (int j = 0; j < max_blocks; ++j) tables[b * max_blocks + j] = perm[b * max_blocks + j];
  int start = 0;
  for (const auto& s : seqs) {
    start += gap;
    info.insert(info.end(), {(double)start, (double)s.q_len, (double)s.ctx});
    start += s.q_len;
  }
  const Shape cache_shape{num_blocks, c.block_size, c.hkv, c.d};
  const auto kvals = random_values(cache_shape.numel(), cache_dtype, 100 + seed, -1, 1);
  const auto vvals = random_values(cache_shape.numel(), cache_dtype, 200 + seed, -1, 1);
  const auto qvals = random_values((int64_t)nq * c.hq * c.d, DType::F32, 300 + seed, -1, 1);
  const Tensor k_cache = make_tensor(kvals, cache_shape, cache_dtype, device);
  const Tensor v_cache = make_tensor(vvals, cache_shape, cache_dtype, device);
  // q as a strided view: [nq, hq, d] inside [nq, hq, d + 8].
  const Tensor q_base = make_tensor(random_values((int64_t)nq * c.hq * (c.d + 8), DType::F32, 1), {nq, c.hq, c.d + 8},
                                    DType::F32, device);
  const Tensor q = q_base.narrow(2, 0, c.d);
  ops::copy(q, make_tensor(qvals, {nq, c.hq, c.d}, DType::F32, device));
  const Tensor seq_info = make_tensor(info, {n_seq, 3}, DType::I32, device);
  const Tensor block_tables = make_tensor(tables, {n_seq, max_blocks}, DType::I32, device);
  poison_allocations(device, (size_t)nq * c.hq * c.d * 4);
  const Tensor out = ops::paged_attention(q, k_cache, v_cache, seq_info, block_tables, c.params,
                                         gap == 0 ? ops::PagedRows::kAllInSequences : ops::PagedRows::kMayHaveGaps);
  ASSERT_EQ(out.shape(), Shape({nq, c.hq, c.d}));

  // 16-bit caches: q as the kernels take it, and the probability rounding slack (see the top of the file).
  const bool half_cache = cache_dtype == DType::F16 || cache_dtype == DType::BF16;
  const double u = cache_dtype == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  const double p_floor = cache_dtype == DType::F16 ? std::ldexp(1.0, -25) : 0.0;
  auto q_at = [&](size_t i) { return half_cache ? round_to_dtype(qvals[i], cache_dtype) : qvals[i]; };
  std::vector<double> want((size_t)nq * c.hq * c.d, 0.0), slack(want.size(), 0.0);
  auto cache_at = [&](const std::vector<double>& vals, int b, int pos, int g, int i) {
    const int blk = (int)tables[b * max_blocks + pos / c.block_size];
    return vals[(((size_t)blk * c.block_size + pos % c.block_size) * c.hkv + g) * c.d + i];
  };
  for (int b = 0; b < n_seq; ++b) {
    const int q0 = (int)info[b * 3], ql = seqs[b].q_len, ctx = seqs[b].ctx;
    for (int t = 0; t < ql; ++t) {
      const int pos = ctx - ql + t;
      for (int h = 0; h < c.hq; ++h) {
        const int g = h / (c.hq / c.hkv);
        std::vector<double> scores;
        std::vector<int> keys;
        for (int j = 0; j <= pos; ++j) {
          if (c.params.window > 0 && pos - j >= c.params.window) continue;
          double s = 0;
          for (int i = 0; i < c.d; ++i) s += q_at(((size_t)(q0 + t) * c.hq + h) * c.d + i) * cache_at(kvals, b, j, g, i);
          s *= c.params.scale;
          if (c.params.softcap > 0) s = c.params.softcap * std::tanh(s / c.params.softcap);
          scores.push_back(s);
          keys.push_back(j);
        }
        const double mx = *std::max_element(scores.begin(), scores.end());
        double z = 0;
        for (double& s : scores) z += (s = std::exp(s - mx));
        for (int i = 0; i < c.d; ++i) {
          double acc = 0, bound = 0;
          for (size_t k = 0; k < keys.size(); ++k) {
            const double v = cache_at(vvals, b, keys[k], g, i);
            acc += scores[k] / z * v;
            bound += std::max(u * scores[k], p_floor) / z * std::fabs(v);
          }
          const size_t o = ((size_t)(q0 + t) * c.hq + h) * c.d + i;
          want[o] = acc;
          if (half_cache) slack[o] = bound;
        }
      }
    }
  }
  EXPECT_TRUE(close_with_slack(to_doubles(out), want, slack, {2e-5, 2e-4}));
}

using PagedParam = std::tuple<std::string, int, DType>;
class PagedAttentionConformance : public ::testing::TestWithParam<PagedParam> {};

TEST_P(PagedAttentionConformance, MatchesDenseReference) {
  const auto& [backend, case_index, cache_dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  // Three sequences: a prefill chunk continuing a cached prefix, a fresh prefill, a decode step.
  check_paged_attention(*device, kCases[case_index], {{5, 23}, {7, 7}, {1, 40}}, cache_dtype, case_index);
}

// Long contexts over many cache blocks: decode steps and a prefill chunk deep into the context (a GPU splits
// such contexts across thread blocks and merges the partial softmax states).
TEST_P(PagedAttentionConformance, LongContextMatchesDenseReference) {
  const auto& [backend, case_index, cache_dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  check_paged_attention(*device, kCases[case_index], {{1, 1500}, {3, 700}, {1, 2100}}, cache_dtype,
                        10 + case_index);
}

// Long prefill: a fresh prompt of 300 tokens and a 200-token chunk continuing a 450-token prefix (many query
// row tiles per sequence, causal tiles, a GPU's prefill tile shapes).
TEST_P(PagedAttentionConformance, LongPrefillMatchesDenseReference) {
  const auto& [backend, case_index, cache_dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  check_paged_attention(*device, kCases[case_index], {{300, 300}, {200, 650}}, cache_dtype, 20 + case_index);
}

// A batch of 12 sequences of different lengths: decode steps, short and long chunks, a one-token prompt.
TEST_P(PagedAttentionConformance, ManySequencesMatchDenseReference) {
  const auto& [backend, case_index, cache_dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  check_paged_attention(*device, kCases[case_index],
                        {{1, 37}, {17, 17}, {1, 301}, {5, 90}, {1, 1}, {64, 200}, {1, 650}, {2, 129}, {33, 64},
                         {1, 16}, {9, 400}, {1, 97}},
                        cache_dtype, 30 + case_index);
}

// Rows of q that belong to no sequence (two before each sequence) come back 0; the sequences' rows as always.
TEST_P(PagedAttentionConformance, RowsOfNoSequenceAreZero) {
  const auto& [backend, case_index, cache_dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  check_paged_attention(*device, kCases[case_index], {{1, 40}, {3, 20}, {1, 300}}, cache_dtype, 80 + case_index, 2);
}

// Decode batch: 16 sequences of one token each, contexts from 3 to 900 (a GPU's decode tile shapes with split-K).
TEST_P(PagedAttentionConformance, DecodeBatchMatchesDenseReference) {
  const auto& [backend, case_index, cache_dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  std::vector<Seq> seqs;
  for (int i = 0; i < 16; ++i) seqs.push_back({1, 3 + (i * 397) % 898});
  check_paged_attention(*device, kCases[case_index], seqs, cache_dtype, 40 + case_index);
}

// Decode steps whose block table spans exactly 256 positions (16 blocks of 16: a GPU reads such a key range in
// one split, no merge) and 257 (17 blocks: split over the key range and merged), every context in a different
// place of its last tile.
TEST_P(PagedAttentionConformance, DecodeAtTheSplitBoundaryMatchesDenseReference) {
  const auto& [backend, case_index, cache_dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  check_paged_attention(*device, kCases[case_index], {{1, 256}, {1, 129}, {1, 64}, {1, 3}}, cache_dtype,
                        50 + case_index);
  check_paged_attention(*device, kCases[case_index], {{1, 200}, {1, 257}, {1, 65}}, cache_dtype, 60 + case_index);
}

// Batched decode as in llama-batched-bench: 16 and 128 sequences of one token each, contexts mixed from 1 to 256
// (a block table of 256 positions: one split on GPUs) or to 300 (split over the key range and merged).
TEST_P(PagedAttentionConformance, BatchedDecodeMatchesDenseReference) {
  const auto& [backend, case_index, cache_dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const int shapes[][2] = {{16, 300}, {128, 256}, {128, 300}};  // (sequences, longest context)
  for (const auto& [n, longest] : shapes) {
    std::vector<Seq> seqs;
    for (int i = 0; i < n; ++i) seqs.push_back({1, 1 + (i * 173 + n) % longest});
    seqs.front().ctx = 1;
    seqs.back().ctx = longest;
    check_paged_attention(*device, kCases[case_index], seqs, cache_dtype, 70 + n + longest + case_index);
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, PagedAttentionConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()), ::testing::Range(0, kNumCases),
                                            ::testing::Values(DType::F32, DType::F16, DType::BF16)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + kCases[std::get<1>(info.param)].name + "_" +
                                  std::string(dtype_name(std::get<2>(info.param)));
                         });
RBEE_CONFORMANCE_SUITE(PagedAttention, PagedAttentionConformance);

using KvWriteParam = std::tuple<std::string, DType, DType>;
class KvCacheWriteConformance : public ::testing::TestWithParam<KvWriteParam> {};

TEST_P(KvCacheWriteConformance, WritesRowsToSlotsAndLeavesTheRest) {
  const auto& [backend, in_dtype, cache_dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const Shape cache_shape{6, 4, 2, 8};  // 24 slots
  const Tensor k_cache = make_tensor(std::vector<double>(cache_shape.numel(), 5.0), cache_shape, cache_dtype, *device);
  const Tensor v_cache = make_tensor(std::vector<double>(cache_shape.numel(), -5.0), cache_shape, cache_dtype, *device);
  const std::vector<double> slots{17, 3, 22, 8};
  const auto kv = random_values(4 * 2 * 8, in_dtype, 9, -2, 2);
  const auto vv = random_values(4 * 2 * 8, in_dtype, 10, -2, 2);
  ops::kv_cache_write(make_tensor(kv, {4, 2, 8}, in_dtype, *device), make_tensor(vv, {4, 2, 8}, in_dtype, *device),
                      make_tensor(slots, {4}, DType::I32, *device), k_cache, v_cache);
  std::vector<double> kwant(cache_shape.numel(), 5.0), vwant(cache_shape.numel(), -5.0);
  for (int r = 0; r < 4; ++r)
    for (int i = 0; i < 16; ++i) {
      kwant[(size_t)slots[r] * 16 + i] = round_to_dtype(kv[r * 16 + i], cache_dtype);
      vwant[(size_t)slots[r] * 16 + i] = round_to_dtype(vv[r * 16 + i], cache_dtype);
    }
  EXPECT_TRUE(all_close(to_doubles(k_cache), kwant, {0, 0}));
  EXPECT_TRUE(all_close(to_doubles(v_cache), vwant, {0, 0}));
}

INSTANTIATE_TEST_SUITE_P(Ops, KvCacheWriteConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::Values(DType::F32, DType::F16),
                                            ::testing::Values(DType::F32, DType::F16, DType::BF16)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param))) +
                                  "_to_" + std::string(dtype_name(std::get<2>(info.param)));
                         });
RBEE_CONFORMANCE_SUITE(KvCacheWrite, KvCacheWriteConformance);

// Index tensors that live on a device are not validated by the front-end (that would need a host read); the
// device's kernels clamp every index they read. Garbage there must neither fault nor write outside the cache.
class PagedDeviceIndices : public ::testing::TestWithParam<std::string> {};

TEST_P(PagedDeviceIndices, GarbageIsClampedNotFaulting) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  if (device->host_accessible()) GTEST_SKIP() << "host index tensors are validated by the front-end";
  const Shape cache_shape{4, 8, 2, 16};
  const Tensor kc = make_tensor(random_values(cache_shape.numel(), DType::F16, 1), cache_shape, DType::F16, *device);
  const Tensor vc = make_tensor(random_values(cache_shape.numel(), DType::F16, 2), cache_shape, DType::F16, *device);
  const Tensor q = make_tensor(random_values(3 * 4 * 16, DType::F32, 3), {3, 4, 16}, DType::F32, *device);
  // Out-of-range starts, lengths, contexts and block ids.
  const Tensor info = make_tensor({0, 3, 1000000, -5, 7, 3, 2, -1, 9}, {3, 3}, DType::I32, *device);
  const Tensor tables = make_tensor({99, -3, 7, 1, 0, 100000}, {3, 2}, DType::I32, *device);
  AttentionParams params;
  params.scale = 0.25f;
  params.causal = true;
  const auto out = to_doubles(ops::paged_attention(q, kc, vc, info, tables, params));
  for (double v : out) {
    ASSERT_TRUE(std::isfinite(v));
    EXPECT_LE(std::fabs(v), 1.0 + 1e-6);  // convex combinations of cache values in [-1, 1]
  }
  // Slots outside the cache are skipped; the valid row lands in slot 5 and nothing else changes.
  const Tensor k_cache = make_tensor(std::vector<double>(cache_shape.numel(), 5.0), cache_shape, DType::F32, *device);
  const Tensor v_cache = make_tensor(std::vector<double>(cache_shape.numel(), -5.0), cache_shape, DType::F32, *device);
  const auto rows = random_values(3 * 2 * 16, DType::F32, 4);
  const Tensor kv = make_tensor(rows, {3, 2, 16}, DType::F32, *device);
  ops::kv_cache_write(kv, kv, make_tensor({-1, 1000, 5}, {3}, DType::I32, *device), k_cache, v_cache);
  std::vector<double> kwant(cache_shape.numel(), 5.0), vwant(cache_shape.numel(), -5.0);
  for (int i = 0; i < 32; ++i) kwant[5 * 32 + i] = vwant[5 * 32 + i] = rows[2 * 32 + i];
  EXPECT_TRUE(all_close(to_doubles(k_cache), kwant, {0, 0}));
  EXPECT_TRUE(all_close(to_doubles(v_cache), vwant, {0, 0}));
}

INSTANTIATE_TEST_SUITE_P(Ops, PagedDeviceIndices, ::testing::ValuesIn(conformance_backends()),
                         [](const auto& info) { return info.param; });

TEST(PagedAttentionErrors, BadTablesAndShapesAreRejected) {
  Device& cpu = cpu_device();
  const Tensor kc = ops::zeros({4, 8, 2, 16}, DType::F16, cpu);
  const Tensor q = ops::zeros({3, 4, 16}, DType::F32, cpu);
  const Tensor info = make_tensor({0, 3, 3}, {1, 3}, DType::I32, cpu);
  const Tensor bad_table = make_tensor({7}, {1, 1}, DType::I32, cpu);  // block 7 of 4
  EXPECT_THROW(ops::paged_attention(q, kc, kc, info, bad_table, {}), Error);
  const Tensor long_info = make_tensor({0, 3, 9}, {1, 3}, DType::I32, cpu);  // 9 > 1 block * 8
  EXPECT_THROW(ops::paged_attention(q, kc, kc, long_info, make_tensor({1}, {1, 1}, DType::I32, cpu), {}), Error);
  const Tensor q3 = ops::zeros({3, 3, 16}, DType::F32, cpu);  // 3 heads vs 2 kv heads
  EXPECT_THROW(ops::paged_attention(q3, kc, kc, info, make_tensor({1}, {1, 1}, DType::I32, cpu), {}), Error);
  // A promise that every q row belongs to a sequence is checked against host seq_info: row 2 belongs to none.
  const Tensor two_rows = make_tensor({0, 2, 3}, {1, 3}, DType::I32, cpu);
  EXPECT_NO_THROW(ops::paged_attention(q, kc, kc, two_rows, make_tensor({1}, {1, 1}, DType::I32, cpu), {}));
  EXPECT_THROW(ops::paged_attention(q, kc, kc, two_rows, make_tensor({1}, {1, 1}, DType::I32, cpu), {},
                                    ops::PagedRows::kAllInSequences),
               Error);
  EXPECT_NO_THROW(ops::paged_attention(q, kc, kc, info, make_tensor({1}, {1, 1}, DType::I32, cpu), {},
                                       ops::PagedRows::kAllInSequences));
  const Tensor rows = ops::zeros({1, 2, 16}, DType::F32, cpu);
  EXPECT_THROW(ops::kv_cache_write(rows, rows, make_tensor({32}, {1}, DType::I32, cpu), kc, kc), Error);
}

}  // namespace
}  // namespace rbee::test
