// Memory-bandwidth ceiling: a plain multithreaded streaming read of a 1 GiB buffer, through the same thread
// pool the kernels use. Bandwidth-bound kernels (quantized matvec in bench_quant.cpp) report their weight
// GB/s against this number from the same run.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "rbee/core/thread_pool.h"

namespace {

constexpr size_t kBytes = size_t{1} << 30;

// The buffer, allocated and written once (so its pages exist) before the first measurement.
const uint64_t* buffer() {
  static uint64_t* data = [] {
    auto* p = static_cast<uint64_t*>(std::aligned_alloc(64, kBytes));
    const int64_t words = (int64_t)(kBytes / 8);
    rbee::ThreadPool::global().parallel_for(words, 1 << 20, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = (uint64_t)i * 0x9E3779B97F4A7C15ull;
    });
    return p;
  }();
  return data;
}

// Sums every word with eight independent accumulators (no dependency chain limits the loads).
uint64_t sum_words(const uint64_t* p, int64_t n) {
  uint64_t s[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) s[j] += p[i + j];
  }
  for (; i < n; ++i) s[0] += p[i];
  uint64_t total = 0;
  for (uint64_t v : s) total += v;
  return total;
}

void BM_MemoryStreamRead(benchmark::State& state) {
  const uint64_t* p = buffer();
  const int64_t words = (int64_t)(kBytes / 8);
  auto& pool = rbee::ThreadPool::global();
  // One contiguous slice per thread, so each core streams its own part of the buffer.
  const int64_t threads = pool.size();
  std::vector<uint64_t> partial((size_t)threads);
  for (auto _ : state) {
    pool.run(threads, [&](int64_t t) {
      const int64_t b = words * t / threads, e = words * (t + 1) / threads;
      partial[(size_t)t] = sum_words(p + b, e - b);
    });
    benchmark::DoNotOptimize(partial.data());
  }
  state.counters["GB/s"] = benchmark::Counter((double)kBytes * (double)state.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
  state.counters["threads"] = (double)threads;
}
// "max" over --benchmark_repetitions: the best rate of the runs (see bench_quant.cpp).
double max_of(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); }
BENCHMARK(BM_MemoryStreamRead)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0)->ComputeStatistics("max", max_of);

}  // namespace
