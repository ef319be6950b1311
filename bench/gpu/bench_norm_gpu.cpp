// Per-shape GPU timing of the SD UNets' normalizations (f16), each against copies timed in the same run:
//   group_norm_nhwc  every channels-last group norm of the SD 1.5 (512x512) and SDXL (1024x1024) UNet steps, both
//                    CFG halves (N = 2), as the UNet calls it: resnet norm1 and conv_norm_out with SiLU, norm2 with
//                    SiLU and the time embedding as its [N, C] shift, the transformers' norm plain; 32 groups;
//   group_norm       the same shapes channels first ([N, C, H * W]: the UNet with RBEE_SD_CHANNELS_LAST=0, whose
//                    norm2 gets the embedding from conv1's bias, so SiLU or plain, no shift);
//   layer_norm       the transformer blocks' [rows, width] layer norms (weight and bias).
// Each row prints the calls per UNet step (counted from diffusers' UNet2DConditionModel configurations: SD 1.5 61
// group norms and 48 layer norms a step, SDXL 46 and 210), the time per call, bytes moved (x read once, out written
// once) over the time, that rate over the copy bandwidth (ops::copy of 256 MiB, read + write), and the time of
// ops::copy on a tensor of the same size (the floor a one-pass kernel of these bytes meets on this device: its launch,
// its L2 hits). The totals weight each row by its calls: per UNet step, each op family and its same-size copies.
//
// The kernels are whatever the process's environment selects, so one run per setting, e.g.:
//   rbee_bench_norm_gpu --label rows                                         (defaults)
//   RBEE_GROUP_NORM_NHWC_ONE_BLOCK=1 rbee_bench_norm_gpu --label old
// Timing: bench::time_per_call (graphs of 20 calls replayed, gpu_bench_setup.h). The same operands every call.
#include <algorithm>
#include <cstdlib>
#include <cstring>
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

enum class Act { Plain, Silu, SiluShift };  // transformer norm, resnet norm1 / norm_out, resnet norm2

// A group norm of the UNet: [2, h, w, c] channels last (or [2, c, h * w] channels first), 32 groups.
struct GroupShape {
  const char* part;  // "sd15" or "sdxl"
  int64_t h, w, c;
  Act act;
  int calls;  // per UNet step
  double bytes() const { return 2.0 * 2.0 * 2.0 * (double)(h * w * c); }  // f16 x read + out written, 2 images
};

// SD 1.5 (latent 64x64; levels 64, 32, 16, 8; 2 resnets a down block, 3 an up block, transformers on the first three
// levels down and the last three up, skip concatenations widening the up blocks' norm1) and SDXL (latent 128x128;
// levels 128, 64, 32; transformers only on 64 and 32, one group norm each however many blocks they hold).
const std::vector<GroupShape> kGroups = {
    {"sd15", 64, 64, 320, Act::Silu, 3},       {"sd15", 64, 64, 320, Act::SiluShift, 5},
    {"sd15", 64, 64, 320, Act::Plain, 5},      {"sd15", 64, 64, 640, Act::Silu, 2},
    {"sd15", 64, 64, 960, Act::Silu, 1},       {"sd15", 32, 32, 320, Act::Silu, 1},
    {"sd15", 32, 32, 640, Act::Silu, 1},       {"sd15", 32, 32, 640, Act::SiluShift, 5},
    {"sd15", 32, 32, 640, Act::Plain, 5},      {"sd15", 32, 32, 960, Act::Silu, 1},
    {"sd15", 32, 32, 1280, Act::Silu, 1},      {"sd15", 32, 32, 1920, Act::Silu, 1},
    {"sd15", 16, 16, 640, Act::Silu, 1},       {"sd15", 16, 16, 1280, Act::Silu, 1},
    {"sd15", 16, 16, 1280, Act::SiluShift, 5}, {"sd15", 16, 16, 1280, Act::Plain, 5},
    {"sd15", 16, 16, 1920, Act::Silu, 1},      {"sd15", 16, 16, 2560, Act::Silu, 2},
    {"sd15", 8, 8, 1280, Act::Silu, 4},        {"sd15", 8, 8, 1280, Act::SiluShift, 7},
    {"sd15", 8, 8, 1280, Act::Plain, 1},       {"sd15", 8, 8, 2560, Act::Silu, 3},
    {"sdxl", 128, 128, 320, Act::Silu, 3},     {"sdxl", 128, 128, 320, Act::SiluShift, 5},
    {"sdxl", 128, 128, 640, Act::Silu, 2},     {"sdxl", 128, 128, 960, Act::Silu, 1},
    {"sdxl", 64, 64, 320, Act::Silu, 1},       {"sdxl", 64, 64, 640, Act::Silu, 1},
    {"sdxl", 64, 64, 640, Act::SiluShift, 5},  {"sdxl", 64, 64, 640, Act::Plain, 5},
    {"sdxl", 64, 64, 960, Act::Silu, 1},       {"sdxl", 64, 64, 1280, Act::Silu, 1},
    {"sdxl", 64, 64, 1920, Act::Silu, 1},      {"sdxl", 32, 32, 640, Act::Silu, 1},
    {"sdxl", 32, 32, 1280, Act::Silu, 3},      {"sdxl", 32, 32, 1280, Act::SiluShift, 7},
    {"sdxl", 32, 32, 1280, Act::Plain, 6},     {"sdxl", 32, 32, 1920, Act::Silu, 1},
    {"sdxl", 32, 32, 2560, Act::Silu, 2},
};

// A layer norm of the transformer blocks: [rows, width] (rows = 2 x tokens of the level).
struct LayerShape {
  const char* part;
  int64_t rows, width;
  int calls;
  double bytes() const { return 2.0 * 2.0 * (double)(rows * width); }
};
const std::vector<LayerShape> kLayers = {
    {"sd15", 8192, 320, 15}, {"sd15", 2048, 640, 15},  {"sd15", 512, 1280, 15},
    {"sd15", 128, 1280, 3},  {"sdxl", 8192, 640, 30}, {"sdxl", 2048, 1280, 180},
};

const char* act_name(Act a) {
  switch (a) {
    case Act::Plain: return "plain";
    case Act::Silu: return "silu";
    case Act::SiluShift: return "silu+shift";
  }
  return "?";
}

struct Options {
  std::string label = "default", filter;
  double min_seconds = 0.05;
  bool nchw = true;
};

// Calls-weighted totals of one UNet (index 0 SD 1.5, 1 SDXL): each op family's time and its same-size copies'.
struct Totals {
  double nhwc = 0, nhwc_copy = 0, nchw = 0, nchw_copy = 0, layer = 0, layer_copy = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--label" && i + 1 < argc) o.label = argv[++i];
    else if (a == "--filter" && i + 1 < argc) o.filter = argv[++i];
    else if (a == "--min-seconds" && i + 1 < argc) o.min_seconds = std::atof(argv[++i]);
    else if (a == "--no-nchw") o.nchw = false;
    else {
      fmt::print(stderr,
                 "usage: rbee_bench_norm_gpu [--label NAME] [--filter SUBSTRING] [--min-seconds S] [--no-nchw]\n");
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

    // The copy bandwidth, as bench_linear_gpu measures it (256 MiB of f16, read + write).
    const bench::CopyLimit copy = bench::copy_limit(dev, o.min_seconds);
    const double copy_bw = copy.bytes_per_s;
    fmt::print("limit {}: copy {} MiB {:.3f} ms = {:.0f} GB/s (read + write)\n", o.label, copy.elems * 2 >> 20,
               copy.seconds * 1e3, copy_bw * 1e-9);

    Totals totals[2];
    auto part_of = [](const char* part) { return std::strcmp(part, "sdxl") == 0 ? 1 : 0; };
    auto row = [&](const char* op, const std::string& name, int calls, double t, double bytes, double t_same) {
      const double bw = bytes / t;
      fmt::print("{:<15} {:<9} {:<36} {:>3} {:>8.2f} us {:>7.0f} GB/s {:.2f} of copy bw; same-size copy {:.2f} us "
                 "({:.2f} of this time)\n",
                 op, o.label, name, calls, t * 1e6, bw * 1e-9, bw / copy_bw, t_same * 1e6, t_same / t);
      std::fflush(stdout);
    };
    // Time of ops::copy over a tensor of `numel` f16 values (cached per size: shapes repeat with other activations).
    std::vector<std::pair<int64_t, double>> same_cache;
    auto same_size_copy = [&](int64_t numel) {
      for (const auto& [n, t] : same_cache)
        if (n == numel) return t;
      const Tensor src = random_f16({numel}, dev, 21), dst = Tensor::empty({numel}, DType::F16, dev);
      const double t = time_per_call(dev, o.min_seconds, [&] { ops::copy(dst, src); });
      same_cache.emplace_back(numel, t);
      return t;
    };

    for (const GroupShape& s : kGroups) {
      const std::string name = fmt::format("{} {}x{}x{} {}", s.part, s.h, s.w, s.c, act_name(s.act));
      if (!o.filter.empty() && name.find(o.filter) == std::string::npos) continue;
      const int64_t hw = s.h * s.w;
      const Tensor x = random_f16({2, hw, s.c}, dev, 1, 3.f);
      const Tensor g = random_f16({s.c}, dev, 2), b = random_f16({s.c}, dev, 3);
      const Tensor shift = s.act == Act::SiluShift ? random_f16({2, s.c}, dev, 4) : Tensor();
      const bool silu = s.act != Act::Plain;
      const double t_same = same_size_copy(2 * hw * s.c);
      Totals& tot = totals[part_of(s.part)];
      const double t = time_per_call(dev, o.min_seconds, [&] {
        (void)ops::group_norm_nhwc(x, 32, g, b, 1e-5f, silu, shift);
      });
      tot.nhwc += t * s.calls;
      tot.nhwc_copy += t_same * s.calls;
      row("group_norm_nhwc", name, s.calls, t, s.bytes(), t_same);
      if (!o.nchw) continue;
      const Tensor xc = x.reshape({2, s.c, hw});  // the same values read channels first
      const double tc = time_per_call(dev, o.min_seconds, [&] {
        (void)(silu ? ops::group_norm_silu(xc, 32, g, b, 1e-5f) : ops::group_norm(xc, 32, g, b, 1e-5f));
      });
      tot.nchw += tc * s.calls;
      tot.nchw_copy += t_same * s.calls;
      row("group_norm", name, s.calls, tc, s.bytes(), t_same);
    }
    for (const LayerShape& s : kLayers) {
      const std::string name = fmt::format("{} [{} x {}]", s.part, s.rows, s.width);
      if (!o.filter.empty() && name.find(o.filter) == std::string::npos) continue;
      const Tensor x = random_f16({s.rows, s.width}, dev, 5, 3.f);
      const Tensor g = random_f16({s.width}, dev, 6), b = random_f16({s.width}, dev, 7);
      const double t_same = same_size_copy(s.rows * s.width);
      const double t = time_per_call(dev, o.min_seconds, [&] { (void)ops::layer_norm(x, g, b, 1e-5f); });
      Totals& tot = totals[part_of(s.part)];
      tot.layer += t * s.calls;
      tot.layer_copy += t_same * s.calls;
      row("layer_norm", name, s.calls, t, s.bytes(), t_same);
    }
    const char* parts[2] = {"SD 1.5 step", "SDXL step"};
    for (int p = 0; p < 2; ++p) {
      const Totals& t = totals[p];
      if (t.nhwc == 0 && t.layer == 0) continue;
      fmt::print("total {:<9} {} (calls-weighted): group_norm_nhwc {:.3f} ms (same-size copies {:.3f}); group_norm "
                 "NCHW {:.3f} ms (copies {:.3f}); layer_norm {:.3f} ms (copies {:.3f})\n",
                 o.label, parts[p], t.nhwc * 1e3, t.nhwc_copy * 1e3, t.nchw * 1e3, t.nchw_copy * 1e3, t.layer * 1e3,
                 t.layer_copy * 1e3);
    }
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
