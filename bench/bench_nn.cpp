// Microbenchmarks of the neural-network ops on the CPU, each next to a peer measured in the same run:
//   rms_norm, rope           GB/s (bytes read + written) vs memcpy of the same bytes (the bandwidth bound)
//   attention prefill/decode GFLOP/s of the visible (query, key) pairs, 2 (D + Dv) flops each, vs unfused
//                            attention on OpenBLAS (S = Q K^T, masked softmax, O = P V; one head per thread
//                            with single-threaded sgemm), which computes the full score matrix.
// Compare ours/peer ratios of one run (docs/PERF.md); absolute numbers move with the machine's load.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "rbee/backend/device.h"
#include "rbee/core/thread_pool.h"
#include "rbee/ops.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace {

using namespace rbee;

Device& cpu() { return Registry::global().cpu(); }

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v((size_t)shape.numel());
  for (float& x : v) x = dist(rng);
  return Tensor::from_vector(v, shape, cpu());
}

void set_bandwidth(benchmark::State& state, double bytes_per_iteration) {
  state.counters["GB/s"] =
      benchmark::Counter(bytes_per_iteration * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
void set_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iteration * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// ------------------------------------------------------------------------------------------------ rms_norm
// Args: rows, n (f32).
void BM_RmsNorm(benchmark::State& state) {
  const int64_t rows = state.range(0), n = state.range(1);
  const Tensor x = random_tensor({rows, n}, 1), w = random_tensor({n}, 2);
  for (auto _ : state) benchmark::DoNotOptimize(ops::rms_norm(x, w, 1e-5f).data());
  set_bandwidth(state, 2.0 * (double)x.nbytes());
}
BENCHMARK(BM_RmsNorm)->Args({16, 4096})->Args({512, 4096})->UseRealTime();

void BM_RmsNorm_PeerMemcpy(benchmark::State& state) {
  const int64_t rows = state.range(0), n = state.range(1);
  std::vector<float> src((size_t)(rows * n), 1.0f), dst(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size() * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
  }
  set_bandwidth(state, 2.0 * (double)(src.size() * sizeof(float)));
}
BENCHMARK(BM_RmsNorm_PeerMemcpy)->Args({16, 4096})->Args({512, 4096})->UseRealTime();

// ---------------------------------------------------------------------------------------------------- rope
// Args: tokens, heads, head dim (f32, Neox, full rotary).
void BM_Rope(benchmark::State& state) {
  const int64_t tokens = state.range(0), heads = state.range(1), dim = state.range(2);
  const Tensor x = random_tensor({tokens, heads, dim}, 3);
  std::vector<int32_t> pos((size_t)tokens);
  for (int64_t i = 0; i < tokens; ++i) pos[(size_t)i] = (int32_t)(1000 + i);
  const Tensor positions = Tensor::from_vector(pos, {tokens}, cpu());
  const auto table = ops::rope_inv_freq((int)dim, 500000.0f, {});
  const Tensor inv_freq = Tensor::from_vector(table, {dim / 2}, cpu());
  RopeParams params;
  params.mode = (RopeMode)state.range(3);
  for (auto _ : state) benchmark::DoNotOptimize(ops::rope(x, positions, inv_freq, params).data());
  set_bandwidth(state, 2.0 * (double)x.nbytes());
}
BENCHMARK(BM_Rope)
    ->Args({1, 32, 128, (int)RopeMode::Neox})
    ->Args({512, 32, 128, (int)RopeMode::Neox})
    ->Args({512, 32, 128, (int)RopeMode::Normal})
    ->UseRealTime();

void BM_Rope_PeerMemcpy(benchmark::State& state) {
  const int64_t n = state.range(0) * state.range(1) * state.range(2);
  std::vector<float> src((size_t)n, 1.0f), dst(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size() * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
  }
  set_bandwidth(state, 2.0 * (double)(n * sizeof(float)));
}
BENCHMARK(BM_Rope_PeerMemcpy)->Args({1, 32, 128})->Args({512, 32, 128})->UseRealTime();

// ----------------------------------------------------------------------------------------------- attention
struct AttnShape {
  int64_t q_heads, kv_heads, tq, tk, dim;
  bool causal;
};
// Args index: 0 = prefill (512 tokens, 32 heads x 128, causal), 1 = decode (1 query, 4096 keys, GQA 32/8).
AttnShape attn_shape(int64_t which) {
  return which == 0 ? AttnShape{32, 32, 512, 512, 128, true} : AttnShape{32, 8, 1, 4096, 128, true};
}
double attn_flops(const AttnShape& s) {
  double pairs = 0;  // visible (query, key) pairs per head
  for (int64_t i = 0; i < s.tq; ++i) pairs += s.causal ? (double)(s.tk - s.tq + i + 1) : (double)s.tk;
  return pairs * (double)s.q_heads * 4.0 * (double)s.dim;
}

void BM_Attention(benchmark::State& state) {
  const AttnShape s = attn_shape(state.range(0));
  const Tensor q = random_tensor({1, s.q_heads, s.tq, s.dim}, 4);
  const Tensor k = random_tensor({1, s.kv_heads, s.tk, s.dim}, 5);
  const Tensor v = random_tensor({1, s.kv_heads, s.tk, s.dim}, 6);
  AttentionParams p;
  p.scale = 1.0f / std::sqrt((float)s.dim);
  p.causal = s.causal;
  for (auto _ : state) benchmark::DoNotOptimize(ops::attention(q, k, v, p).data());
  set_flops(state, attn_flops(s));
  state.counters["KV GB/s"] = benchmark::Counter(2.0 * (double)k.nbytes() * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Attention)->Arg(0)->Arg(1)->UseRealTime();

// Unfused peer: per query head, S = Q K^T * scale (sgemm), causal mask + softmax row by row, O = P V (sgemm).
void BM_Attention_PeerOpenBLAS(benchmark::State& state) {
  const AttnShape s = attn_shape(state.range(0));
  const Tensor q = random_tensor({1, s.q_heads, s.tq, s.dim}, 4);
  const Tensor k = random_tensor({1, s.kv_heads, s.tk, s.dim}, 5);
  const Tensor v = random_tensor({1, s.kv_heads, s.tk, s.dim}, 6);
  const float* pq = static_cast<const float*>(q.data());
  const float* pk = static_cast<const float*>(k.data());
  const float* pv = static_cast<const float*>(v.data());
  std::vector<float> scores((size_t)(s.q_heads * s.tq * s.tk)), out((size_t)(s.q_heads * s.tq * s.dim));
  const float scale = 1.0f / std::sqrt((float)s.dim);
  const int64_t group = s.q_heads / s.kv_heads;
  openblas_set_num_threads(1);
  auto head = [&](int64_t h) {
    const float* kh = pk + (h / group) * s.tk * s.dim;
    const float* vh = pv + (h / group) * s.tk * s.dim;
    float* sh = scores.data() + h * s.tq * s.tk;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)s.tq, (int)s.tk, (int)s.dim, scale,
                pq + h * s.tq * s.dim, (int)s.dim, kh, (int)s.dim, 0.0f, sh, (int)s.tk);
    for (int64_t i = 0; i < s.tq; ++i) {
      float* row = sh + i * s.tk;
      const int64_t visible = s.causal ? s.tk - s.tq + i + 1 : s.tk;
      float max = -std::numeric_limits<float>::infinity(), sum = 0;
      for (int64_t j = 0; j < visible; ++j) max = std::max(max, row[j]);
      for (int64_t j = 0; j < visible; ++j) sum += row[j] = std::exp(row[j] - max);
      for (int64_t j = 0; j < visible; ++j) row[j] /= sum;
      for (int64_t j = visible; j < s.tk; ++j) row[j] = 0;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)s.tq, (int)s.dim, (int)s.tk, 1.0f, sh, (int)s.tk, vh,
                (int)s.dim, 0.0f, out.data() + h * s.tq * s.dim, (int)s.dim);
  };
  for (auto _ : state) {
    ThreadPool::global().run(s.q_heads, head);
    benchmark::DoNotOptimize(out.data());
  }
  set_flops(state, attn_flops(s));
  state.counters["KV GB/s"] = benchmark::Counter(2.0 * (double)k.nbytes() * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Attention_PeerOpenBLAS)->Arg(0)->Arg(1)->UseRealTime();

}  // namespace
