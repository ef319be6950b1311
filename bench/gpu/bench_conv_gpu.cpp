// Per-shape GPU timing of conv2d_fused (f16, bias per channel) over every convolution shape of the SD 1.5 UNet at
// 512x512 (batch 2: both CFG halves; calls per UNet step), of the VAE decoder (batch 1; calls per decode) and of the
// SDXL UNet at 1024x1024 (batch 2; calls per step), next
// to the vendor Blas's f16 GEMM on the same M (Cout), N (images * Ho * Wo) and K (Cin * KH * KW), measured in the
// same run: the rate the im2col lowering's GEMM alone reaches, i.e. what an implicit GEMM must match.
//
// The convolution path is whatever conv2d_fused picks under the process's environment, so one run per path:
//   RBEE_CONV_IMPLICIT=0 rbee_bench_conv_gpu --label im2col            (im2col + cuBLAS + epilogue)
//   RBEE_CONV_IMPLICIT=0 RBEE_CONV_IGEMM=1 rbee_bench_conv_gpu --label igemm --no-gemm
//   RBEE_CONV_IMPLICIT=1 rbee_bench_conv_gpu --label implicit --no-gemm   (conv_implicit.cu on every shape it takes)
//   RBEE_CONV_CUDNN=1 rbee_bench_conv_gpu --label cudnn --no-gemm        (cuDNN on every shape it takes, NCHW)
//   rbee_bench_conv_gpu --label default --no-gemm                     (the shipped choice per shape)
// (RBEE_CONV_CUDNN=0 with the first three: today's paths without cuDNN.) --nhwc adds, per shape, the channels-last op
// conv2d_fused_nhwc on NHWC copies of the same operands (x [N, H, W, Cin], w [Cout, KH, KW, Cin]; its own path
// choice: cuDNN's NHWC kernels for k x k, a linear layer for 1x1) beside the NCHW one, and its own total.
// --image-bias gives the UNet shapes a
// [N, Cout] bias (the time embedding of the resnets' first convolutions) instead of a [Cout] one. --filter sdxl (or
// unet, vae) times one part only.
// Each row: "conv LABEL NAME calls ms TF/s [nhwc ms TF/s] [gemm ms TF/s conv/gemm [nhwc/gemm]]"; the totals weight
// each shape by its calls.
// Timing: warm-up calls, then repeats until --min-seconds have passed (and at least 5), synchronize() and the
// wall clock around the loop (the ops' device API has no events).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
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
using Clock = std::chrono::steady_clock;

struct Shape2d {
  const char* part;  // "unet" (SD 1.5, per step), "vae" (per decode) or "sdxl" (per step)
  int64_t n, cin, hw, cout, k, stride, calls;
  int64_t ho() const { return (hw + 2 * (k / 2) - k) / stride + 1; }
  double flops() const { return 2.0 * n * cout * ho() * ho() * cin * k * k; }
  std::string name() const {
    return fmt::format("{} [{},{},{},{}] k{}{} ->{}", part, n, cin, hw, hw, k, stride > 1 ? " s2" : "", cout);
  }
};

// SD 1.5 UNet at a 64x64 latent, both CFG halves; calls per UNet step (resnet convs, 1x1 shortcuts, transformer
// proj_in / proj_out, down- and upsampler convs). conv_in / conv_out (4 channels) take the generic path.
const std::vector<Shape2d> kShapes = {
    {"unet", 2, 320, 64, 320, 3, 1, 7},   {"unet", 2, 640, 64, 320, 3, 1, 2},   {"unet", 2, 960, 64, 320, 3, 1, 1},
    {"unet", 2, 640, 64, 640, 3, 1, 1},   {"unet", 2, 320, 64, 320, 3, 2, 1},   {"unet", 2, 320, 32, 640, 3, 1, 1},
    {"unet", 2, 640, 32, 640, 3, 1, 6},   {"unet", 2, 960, 32, 640, 3, 1, 1},   {"unet", 2, 1280, 32, 640, 3, 1, 1},
    {"unet", 2, 1920, 32, 640, 3, 1, 1},  {"unet", 2, 1280, 32, 1280, 3, 1, 1}, {"unet", 2, 640, 32, 640, 3, 2, 1},
    {"unet", 2, 640, 16, 1280, 3, 1, 1},  {"unet", 2, 1280, 16, 1280, 3, 1, 7}, {"unet", 2, 1920, 16, 1280, 3, 1, 1},
    {"unet", 2, 2560, 16, 1280, 3, 1, 2}, {"unet", 2, 1280, 16, 1280, 3, 2, 1}, {"unet", 2, 1280, 8, 1280, 3, 1, 11},
    {"unet", 2, 2560, 8, 1280, 3, 1, 3},  {"unet", 2, 320, 64, 320, 1, 1, 10},  {"unet", 2, 640, 64, 320, 1, 1, 2},
    {"unet", 2, 960, 64, 320, 1, 1, 1},   {"unet", 2, 640, 32, 640, 1, 1, 10},  {"unet", 2, 320, 32, 640, 1, 1, 1},
    {"unet", 2, 960, 32, 640, 1, 1, 1},   {"unet", 2, 1280, 32, 640, 1, 1, 1},  {"unet", 2, 1920, 32, 640, 1, 1, 1},
    {"unet", 2, 1280, 16, 1280, 1, 1, 10}, {"unet", 2, 640, 16, 1280, 1, 1, 1}, {"unet", 2, 1920, 16, 1280, 1, 1, 1},
    {"unet", 2, 2560, 16, 1280, 1, 1, 2}, {"unet", 2, 1280, 8, 1280, 1, 1, 2},  {"unet", 2, 2560, 8, 1280, 1, 1, 3},
    // VAE decoder at 512x512 output (batch 1): mid and up blocks.
    {"vae", 1, 512, 64, 512, 3, 1, 10},   {"vae", 1, 512, 128, 512, 3, 1, 7},   {"vae", 1, 512, 256, 512, 3, 1, 1},
    {"vae", 1, 512, 256, 256, 3, 1, 1},   {"vae", 1, 256, 256, 256, 3, 1, 5},   {"vae", 1, 512, 256, 256, 1, 1, 1},
    {"vae", 1, 256, 512, 256, 3, 1, 1},   {"vae", 1, 256, 512, 128, 3, 1, 1},   {"vae", 1, 128, 512, 128, 3, 1, 5},
    {"vae", 1, 256, 512, 128, 1, 1, 1},
    // SDXL base UNet at a 128x128 latent (1024x1024), both CFG halves: its 128x128, 64x64 and 32x32 levels (resnet
    // convs, 1x1 shortcuts, down- and upsampler convs; the transformers' projections are linear layers in SDXL).
    {"sdxl", 2, 320, 128, 320, 3, 1, 7},  {"sdxl", 2, 320, 128, 320, 3, 2, 1},  {"sdxl", 2, 960, 128, 320, 3, 1, 1},
    {"sdxl", 2, 640, 128, 320, 3, 1, 2},  {"sdxl", 2, 640, 128, 640, 3, 1, 1},  {"sdxl", 2, 320, 64, 640, 3, 1, 1},
    {"sdxl", 2, 640, 64, 640, 3, 1, 6},   {"sdxl", 2, 640, 64, 640, 3, 2, 1},   {"sdxl", 2, 1920, 64, 640, 3, 1, 1},
    {"sdxl", 2, 1280, 64, 640, 3, 1, 1},  {"sdxl", 2, 960, 64, 640, 3, 1, 1},   {"sdxl", 2, 1280, 64, 1280, 3, 1, 1},
    {"sdxl", 2, 640, 32, 1280, 3, 1, 1},  {"sdxl", 2, 1280, 32, 1280, 3, 1, 10}, {"sdxl", 2, 2560, 32, 1280, 3, 1, 2},
    {"sdxl", 2, 1920, 32, 1280, 3, 1, 1}, {"sdxl", 2, 960, 128, 320, 1, 1, 1},  {"sdxl", 2, 640, 128, 320, 1, 1, 2},
    {"sdxl", 2, 320, 64, 640, 1, 1, 1},   {"sdxl", 2, 1920, 64, 640, 1, 1, 1},  {"sdxl", 2, 1280, 64, 640, 1, 1, 1},
    {"sdxl", 2, 960, 64, 640, 1, 1, 1},   {"sdxl", 2, 640, 32, 1280, 1, 1, 1},  {"sdxl", 2, 2560, 32, 1280, 1, 1, 2},
    {"sdxl", 2, 1920, 32, 1280, 1, 1, 1},
};

struct Options {
  std::string label = "default", filter;
  bool gemm = true, image_bias = false, nhwc = false;
  double min_seconds = 0.05;
};

double time_call(Device& dev, double min_seconds, const std::function<void()>& fn) {
  for (int i = 0; i < 2; ++i) fn();
  dev.synchronize();
  int reps = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  while (reps < 5 || elapsed < min_seconds) {
    fn();
    if (++reps % 4 == 0 || reps >= 5) {
      dev.synchronize();
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    }
  }
  dev.synchronize();
  return std::chrono::duration<double>(Clock::now() - start).count() / reps;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--label" && i + 1 < argc) o.label = argv[++i];
    else if (a == "--no-gemm") o.gemm = false;
    else if (a == "--image-bias") o.image_bias = true;
    else if (a == "--nhwc") o.nhwc = true;
    else if (a == "--filter" && i + 1 < argc) o.filter = argv[++i];
    else if (a == "--min-seconds" && i + 1 < argc) o.min_seconds = std::atof(argv[++i]);
    else {
      fmt::print(stderr,
                 "usage: rbee_bench_conv_gpu [--label NAME] [--no-gemm] [--image-bias] [--nhwc] [--filter SUBSTRING] "
                 "[--min-seconds S]\n");
      return 2;
    }
  }
  try {
    log::init_from_env();  // RBEE_LOG_LEVEL=debug: which convolution library plan took each shape, or why none
    Device* gpu = bench::first_gpu_device();
    if (!gpu) return 1;
    Device& dev = *gpu;
    const DeviceInfo info = dev.info();
    fmt::print("device: {} ({}), {} compute units; path label {}\n", info.name, info.arch, info.compute_units, o.label);
    const char* part_names[3] = {"UNet step", "VAE decode", "SDXL step"};
    double total_conv[3] = {0, 0, 0}, total_gemm[3] = {0, 0, 0}, total_nhwc[3] = {0, 0, 0};
    bool seen[3] = {false, false, false};
    for (const Shape2d& s : kShapes) {
      const std::string name = s.name();
      if (!o.filter.empty() && name.find(o.filter) == std::string::npos) continue;
      const int64_t ho = s.ho(), K = s.cin * s.k * s.k, np = s.n * ho * ho;
      const Tensor x = random_f16({s.n, s.cin, s.hw, s.hw}, dev, 1);
      const Tensor w = random_f16({s.cout, s.cin, s.k, s.k}, dev, 2, 0.05f);
      const Tensor bias = o.image_bias ? random_f16({s.n, s.cout}, dev, 3) : random_f16({s.cout}, dev, 3);
      Conv2dParams p;
      p.stride_h = p.stride_w = (int)s.stride;
      p.pad_h = p.pad_w = (int)(s.k / 2);
      const double tc =
          time_call(dev, o.min_seconds, [&] { (void)ops::conv2d_fused(x, w, bias, Tensor(), p, false); });
      const int part = std::strcmp(s.part, "vae") == 0 ? 1 : std::strcmp(s.part, "sdxl") == 0 ? 2 : 0;
      seen[part] = true;
      total_conv[part] += tc * (double)s.calls;
      std::string row = fmt::format("conv {:<9} {:<34} {:>3} {:>9.4f} ms {:>7.1f} TF/s", o.label, name, s.calls,
                                    tc * 1e3, s.flops() / tc * 1e-12);
      double tn = 0;
      if (o.nhwc) {
        const Tensor xn = x.permute({0, 2, 3, 1}).contiguous(), wn = w.permute({0, 2, 3, 1}).contiguous();
        tn = time_call(dev, o.min_seconds, [&] { (void)ops::conv2d_fused_nhwc(xn, wn, bias, Tensor(), p, false); });
        total_nhwc[part] += tn * (double)s.calls;
        row += fmt::format("  nhwc {:>9.4f} ms {:>7.1f} TF/s", tn * 1e3, s.flops() / tn * 1e-12);
      }
      if (o.gemm) {
        // The lowering's GEMM alone: w [Cout, K] . cols [K, N * Ho * Wo], f16 in and out.
        const Tensor a = w.reshape({s.cout, K});
        const Tensor cols = random_f16({K, np}, dev, 4);
        const double tg = time_call(dev, o.min_seconds, [&] { (void)ops::matmul(a, cols); });
        total_gemm[part] += tg * (double)s.calls;
        row += fmt::format("  gemm {:>9.4f} ms {:>7.1f} TF/s  conv/gemm {:>5.2f}", tg * 1e3, s.flops() / tg * 1e-12,
                           tc / tg);
        if (o.nhwc) row += fmt::format("  nhwc/gemm {:>5.2f}", tn / tg);
      }
      fmt::print("{}\n", row);
      std::fflush(stdout);
    }
    for (int part = 0; part < 3; ++part) {
      if (!seen[part]) continue;
      std::string row = fmt::format("total {:<9} {} (calls-weighted): conv {:.3f} ms", o.label, part_names[part],
                                    total_conv[part] * 1e3);
      if (o.nhwc) row += fmt::format(", nhwc {:.3f} ms", total_nhwc[part] * 1e3);
      if (o.gemm) row += fmt::format(", gemm alone {:.3f} ms", total_gemm[part] * 1e3);
      fmt::print("{}\n", row);
    }
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
