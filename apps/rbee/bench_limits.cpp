#include "bench_limits.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "rbee/core/error.h"
#include "rbee/core/tensor.h"
#include "rbee/ops.h"

namespace rbee::cli {

namespace {

// Calls `once` (which must end with the device idle) until `min_seconds` have passed; returns calls per second.
template <typename Fn>
double calls_per_second(Fn&& once, double min_seconds) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  int64_t calls = 0;
  double elapsed = 0;
  do {
    once();
    ++calls;
    elapsed = std::chrono::duration<double>(clock::now() - t0).count();
  } while (elapsed < min_seconds);
  return (double)calls / elapsed;
}

}  // namespace

HardwareRates measure_hardware(Device& device, int64_t copy_bytes, int gemm_n, int rounds, double min_seconds) {
  RBEE_CHECK(copy_bytes >= 4096, "bench: the bandwidth buffer must hold at least 4096 bytes, got {}", copy_bytes);
  RBEE_CHECK(gemm_n >= 16, "bench: the GEMM size must be at least 16, got {}", gemm_n);
  RBEE_CHECK(rounds >= 1 && min_seconds > 0, "bench: {} rounds of {} s cannot measure a rate", rounds, min_seconds);
  HardwareRates r;
  r.gemm_n = gemm_n;

  // Copy: a [rows, 1024] F32 buffer, written once first so that every page is mapped before timing.
  const int64_t cols = 1024, rows = copy_bytes / (cols * 4);
  r.copy_bytes = rows * cols * 4;
  const Tensor src = ops::full({rows, cols}, 1.5, DType::F32, device);
  const Tensor dst = ops::zeros({rows, cols}, DType::F32, device);
  const double moved = 2.0 * (double)r.copy_bytes;  // read + write
  auto memcpy_once = [&] {
    device.copy_on_device(dst.data(), src.data(), (size_t)r.copy_bytes);
    device.synchronize();
  };
  auto affine_once = [&] {
    const Tensor out = ops::affine(src, 1.0, 0.0);
    device.synchronize();
  };
  memcpy_once();
  affine_once();
  for (int i = 0; i < rounds; ++i) {
    const double by_copy = moved * calls_per_second(memcpy_once, min_seconds);
    const double by_affine = moved * calls_per_second(affine_once, min_seconds);
    if (by_copy > r.copy_bytes_per_s) {
      r.copy_bytes_per_s = by_copy;
      r.copy_method = "copy_on_device";
    }
    if (by_affine > r.copy_bytes_per_s) {
      r.copy_bytes_per_s = by_affine;
      r.copy_method = "affine";
    }
  }

  // GEMM: random F32 operands (not constants, which some kernels could shortcut).
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values((size_t)gemm_n * gemm_n);
  for (float& v : values) v = dist(rng);
  const Tensor a = Tensor::from_vector(values, {gemm_n, gemm_n}, device);
  for (float& v : values) v = dist(rng);
  const Tensor b = Tensor::from_vector(values, {gemm_n, gemm_n}, device);
  // The best of F32 and F16 operands (F16 runs on tensor cores where a GPU has them; on CPUs F32 wins).
  const double flops = 2.0 * (double)gemm_n * gemm_n * gemm_n;
  for (DType dtype : {DType::F32, DType::F16}) {
    const Tensor ta = dtype == DType::F32 ? a : ops::cast(a, dtype), tb = dtype == DType::F32 ? b : ops::cast(b, dtype);
    auto gemm_once = [&] {
      const Tensor c = ops::matmul(ta, tb);
      device.synchronize();
    };
    gemm_once();
    for (int i = 0; i < rounds; ++i) {
      const double rate = flops * calls_per_second(gemm_once, min_seconds);
      if (rate > r.gemm_flops_per_s) {
        r.gemm_flops_per_s = rate;
        r.gemm_dtype = dtype_name(dtype);
      }
    }
  }
  return r;
}

double prompt_flops(const llm::ModelConfig& c, int n_prompt) {
  const double h = c.hidden_size, q = (double)c.n_heads * c.head_dim, kv = (double)c.n_kv_heads * c.head_dim;
  const double per_layer_weights = h * q + 2.0 * h * kv + q * h + 3.0 * h * c.intermediate_size;
  const double n = n_prompt;
  const double linear = 2.0 * n * per_layer_weights * c.n_layers + 2.0 * h * c.vocab_size;
  const double attention = 4.0 * q * n * (n + 1.0) / 2.0 * c.n_layers;
  return linear + attention;
}

double decode_bytes_per_token(const llm::ModelConfig& c, int64_t weight_bytes, DType kv_dtype, int n_gen) {
  const double kv_per_position = 2.0 * c.n_layers * c.n_kv_heads * c.head_dim * dtype_type_size(kv_dtype);
  return (double)weight_bytes + kv_per_position * (double)n_gen / 2.0;
}

}  // namespace rbee::cli
