// Microbenchmarks of the reduce family on the CPU, each next to a peer timed in the same run:
//   softmax f32 [4096, 32000] (a batch of vocabulary-sized logits): ours (all threads, one thread) vs a plain
//     scalar loop (std::exp, one thread), the code one writes without SIMD;
//   sum f32 [4096, 32000] over rows (axis 1) and over columns (axis 0): ours vs OpenBLAS sgemv with a vector of
//     ones (the same streaming read, done by a tuned library; it accumulates in f32, we in double).
// "GB/s" counts the bytes each call must move: x read once plus out written once. The streaming-read
// bandwidth these numbers are measured against comes from bench_memory.cpp.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "rbee/backend/device.h"
#include "rbee/core/thread_pool.h"
#include "rbee/ops.h"

namespace {

constexpr int64_t kRows = 4096;
constexpr int64_t kCols = 32000;

rbee::Device& cpu() { return rbee::Registry::global().cpu(); }

// The shared input: logits-like values in [-8, 8), made once (a 512 MB tensor).
const rbee::Tensor& logits() {
  static const rbee::Tensor x = [] {
    std::vector<float> v((size_t)(kRows * kCols));
    uint64_t s = 0x2545F4914F6CDD1Dull;
    for (auto& f : v) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      f = (float)((double)(s >> 11) * 0x1.0p-53 * 16.0 - 8.0);
    }
    return rbee::Tensor::from_vector(v, {kRows, kCols}, cpu());
  }();
  return x;
}

void set_bytes(benchmark::State& state, int64_t bytes_per_call) {
  state.counters["GB/s"] =
      benchmark::Counter((double)bytes_per_call / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- softmax ----

void BM_Softmax_F32(benchmark::State& state) {
  const int threads = (int)state.range(0);
  if (threads > 0) rbee::ThreadPool::set_global_threads(threads);
  const rbee::Tensor& x = logits();
  benchmark::DoNotOptimize(rbee::ops::softmax(x).data());  // warm-up: the output block's first-touch page faults
  for (auto _ : state) {
    rbee::Tensor out = rbee::ops::softmax(x);
    benchmark::DoNotOptimize(out.data());
  }
  if (threads > 0) rbee::ThreadPool::set_global_threads(rbee::ThreadPool::default_threads());
  state.counters["threads"] = threads > 0 ? threads : rbee::ThreadPool::default_threads();
  set_bytes(state, 2 * kRows * kCols * 4);
}
// 0: the default thread count; 1: one thread.
BENCHMARK(BM_Softmax_F32)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Softmax_F32_ScalarPeer(benchmark::State& state) {
  const float* x = static_cast<const float*>(logits().data());
  std::vector<float> out((size_t)(kRows * kCols));  // zero-filled, so already paged in
  for (auto _ : state) {
    for (int64_t r = 0; r < kRows; ++r) {
      const float* xr = x + r * kCols;
      float* yr = out.data() + r * kCols;
      float m = xr[0];
      for (int64_t i = 1; i < kCols; ++i) m = xr[i] > m ? xr[i] : m;
      float s = 0.f;
      for (int64_t i = 0; i < kCols; ++i) s += (yr[i] = std::exp(xr[i] - m));
      const float inv = 1.f / s;
      for (int64_t i = 0; i < kCols; ++i) yr[i] *= inv;
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["threads"] = 1;
  set_bytes(state, 2 * kRows * kCols * 4);
}
BENCHMARK(BM_Softmax_F32_ScalarPeer)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---- sums ----

// range(0): the reduced axis (1: one sum per row, 0: one per column).
void BM_Sum_F32(benchmark::State& state) {
  const int axis = (int)state.range(0);
  const rbee::Tensor& x = logits();
  for (auto _ : state) {
    rbee::Tensor out = rbee::ops::sum(x, axis);
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(state, kRows * kCols * 4 + (axis == 1 ? kRows : kCols) * 4);
}
BENCHMARK(BM_Sum_F32)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Sum_F32_OpenBlasPeer(benchmark::State& state) {
  const int axis = (int)state.range(0);
  const float* x = static_cast<const float*>(logits().data());
  const std::vector<float> ones((size_t)std::max(kRows, kCols), 1.0f);
  std::vector<float> out((size_t)std::max(kRows, kCols));
  for (auto _ : state) {
    // Row sums: y[M] = X . 1; column sums: y[N] = X^T . 1.
    cblas_sgemv(CblasRowMajor, axis == 1 ? CblasNoTrans : CblasTrans, (int)kRows, (int)kCols, 1.0f, x, (int)kCols,
                ones.data(), 1, 0.0f, out.data(), 1);
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(state, kRows * kCols * 4 + (axis == 1 ? kRows : kCols) * 4);
}
BENCHMARK(BM_Sum_F32_OpenBlasPeer)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
