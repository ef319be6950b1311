// Set-up shared by the per-shape GPU benchmarks (bench_conv_gpu.cpp, bench_linear_gpu.cpp, bench_norm_gpu.cpp): the
// device they time, their random f16 operands, and device time per call as a replayed graph.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "rbee/backend/device.h"
#include "rbee/core/error.h"
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

// Calls of fn recorded in one graph by time_per_call.
constexpr int kCallsPerGraph = 20;

// Seconds per call of fn on dev: one eager call (tuning, plans, allocations), then kCallsPerGraph calls recorded as
// one device graph and replayed until min_seconds have passed (at least 5 replays), wall clock around the replays
// after a synchronize: device time per call without the host's launch costs, as the UNet's replayed steps run.
// Devices without graphs, or whose capture fails to start: eager calls.
inline double time_per_call(Device& dev, double min_seconds, const std::function<void()>& fn) {
  using Clock = std::chrono::steady_clock;
  fn();
  dev.synchronize();
  std::function<void()> step = [&] {
    for (int i = 0; i < kCallsPerGraph; ++i) fn();
  };
  Device::GraphId graph = -1;
  bool capture = dev.supports_graphs();
  if (capture) {
    step();  // the caching allocator's blocks for the capture
    dev.synchronize();
    try {
      dev.begin_graph_capture();
    } catch (const Error&) {
      capture = false;  // a device that cannot capture after all (tools/gpu_emu): eager calls
    }
  }
  if (capture) {
    try {
      step();
    } catch (...) {
      (void)dev.end_graph_capture();
      throw;
    }
    graph = dev.end_graph_capture();
  }
  auto run = [&] { graph >= 0 ? dev.replay_graph(graph) : step(); };
  run();
  dev.synchronize();
  int reps = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  while (reps < 5 || elapsed < min_seconds) {
    run();
    ++reps;
    dev.synchronize();
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  if (graph >= 0) dev.release_graph(graph);
  return elapsed / reps / kCallsPerGraph;
}

// Copy bandwidth of dev, bytes read + written per second: ops::copy of copy_elems f16 values (below 2^20 any count,
// else a multiple of 2^20; 2^27 = 256 MiB by default) timed by time_per_call. The limit the per-shape benches hold
// memory-bound rows against.
struct CopyLimit {
  int64_t elems = 0;
  double seconds = 0;       // per copy
  double bytes_per_s = 0;   // 2 * 2 bytes per element over `seconds`
};
inline CopyLimit copy_limit(Device& dev, double min_seconds, int64_t copy_elems = int64_t{128} << 20) {
  const int64_t chunk_elems = std::min<int64_t>(int64_t{1} << 20, copy_elems);
  RBEE_CHECK(copy_elems % chunk_elems == 0, "copy_limit: {} values is not a multiple of 2^20", copy_elems);
  const Tensor chunk = random_f16({chunk_elems}, dev, 13);
  const Tensor src =
      chunk.reshape({1, chunk_elems}).expand({copy_elems / chunk_elems, chunk_elems}).contiguous().reshape({copy_elems});
  const Tensor dst = Tensor::empty({copy_elems}, DType::F16, dev);
  CopyLimit c;
  c.elems = copy_elems;
  c.seconds = time_per_call(dev, min_seconds, [&] { ops::copy(dst, src); });
  c.bytes_per_s = 2.0 * 2.0 * (double)copy_elems / c.seconds;
  return c;
}

}  // namespace rbee::bench
