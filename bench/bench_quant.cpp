// Quantized matmul microbenchmarks.
//
//   BM_QMatvec/<type>/<N>/<K>: decode-sized out[1, N] = x[1, K] . w[N, K]^T; reports the weight bytes streamed
//     per second ("GB/s"), to compare with BM_MemoryStreamRead (bench_memory.cpp) from the same run.
//   BM_QMatmulPrompt/<type>/<M>/<N>/<K>: prompt-sized qmatmul, in GFLOP/s (2 M N K per call).
//   BM_SgemmOpenBLAS/<M>/<N>/<K>: OpenBLAS sgemm on f32 weights of the same shape, the dense peer for the prompt
//     case (same flops, 4-8x the weight bytes).
//   Both also report "GFLOP/cpu-s": flops per second of CPU time of the whole process (every thread). On a
//   machine shared with other work, where wall-clock rates mostly measure the other work, this is the kernels'
//   own rate; run it with one thread (RBEE_THREADS=1 OPENBLAS_NUM_THREADS=1), since a pool that spin-waits
//   counts its waiting as CPU time.
//   BM_QDotKernelL2/<type>/<rows>: one core, the row kernel alone on 48 weight rows of K = 4096 that stay in L2:
//     the compute ceiling of a core ("GB/s" of weights), to set against its share of memory bandwidth.
//   BM_QMatVecKernelL2/<type>: the same for the decode matvec kernel (quant/matvec.h, 8 weight rows per call) where
//     this CPU has one (skipped otherwise; RBEE_CPU_MATVEC=0 skips it too).
// Weights: 64 distinct quantized rows of N(0, 1) data repeated to N rows (bytes stream from memory all the same;
// the kernels' speed does not depend on the values).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <map>
#include <random>
#include <tuple>

#include "backends/cpu/quant/matvec.h"
#include "backends/cpu/quant/quant.h"
#include "rbee/backend/device.h"
#include "rbee/ops.h"

namespace {

using rbee::DType;
using rbee::Tensor;

rbee::Device& cpu() { return rbee::Registry::global().cpu(); }

// CPU seconds used so far by every thread of this process.
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
// Sets "GFLOP/cpu-s" from the flops of the loop and the process CPU time it took (from `cpu_start`).
void set_cpu_rate(benchmark::State& state, double flops_per_iteration, double cpu_start) {
  const double cpu_s = process_cpu_seconds() - cpu_start;
  state.counters["GFLOP/cpu-s"] = cpu_s > 0 ? flops_per_iteration * (double)state.iterations() / cpu_s / 1e9 : 0.0;
}

std::vector<float> normal_values(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> v((size_t)n);
  for (auto& x : v) x = normal(rng);
  return v;
}

// w [n, k] of `type`, cached per shape so each benchmark builds it once.
const Tensor& weights(DType type, int64_t n, int64_t k) {
  static std::map<std::tuple<int, int64_t, int64_t>, Tensor> cache;
  auto key = std::make_tuple((int)type, n, k);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const int64_t distinct = std::min<int64_t>(64, n);
  const Tensor seed_rows = Tensor::from_vector(normal_values(distinct * k, 5), {distinct, k}, cpu());
  const Tensor packed = rbee::is_quantized(type) ? rbee::ops::quantize(seed_rows, type) : rbee::ops::cast(seed_rows, type);
  const int64_t row_bytes = rbee::dtype_row_bytes(type, k);
  std::vector<unsigned char> seed_bytes((size_t)(distinct * row_bytes));
  packed.copy_to_host(seed_bytes.data(), seed_bytes.size());
  std::vector<unsigned char> all((size_t)(n * row_bytes));
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(all.data() + r * row_bytes, seed_bytes.data() + (r % distinct) * row_bytes, (size_t)row_bytes);
  }
  return cache.emplace(key, Tensor::from_host(all.data(), all.size(), {n, k}, type, cpu())).first->second;
}

void BM_QMatvec(benchmark::State& state, DType type) {
  const int64_t n = state.range(0), k = state.range(1);
  const Tensor& w = weights(type, n, k);
  const Tensor x = Tensor::from_vector(normal_values(k, 9), {1, k}, cpu());
  for (auto _ : state) {
    Tensor out = rbee::ops::qmatmul(x, w);
    benchmark::DoNotOptimize(out.data());
  }
  const double bytes = (double)rbee::dtype_row_bytes(type, k) * (double)n;
  state.counters["GB/s"] = benchmark::Counter(bytes * (double)state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void BM_QMatmulPrompt(benchmark::State& state, DType type) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const Tensor& w = weights(type, n, k);
  const Tensor x = Tensor::from_vector(normal_values(m * k, 11), {m, k}, cpu());
  const double cpu_start = process_cpu_seconds();
  for (auto _ : state) {
    Tensor out = rbee::ops::qmatmul(x, w);
    benchmark::DoNotOptimize(out.data());
  }
  set_cpu_rate(state, 2.0 * (double)(m * n * k), cpu_start);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * (double)(m * n * k) * (double)state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void BM_SgemmOpenBLAS(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const auto x = normal_values(m * k, 11);
  const auto w = normal_values(n * k, 5);
  std::vector<float> out((size_t)(m * n));
  const double cpu_start = process_cpu_seconds();
  for (auto _ : state) {
    // out[M, N] = x[M, K] . w[N, K]^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.f, x.data(), (int)k, w.data(),
                (int)k, 0.f, out.data(), (int)n);
    benchmark::DoNotOptimize(out.data());
  }
  set_cpu_rate(state, 2.0 * (double)(m * n * k), cpu_start);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * (double)(m * n * k) * (double)state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void BM_QDotKernelL2(benchmark::State& state, DType type) {
  namespace q = rbee::cpu::quant;
  const int64_t n = 48, k = 4096;
  const int rows = (int)state.range(0);
  const Tensor& w = weights(type, n, k);
  const int64_t w_row = rbee::dtype_row_bytes(type, k);
  const int64_t x_row = (q::activation_row_bytes(type, k) + 63) / 64 * 64;
  std::vector<unsigned char> xq((size_t)(rows * x_row + 64));
  unsigned char* xb = xq.data() + (64 - reinterpret_cast<uintptr_t>(xq.data()) % 64) % 64;
  const auto xf = normal_values(rows * k, 3);
  for (int r = 0; r < rows; ++r) q::quantize_activation_row(type, xf.data() + r * k, xb + r * x_row, k);
  const q::RowDotFn dot = q::row_dot_kernel(type);
  std::vector<float> out((size_t)(rows * n));
  const char* wp = static_cast<const char*>(w.data());
  for (auto _ : state) {
    for (int64_t j = 0; j < n; ++j) dot(k, wp + j * w_row, xb, (size_t)x_row, rows, out.data() + j, n);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GB/s"] =
      benchmark::Counter((double)(n * w_row) * (double)state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * (double)(rows * n * k) * (double)state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}

void BM_QMatVecKernelL2(benchmark::State& state, DType type) {
  namespace q = rbee::cpu::quant;
  const q::MatVecFn mv = q::matvec_kernel(type);
  if (mv == nullptr) {
    state.SkipWithError("no matvec kernel for this type on this CPU");
    return;
  }
  const int64_t n = 48, k = 4096;
  const Tensor& w = weights(type, n, k);
  const int64_t w_row = rbee::dtype_row_bytes(type, k);
  std::vector<unsigned char> xq((size_t)(q::activation_row_bytes(type, k) + 64));
  unsigned char* xb = xq.data() + (64 - reinterpret_cast<uintptr_t>(xq.data()) % 64) % 64;
  const auto xf = normal_values(k, 3);
  q::quantize_activation_row(type, xf.data(), xb, k);
  std::vector<float> out((size_t)n);
  const char* wp = static_cast<const char*>(w.data());
  for (auto _ : state) {
    for (int64_t j = 0; j < n; j += q::kMatVecRows) mv(k, wp + j * w_row, w_row, q::kMatVecRows, xb, out.data() + j);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GB/s"] =
      benchmark::Counter((double)(n * w_row) * (double)state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

const DType kBenchTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q6_K};
// The prompt benchmarks also cover the 16-bit float weights (their prompt GEMM: qgemm_float_avx512.cpp).
const DType kPromptTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F16, DType::BF16};
// The one-core kernel benchmarks also cover the other types with a decode matvec kernel.
const DType kKernelTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q8_0,
                              DType::Q4_K, DType::Q5_K, DType::Q6_K};
// BM_QMatmulPrompt runs the prompt GEMM (src/backends/cpu/quant/qgemm.h) where the CPU has one; RBEE_CPU_QGEMM=0
// runs the row kernels instead, for an A/B on the same machine.

// With --benchmark_repetitions=N, "max" reports the best rate of the N runs (times in that row are the worst;
// read the counters): on a shared machine the best run is the one least disturbed by other processes.
double max_of(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); }

int register_benchmarks() {
  for (DType t : kBenchTypes) {
    const std::string name(rbee::dtype_name(t));
    benchmark::RegisterBenchmark(("BM_QMatvec/" + name).c_str(), BM_QMatvec, t)
        ->Args({4096, 4096})
        ->Args({11008, 4096})
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime()
        ->ComputeStatistics("max", max_of);
  }
  for (DType t : kPromptTypes) {
    const std::string name(rbee::dtype_name(t));
    benchmark::RegisterBenchmark(("BM_QMatmulPrompt/" + name).c_str(), BM_QMatmulPrompt, t)
        ->Args({4, 4096, 4096})
        ->Args({8, 4096, 4096})
        ->Args({16, 4096, 4096})
        ->Args({128, 4096, 4096})
        ->Args({512, 4096, 4096})
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->ComputeStatistics("max", max_of);
  }
  for (DType t : kKernelTypes) {
    const std::string name(rbee::dtype_name(t));
    benchmark::RegisterBenchmark(("BM_QDotKernelL2/" + name).c_str(), BM_QDotKernelL2, t)
        ->Arg(1)
        ->Arg(4)
        ->Unit(benchmark::kMicrosecond)
        ->ComputeStatistics("max", max_of);
  }
  for (DType t : kKernelTypes) {
    const std::string name(rbee::dtype_name(t));
    benchmark::RegisterBenchmark(("BM_QMatVecKernelL2/" + name).c_str(), BM_QMatVecKernelL2, t)
        ->Unit(benchmark::kMicrosecond)
        ->ComputeStatistics("max", max_of);
  }
  benchmark::RegisterBenchmark("BM_SgemmOpenBLAS", BM_SgemmOpenBLAS)
      ->Args({128, 4096, 4096})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->ComputeStatistics("max", max_of);
  return 0;
}
const int kRegistered = register_benchmarks();

}  // namespace
