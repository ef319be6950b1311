// Conformance: kv_cache_write and paged_attention against a dense double-precision reference that gathers
// each sequence's keys position by position.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "common/harness.h"
#include "rbee/ops.h"

namespace rbee::test {
namespace {

struct PagedCase {
  const char* name;
  int hq, hkv, d, block_size;
  AttentionParams params;
};

const PagedCase kCases[] = {
    {"mha", 4, 4, 32, 16, {0.17f, true, 0, 0.f}},
    {"gqa", 6, 2, 64, 8, {0.125f, true, 0, 0.f}},
    {"window", 4, 2, 16, 4, {0.25f, true, 5, 0.f}},
    {"softcap", 4, 1, 24, 16, {0.2f, true, 0, 3.0f}},
};

using PagedParam = std::tuple<std::string, int, DType>;
class PagedAttentionConformance : public ::testing::TestWithParam<PagedParam> {};

TEST_P(PagedAttentionConformance, MatchesDenseReference) {
  const auto& [backend, case_index, cache_dtype] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const PagedCase& c = kCases[case_index];
  // Three sequences: a prefill chunk continuing a cached prefix, a fresh prefill, a decode step.
  struct Seq { int q_len, ctx; };
  const std::vector<Seq> seqs = {{5, 23}, {7, 7}, {1, 40}};
  const int nq = 5 + 7 + 1;
  const int max_blocks = (40 + c.block_size - 1) / c.block_size;
  const int num_blocks = 3 * max_blocks + 2;
  // Each sequence's blocks are a random permutation of cache blocks.
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(case_index));
  std::vector<double> tables(3 * max_blocks), info;
  for (int b = 0; b < 3; ++b)
    for (int j = 0; j < max_blocks; ++j) tables[b * max_blocks + j] = perm[b * max_blocks + j];
  int start = 0;
  for (const auto& s : seqs) {
    info.insert(info.end(), {(double)start, (double)s.q_len, (double)s.ctx});
    start += s.q_len;
  }
  const Shape cache_shape{num_blocks, c.block_size, c.hkv, c.d};
  const auto kvals = random_values(cache_shape.numel(), cache_dtype, 100 + case_index, -1, 1);
  const auto vvals = random_values(cache_shape.numel(), cache_dtype, 200 + case_index, -1, 1);
  const auto qvals = random_values((int64_t)nq * c.hq * c.d, DType::F32, 300 + case_index, -1, 1);
  const Tensor k_cache = make_tensor(kvals, cache_shape, cache_dtype, *device);
  const Tensor v_cache = make_tensor(vvals, cache_shape, cache_dtype, *device);
  // q as a strided view: [nq, hq, d] inside [nq, hq, d + 8].
  const Tensor q_base = make_tensor(random_values((int64_t)nq * c.hq * (c.d + 8), DType::F32, 1), {nq, c.hq, c.d + 8},
                                    DType::F32, *device);
  const Tensor q = q_base.narrow(2, 0, c.d);
  ops::copy(q, make_tensor(qvals, {nq, c.hq, c.d}, DType::F32, *device));
  const Tensor seq_info = make_tensor(info, {3, 3}, DType::I32, *device);
  const Tensor block_tables = make_tensor(tables, {3, max_blocks}, DType::I32, *device);
  poison_allocations(*device, (size_t)nq * c.hq * c.d * 4);
  const Tensor out = ops::paged_attention(q, k_cache, v_cache, seq_info, block_tables, c.params);
  ASSERT_EQ(out.shape(), Shape({nq, c.hq, c.d}));

  std::vector<double> want((size_t)nq * c.hq * c.d, 0.0);
  auto cache_at = [&](const std::vector<double>& vals, int b, int pos, int g, int i) {
    const int blk = (int)tables[b * max_blocks + pos / c.block_size];
    return vals[(((size_t)blk * c.block_size + pos % c.block_size) * c.hkv + g) * c.d + i];
  };
  for (int b = 0; b < 3; ++b) {
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
          for (int i = 0; i < c.d; ++i) s += qvals[((size_t)(q0 + t) * c.hq + h) * c.d + i] * cache_at(kvals, b, j, g, i);
          s *= c.params.scale;
          if (c.params.softcap > 0) s = c.params.softcap * std::tanh(s / c.params.softcap);
          scores.push_back(s);
          keys.push_back(j);
        }
        const double mx = *std::max_element(scores.begin(), scores.end());
        double z = 0;
        for (double& s : scores) z += (s = std::exp(s - mx));
        for (int i = 0; i < c.d; ++i) {
          double acc = 0;
          for (size_t k = 0; k < keys.size(); ++k) acc += scores[k] / z * cache_at(vvals, b, keys[k], g, i);
          want[((size_t)(q0 + t) * c.hq + h) * c.d + i] = acc;
        }
      }
    }
  }
  EXPECT_TRUE(all_close(to_doubles(out), want, {2e-5, 2e-4}));
}

INSTANTIATE_TEST_SUITE_P(Ops, PagedAttentionConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()), ::testing::Range(0, 4),
                                            ::testing::Values(DType::F32, DType::F16, DType::BF16)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + kCases[std::get<1>(info.param)].name + "_" +
                                  std::string(dtype_name(std::get<2>(info.param)));
                         });

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
  const Tensor rows = ops::zeros({1, 2, 16}, DType::F32, cpu);
  EXPECT_THROW(ops::kv_cache_write(rows, rows, make_tensor({32}, {1}, DType::I32, cpu), kc, kc), Error);
}

}  // namespace
}  // namespace rbee::test
