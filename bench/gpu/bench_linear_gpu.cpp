// Per-shape GPU timing of the SD UNets' linear layers (ops::linear: x [M, K] . w [N, K]^T + bias + residual, f16)
// and of their layer norms and GEGLUs, each against a limit measured in the same run:
//   linear      FLOPs (2 M N K) over the time, and that rate over the measured f16 GEMM rate (ops::linear on
//               8192 x 8192 x 8192, the largest rate this device's library reaches here);
//   layer_norm  bytes (x read once, out written once) over the time, and that over the measured copy bandwidth
//   geglu       (ops::copy of 256 MiB, bytes read + written).
// Shapes: SD 1.5 at 512x512 and SDXL at 1024x1024, both CFG halves (M = 2 x tokens: 2 x H x W of the level, or
// 2 x 77 for the text context's keys and values, or 2 for the time embedding); calls per UNet step from the
// per-layer profile of one image (RBEE_OP_PROFILE=1). The totals weight each shape by its calls.
//
// The linear path is whatever ops::linear picks under the process's environment, so one run per setting:
//   RBEE_LINEAR_TUNE=0 rbee_bench_linear_gpu --label heuristic     (cuBLASLt heuristic's first algorithm)
//   rbee_bench_linear_gpu --label tuned                            (each shape's fastest candidate by timing, the default)
// RBEE_LOG_LEVEL=debug prints each shape's tuning (candidate chosen, its time and the heuristic's first's).
// Timing: bench::time_per_call (gpu_bench_setup.h: graphs of 20 calls replayed for --min-seconds). The same operands
// every call (they stay in L2 where they fit, as in the UNet).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "gpu_bench_setup.h"
#include "rbee/backend/device.h"
#include "rbee/core/log.h"
#include "rbee/ops.h"

namespace {

using namespace rbee;
using bench::random_f16;
using bench::time_per_call;

struct LinearShape {
  const char* part;  // "sd15" or "sdxl"
  const char* what;
  int64_t m, k, n;
  bool bias, residual;
  int calls;  // per UNet step
  double flops() const { return 2.0 * (double)m * (double)n * (double)k; }
};

// SD 1.5 (M: 8192 at 64x64, 2048 at 32x32, 512 at 16x16, 128 at 8x8, 154 context rows, 2 time rows) and SDXL
// (8192 at 64x64, 2048 at 32x32); q and the fused q/k/v or k/v projections have no bias, the attention outputs and
// ff_out add the residual, SDXL's proj_in / proj_out are linear layers (SD 1.5's are 1x1 convolutions).
const std::vector<LinearShape> kLinear = {
    {"sd15", "attn q", 8192, 320, 320, false, false, 5},     {"sd15", "attn out", 8192, 320, 320, true, true, 10},
    {"sd15", "qkv", 8192, 320, 960, false, false, 5},        {"sd15", "ff in", 8192, 320, 2560, true, false, 5},
    {"sd15", "ff out", 8192, 1280, 320, true, true, 5},      {"sd15", "attn q", 2048, 640, 640, false, false, 5},
    {"sd15", "attn out", 2048, 640, 640, true, true, 10},    {"sd15", "qkv", 2048, 640, 1920, false, false, 5},
    {"sd15", "ff in", 2048, 640, 5120, true, false, 5},      {"sd15", "ff out", 2048, 2560, 640, true, true, 5},
    {"sd15", "attn q", 512, 1280, 1280, false, false, 5},    {"sd15", "attn out", 512, 1280, 1280, true, true, 10},
    {"sd15", "qkv", 512, 1280, 3840, false, false, 5},       {"sd15", "ff in", 512, 1280, 10240, true, false, 5},
    {"sd15", "ff out", 512, 5120, 1280, true, true, 5},      {"sd15", "attn q", 128, 1280, 1280, false, false, 1},
    {"sd15", "attn out", 128, 1280, 1280, true, true, 2},    {"sd15", "qkv", 128, 1280, 3840, false, false, 1},
    {"sd15", "ff in", 128, 1280, 10240, true, false, 1},     {"sd15", "ff out", 128, 5120, 1280, true, true, 1},
    {"sd15", "ctx kv", 154, 768, 640, false, false, 5},      {"sd15", "ctx kv", 154, 768, 1280, false, false, 5},
    {"sd15", "ctx kv", 154, 768, 2560, false, false, 6},     {"sd15", "time emb", 2, 1280, 1280, true, false, 13},
    {"sd15", "time emb", 2, 1280, 640, true, false, 5},      {"sd15", "time emb", 2, 1280, 320, true, false, 5},
    {"sdxl", "attn q", 2048, 1280, 1280, false, false, 60},  {"sdxl", "attn out", 2048, 1280, 1280, true, true, 120},
    {"sdxl", "proj in", 2048, 1280, 1280, true, false, 6},   {"sdxl", "proj out", 2048, 1280, 1280, true, true, 6},
    {"sdxl", "qkv", 2048, 1280, 3840, false, false, 60},     {"sdxl", "ff in", 2048, 1280, 10240, true, false, 60},
    {"sdxl", "ff out", 2048, 5120, 1280, true, true, 60},    {"sdxl", "ctx kv", 154, 2048, 2560, false, false, 60},
    {"sdxl", "attn q", 8192, 640, 640, false, false, 10},    {"sdxl", "attn out", 8192, 640, 640, true, true, 20},
    {"sdxl", "proj in", 8192, 640, 640, true, false, 5},     {"sdxl", "proj out", 8192, 640, 640, true, true, 5},
    {"sdxl", "qkv", 8192, 640, 1920, false, false, 10},      {"sdxl", "ff in", 8192, 640, 5120, true, false, 10},
    {"sdxl", "ff out", 8192, 2560, 640, true, true, 10},     {"sdxl", "ctx kv", 154, 2048, 1280, false, false, 10},
    {"sdxl", "time emb", 2, 1280, 1280, true, false, 9},
};

// Row-wise ops: layer_norm over [rows, width] or geglu of [rows, 2 * width] -> [rows, width].
struct RowShape {
  const char* part;
  const char* op;  // "layer_norm" or "geglu"
  int64_t rows, width;
  int calls;
  double bytes() const {
    return std::strcmp(op, "geglu") == 0 ? 2.0 * (double)rows * (double)width * 3 : 2.0 * (double)rows * width * 2;
  }
};

const std::vector<RowShape> kRows = {
    {"sd15", "layer_norm", 8192, 320, 15},  {"sd15", "layer_norm", 2048, 640, 15}, {"sd15", "layer_norm", 512, 1280, 15},
    {"sd15", "layer_norm", 128, 1280, 3},   {"sd15", "geglu", 8192, 1280, 5},      {"sd15", "geglu", 2048, 2560, 5},
    {"sd15", "geglu", 512, 5120, 5},        {"sd15", "geglu", 128, 5120, 1},       {"sdxl", "layer_norm", 2048, 1280, 180},
    {"sdxl", "layer_norm", 8192, 640, 30},  {"sdxl", "geglu", 2048, 5120, 60},     {"sdxl", "geglu", 8192, 2560, 10},
};

struct Options {
  std::string label = "default", filter;
  double min_seconds = 0.05;
  int64_t gemm_size = 8192;  // the limit GEMM's M = N = K (smaller for tools/gpu_emu)
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--label" && i + 1 < argc) o.label = argv[++i];
    else if (a == "--filter" && i + 1 < argc) o.filter = argv[++i];
    else if (a == "--min-seconds" && i + 1 < argc) o.min_seconds = std::atof(argv[++i]);
    else if (a == "--gemm-size" && i + 1 < argc) o.gemm_size = std::max(64, std::atoi(argv[++i]));
    else {
      fmt::print(stderr,
                 "usage: rbee_bench_linear_gpu [--label NAME] [--filter SUBSTRING] [--min-seconds S] [--gemm-size N]\n");
      return 2;
    }
  }
  try {
    log::init_from_env();
    Device* gpu = bench::first_gpu_device();
    if (!gpu) return 1;
    Device& dev = *gpu;
    const DeviceInfo info = dev.info();
    fmt::print("device: {} ({}), {} compute units; label {}\n", info.name, info.arch, info.compute_units, o.label);

    // The two limits, measured here.
    const int64_t big = o.gemm_size;
    const Tensor ga = random_f16({big, big}, dev, 11), gb = random_f16({big, big}, dev, 12, 0.01f);
    const double t_gemm = time_per_call(dev, o.min_seconds, [&] { (void)ops::linear(ga, gb); });
    const double gemm_rate = 2.0 * (double)big * big * big / t_gemm;
    const int64_t chunk_elems = std::min<int64_t>(int64_t{1} << 20, big * big);
    const int64_t copy_elems = std::min<int64_t>(128, big * big / chunk_elems * 2) * chunk_elems;  // 256 MiB of f16
    const bench::CopyLimit copy = bench::copy_limit(dev, o.min_seconds, copy_elems);
    const double t_copy = copy.seconds, copy_bw = copy.bytes_per_s;
    fmt::print("limit {}: f16 GEMM {}^3 (ops::linear) {:.3f} ms = {:.1f} TFLOP/s; copy {} MiB {:.3f} ms = {:.0f} GB/s "
               "(read + write)\n",
               o.label, big, t_gemm * 1e3, gemm_rate * 1e-12, copy_elems * 2 >> 20, t_copy * 1e3, copy_bw * 1e-9);

    double total[2] = {0, 0}, total_flops[2] = {0, 0}, total_rows[2] = {0, 0};
    auto part_of = [](const char* part) { return std::strcmp(part, "sdxl") == 0 ? 1 : 0; };
    for (const LinearShape& s : kLinear) {
      const std::string name = fmt::format("{} {} [{} x {}] -> {}{}{}", s.part, s.what, s.m, s.k, s.n,
                                           s.bias ? " +bias" : "", s.residual ? " +res" : "");
      if (!o.filter.empty() && name.find(o.filter) == std::string::npos) continue;
      const Tensor x = random_f16({s.m, s.k}, dev, 1), w = random_f16({s.n, s.k}, dev, 2, 0.05f);
      const Tensor bias = s.bias ? random_f16({s.n}, dev, 3) : Tensor();
      const Tensor res = s.residual ? random_f16({s.m, s.n}, dev, 4) : Tensor();
      const double t = time_per_call(dev, o.min_seconds, [&] { (void)ops::linear(x, w, bias, res); });
      const double rate = s.flops() / t;
      total[part_of(s.part)] += t * s.calls;
      total_flops[part_of(s.part)] += s.flops() * s.calls;
      fmt::print("linear {:<9} {:<48} {:>3} {:>8.2f} us {:>7.1f} TF/s  {:.2f} of GEMM rate\n", o.label, name, s.calls,
                 t * 1e6, rate * 1e-12, rate / gemm_rate);
      std::fflush(stdout);
    }
    for (const RowShape& s : kRows) {
      const bool geglu = std::strcmp(s.op, "geglu") == 0;
      const std::string name = fmt::format("{} {} [{} x {}]", s.part, s.op, s.rows, geglu ? 2 * s.width : s.width);
      if (!o.filter.empty() && name.find(o.filter) == std::string::npos) continue;
      const Tensor x = random_f16({s.rows, geglu ? 2 * s.width : s.width}, dev, 5);
      const Tensor g = random_f16({s.width}, dev, 6), beta = random_f16({s.width}, dev, 7);
      const double t = time_per_call(dev, o.min_seconds, [&] {
        (void)(geglu ? ops::geglu(x) : ops::layer_norm(x, g, beta, 1e-5f));
      });
      total_rows[part_of(s.part)] += t * s.calls;
      const double bw = s.bytes() / t;
      fmt::print("rows   {:<9} {:<48} {:>3} {:>8.2f} us {:>7.0f} GB/s  {:.2f} of copy bandwidth\n", o.label, name,
                 s.calls, t * 1e6, bw * 1e-9, bw / copy_bw);
      std::fflush(stdout);
    }
    const char* parts[2] = {"SD 1.5 step", "SDXL step"};
    for (int p = 0; p < 2; ++p) {
      if (total[p] == 0 && total_rows[p] == 0) continue;
      fmt::print("total {:<9} {} (calls-weighted): linear {:.3f} ms for {:.3f} TFLOP = {:.1f} TFLOP/s ({:.2f} of GEMM "
                 "rate); layer_norm + geglu {:.3f} ms\n",
                 o.label, parts[p], total[p] * 1e3, total_flops[p] * 1e-12,
                 total[p] > 0 ? total_flops[p] / total[p] * 1e-12 : 0.0,
                 total[p] > 0 ? total_flops[p] / total[p] / gemm_rate : 0.0, total_rows[p] * 1e3);
    }
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
