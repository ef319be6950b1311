// Matmul microbenchmarks: rbee's matmul (f32, f16, bf16) next to OpenBLAS sgemm in the same binary, so the
// ratio comes from one run on one machine state. Counters: GFLOP/s (2*M*N*K per product).
//
//   rbee_bench_ops --benchmark_filter=Matmul --benchmark_repetitions=5 --benchmark_enable_random_interleaving
//
// OpenBLAS runs with as many threads as rbee's pool (RBEE_THREADS or every CPU of the process).
#include <cblas.h>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "backends/cpu/gemm.h"
#include "rbee/backend/device.h"
#include "rbee/core/half.h"
#include "rbee/core/thread_pool.h"
#include "rbee/ops.h"

namespace rbee {
namespace {

Device& cpu() { return Registry::global().cpu(); }

std::vector<float> random_floats(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v((size_t)n);
  for (auto& x : v) x = dist(rng);
  return v;
}

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed) {
  const Tensor f = Tensor::from_vector(random_floats(shape.numel(), seed), shape, cpu());
  return dtype == DType::F32 ? f : ops::cast(f, dtype);
}

void set_flops(benchmark::State& state, double m, double n, double k) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * n * k * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = ThreadPool::global().size();
}

// ops::matmul of a [M, K] by b [K, N], both row-major; `b_transposed`: b is the transpose of a stored [N, K]
// (a linear layer's weight).
void BM_Matmul(benchmark::State& state, DType dtype, bool b_transposed) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const Tensor a = random_tensor({m, k}, dtype, 1);
  const Tensor b = b_transposed ? random_tensor({n, k}, dtype, 2).transpose(0, 1) : random_tensor({k, n}, dtype, 2);
  for (auto _ : state) {
    Tensor out = ops::matmul(a, b);
    benchmark::DoNotOptimize(out.data());
  }
  set_flops(state, (double)m, (double)n, (double)k);
  state.SetLabel(cpu::gemm_target_name());
}

// OpenBLAS cblas_sgemm on the same shapes (row-major, no transposes), threads matched to ours.
void BM_OpenBlasSgemm(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  openblas_set_num_threads(ThreadPool::global().size());
  const auto a = random_floats(m * k, 1), b = random_floats(k * n, 2);
  std::vector<float> c((size_t)(m * n));
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, a.data(), (int)k, b.data(),
                (int)n, 0.0f, c.data(), (int)n);
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, (double)m, (double)n, (double)k);
  state.SetLabel(openblas_get_corename());
}

// Wall-clock time (the products run on several threads). On a shared machine the fastest repetitions show
// what the code can do; "min" and "max" statistics are reported next to the mean and median for that.
void stats(benchmark::internal::Benchmark* b) {
  b->UseRealTime()
      ->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); })
      ->ComputeStatistics("max", [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); });
}
// OpenBLAS sgemv for the decode shape (M = 1): y[N] = B^T x with B [K, N] row-major, OpenBLAS's best routine
// for one row.
void BM_OpenBlasSgemv(benchmark::State& state) {
  const int64_t k = state.range(1), n = state.range(2);
  openblas_set_num_threads(ThreadPool::global().size());
  const auto x = random_floats(k, 1), b = random_floats(k * n, 2);
  std::vector<float> y((size_t)n);
  for (auto _ : state) {
    cblas_sgemv(CblasRowMajor, CblasTrans, (int)k, (int)n, 1.0f, b.data(), (int)n, x.data(), 1, 0.0f, y.data(), 1);
    benchmark::DoNotOptimize(y.data());
  }
  set_flops(state, 1.0, (double)n, (double)k);
  state.SetLabel(openblas_get_corename());
}

void square(benchmark::internal::Benchmark* b) {
  b->Args({1024, 1024, 1024})->Unit(benchmark::kMillisecond);
  stats(b);
}
void decode(benchmark::internal::Benchmark* b) {
  b->Args({1, 4096, 4096})->Unit(benchmark::kMicrosecond);
  stats(b);
}

BENCHMARK_CAPTURE(BM_Matmul, f32, DType::F32, false)->Apply(square);
BENCHMARK(BM_OpenBlasSgemm)->Apply(square);
BENCHMARK_CAPTURE(BM_Matmul, f16, DType::F16, false)->Apply(square);
BENCHMARK_CAPTURE(BM_Matmul, bf16, DType::BF16, false)->Apply(square);
BENCHMARK_CAPTURE(BM_Matmul, f32_decode, DType::F32, false)->Apply(decode);
BENCHMARK_CAPTURE(BM_Matmul, f32_decode_bt, DType::F32, true)->Apply(decode);
BENCHMARK_CAPTURE(BM_Matmul, f16_decode, DType::F16, false)->Apply(decode);
BENCHMARK_CAPTURE(BM_Matmul, f16_decode_bt, DType::F16, true)->Apply(decode);
BENCHMARK_CAPTURE(BM_Matmul, bf16_decode_bt, DType::BF16, true)->Apply(decode);
BENCHMARK(BM_OpenBlasSgemm)->Apply(decode);
BENCHMARK(BM_OpenBlasSgemv)->Apply(decode);

}  // namespace
}  // namespace rbee
