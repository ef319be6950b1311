// Set-up shared by the per-shape GPU benchmarks (bench_conv_gpu.cpp, bench_linear_gpu.cpp): the device they time
// and their random f16 operands.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "rbee/backend/device.h"
#include "rbee/ops.h"

namespace rbee::bench {

// Loads the backend plug-ins and returns the first CUDA device, else the first ROCm one; without either, prints the
// plug-ins' load report to stderr and returns nullptr.
inline Device* first_gpu_device() {
  Registry& registry = Registry::global();
  const std::vector<std::string> report = registry.load_plugins();
  Backend* b = registry.find("cuda");
  if (!b || b->device_count() == 0) b = registry.find("rocm");
  if (!b || b->device_count() == 0) {
    fmt::print(stderr, "no GPU device; plug-ins:\n");
    for (const auto& line : report) fmt::print(stderr, "  {}\n", line);
    return nullptr;
  }
  return &b->device(0);
}

// Uniform [-scale, scale) f16 values on dev: up to 2^20 + 7 drawn on the host, repeated on the device for larger
// tensors (operands reach 3e8 elements; the odd period keeps rows from repeating each other).
inline Tensor random_f16(const Shape& shape, Device& dev, uint64_t seed, float scale = 1.f) {
  const int64_t n = shape.numel(), chunk = std::min<int64_t>(n, (1 << 20) + 7);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v((size_t)chunk);
  for (float& x : v) x = dist(rng);
  Device& cpu = Registry::global().cpu();
  const Tensor base = ops::cast(Tensor::from_vector(v, {chunk}, cpu), DType::F16).to(dev);
  if (chunk == n) return base.reshape(shape);
  const int64_t reps = (n + chunk - 1) / chunk;
  const Tensor tiled = base.reshape({1, chunk}).expand({reps, chunk}).contiguous().reshape({reps * chunk});
  return tiled.narrow(0, 0, n).contiguous().reshape(shape);
}

}  // namespace rbee::bench
