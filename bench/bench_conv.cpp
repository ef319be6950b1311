// conv2d microbenchmarks at Stable Diffusion sizes, in GFLOP/s (2 * N * Cout * Ho * Wo * Cin/g * KH * KW per call).
//
// Peer, measured in the same run: the classic im2col + OpenBLAS sgemm lowering of the same convolution
// (a plain im2col written here, then cblas_sgemm [Cout, Cin*9] x [Cin*9, Ho*Wo]). Both use every CPU the
// process may run on (rbee's ThreadPool, OpenBLAS's own threads). Compare ratios within one run only.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <random>
#include <vector>

#include "rbee/backend/device.h"
#include "rbee/ops.h"

namespace {

using rbee::DType;
using rbee::Shape;
using rbee::Tensor;

struct ConvSize {
  int64_t n, cin, h, w, cout, k, pad;
  int64_t flops() const { return 2 * n * cout * h * w * cin * k * k; }  // stride 1, "same" padding
};

// Args: {channels (in = out), spatial size}; 3x3, padding 1, like the SD VAE / UNet resnet blocks.
ConvSize size_from(const benchmark::State& state) {
  return {1, state.range(0), state.range(1), state.range(1), state.range(0), 3, 1};
}

std::vector<float> random_floats(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v((size_t)n);
  for (auto& x : v) x = dist(rng);
  return v;
}

void set_counters(benchmark::State& state, const ConvSize& s) {
  state.counters["GFLOP/s"] =
      benchmark::Counter((double)s.flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// rbee::ops::conv2d in `dtype`.
void BM_Conv2d_Rbee(benchmark::State& state, DType dtype) {
  const ConvSize s = size_from(state);
  rbee::Device& cpu = rbee::Registry::global().cpu();
  const Tensor x = Tensor::from_vector(random_floats(s.n * s.cin * s.h * s.w, 1), {s.n, s.cin, s.h, s.w}, cpu).to(dtype);
  const Tensor w = Tensor::from_vector(random_floats(s.cout * s.cin * s.k * s.k, 2), {s.cout, s.cin, s.k, s.k}, cpu)
                       .to(dtype);
  rbee::Conv2dParams p;
  p.pad_h = p.pad_w = (int)s.pad;
  for (auto _ : state) {
    Tensor out = rbee::ops::conv2d(x, w, p);
    benchmark::DoNotOptimize(out.data());
  }
  set_counters(state, s);
}

// Peer: im2col into [Cin*K*K, H*W] (row-major, the layout sgemm wants) + cblas_sgemm, F32.
void BM_Conv2d_Im2colOpenBLAS(benchmark::State& state) {
  const ConvSize s = size_from(state);
  const auto x = random_floats(s.n * s.cin * s.h * s.w, 1);
  const auto w = random_floats(s.cout * s.cin * s.k * s.k, 2);
  const int64_t depth = s.cin * s.k * s.k, positions = s.h * s.w;
  std::vector<float> col((size_t)(depth * positions)), out((size_t)(s.n * s.cout * positions));
  for (auto _ : state) {
    for (int64_t img = 0; img < s.n; ++img) {
      const float* xi = x.data() + img * s.cin * positions;
      for (int64_t c = 0; c < s.cin; ++c)
        for (int64_t ky = 0; ky < s.k; ++ky)
          for (int64_t kx = 0; kx < s.k; ++kx) {
            float* row = col.data() + ((c * s.k + ky) * s.k + kx) * positions;
            for (int64_t oy = 0; oy < s.h; ++oy) {
              const int64_t iy = oy - s.pad + ky;
              for (int64_t ox = 0; ox < s.w; ++ox) {
                const int64_t ix = ox - s.pad + kx;
                row[oy * s.w + ox] = (iy >= 0 && iy < s.h && ix >= 0 && ix < s.w) ? xi[(c * s.h + iy) * s.w + ix] : 0.f;
              }
            }
          }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)s.cout, (int)positions, (int)depth, 1.f, w.data(),
                  (int)depth, col.data(), (int)positions, 0.f, out.data() + img * s.cout * positions, (int)positions);
    }
    benchmark::DoNotOptimize(out.data());
  }
  set_counters(state, s);
}

// The GEMM alone (no im2col) at the same shape: the ceiling the lowering can reach with OpenBLAS.
void BM_Conv2d_OpenBLASGemmOnly(benchmark::State& state) {
  const ConvSize s = size_from(state);
  const int64_t depth = s.cin * s.k * s.k, positions = s.h * s.w;
  const auto w = random_floats(s.cout * depth, 2);
  const auto col = random_floats(depth * positions, 3);
  std::vector<float> out((size_t)(s.cout * positions));
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)s.cout, (int)positions, (int)depth, 1.f, w.data(),
                (int)depth, col.data(), (int)positions, 0.f, out.data(), (int)positions);
    benchmark::DoNotOptimize(out.data());
  }
  set_counters(state, s);
}

void sd_sizes(benchmark::internal::Benchmark* b) {
  b->Args({128, 64})->Args({256, 32})->Args({512, 32})->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK_CAPTURE(BM_Conv2d_Rbee, f32, DType::F32)->Apply(sd_sizes);
BENCHMARK(BM_Conv2d_Im2colOpenBLAS)->Apply(sd_sizes);
BENCHMARK(BM_Conv2d_OpenBLASGemmOnly)->Apply(sd_sizes);
BENCHMARK_CAPTURE(BM_Conv2d_Rbee, f16, DType::F16)->Apply(sd_sizes);
BENCHMARK_CAPTURE(BM_Conv2d_Rbee, bf16, DType::BF16)->Apply(sd_sizes);

}  // namespace
