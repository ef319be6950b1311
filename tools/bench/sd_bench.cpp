// rbee_sd_bench: seconds per image of an SD pipeline on one device, independent of the rbee CLI and workers.
//
//   rbee_sd_bench --random-sd15 --backend cuda --f16 --steps 20 --width 512 --height 512
//   rbee_sd_bench --random-sdxl --backend cuda --f16 --steps 20 --width 1024 --height 1024 --guidance 5
//   rbee_sd_bench --model /path/to/diffusers/folder --backend cpu --steps 4 --width 256 --height 256
//
// --random-sd15 / --random-sdxl build the full-size SD 1.5 / SDXL base architecture with random weights in memory
// (no checkpoint needed); the prompt goes through the tiny CLIP vocabularies of tests/data/tiny_sd/sd15/tokenizer
// (or --tokenizer DIR) and, for SDXL, tests/data/tiny_sd/sdxl/tokenizer_2 (or --tokenizer-2 DIR).
// Prints load time, then per run: total seconds, UNet seconds per step (both CFG halves), VAE decode seconds.
// The diffusers peer for the same configuration is tools/bench/sd_bench_diffusers.py.
// RBEE_OP_PROFILE=1 adds a per-layer time table of the timed runs (rbee/sd/profile.h; it synchronizes after every
// layer, so the timed runs get slower).
//
// --compare-cpu (with --model, a small pipeline such as tests/data/tiny_sd/sd15) generates the same image on the
// CPU in f32 and on the chosen device (f16 activations with --f16) and fails (exit 2) when the images differ by
// more than --tol-mean (mean absolute difference) or --tol-max (largest difference), on the [-1, 1] scale.
//
// On GPUs the load includes Pipeline::prepare at the model's default size (--no-prepare: not; then the first image
// makes the per-shape plans); a request of another size is prepared once after the load, timed apart. Before the
// runs, the device's f16 GEMM rate is measured (ops::linear 8192 x 8192 x 8192); after them, the UNet step's
// floating-point operations (linear layers, convolutions, attention, counted as the layers ran: Pipeline::
// unet_step_flops) over its measured time give "UNet step: X TFLOP, Y ms, Z TFLOP/s = R of the measured GEMM rate".
//
// --attention times the attention calls of the SD 1.5 and SDXL UNets alone (no model): microseconds and TFLOP/s a
// call (switches such as RBEE_ATTN_FLASH=0 apply).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>
#include <string>

#include <CLI/CLI.hpp>

#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "rbee/sd/pipeline.h"
#include "rbee/sd/png.h"
#include "rbee/sd/profile.h"
#include "sd_attention_bench.h"

using Clock = std::chrono::steady_clock;

// Generates one image of request r with `pipe` (decoded, F32 [1, 3, H, W] on the host).
static rbee::Tensor image_on_host(const rbee::sd::Pipeline& pipe, const rbee::sd::GenerateRequest& r) {
  return pipe.decode(pipe.generate_latents(r)).to(rbee::Registry::global().cpu()).contiguous();
}

static double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The device's f16 GEMM rate in flop/s: ops::linear on 8192 x 8192 x 8192 (operands: 2^20 normal values drawn on
// the host, tiled), 2 untimed calls, then the fastest of 3 rounds of 10 calls between two synchronizations (one
// round varied by 15% between runs on the H100, 658-770 TFLOP/s, while the card's clocks settled).
static double measured_gemm_rate(rbee::Device& device) {
  constexpr int64_t n = 8192, chunk = int64_t{1} << 20;
  auto operand = [&](uint64_t seed, double scale) {
    const rbee::Tensor c = rbee::ops::affine(rbee::sd::randn({1, chunk}, seed, 0, device), scale, 0.0);
    return c.expand({n * n / chunk, chunk}).contiguous().reshape({n, n}).to(rbee::DType::F16);
  };
  const rbee::Tensor a = operand(1, 1.0), b = operand(2, 0.01);
  for (int i = 0; i < 2; ++i) (void)rbee::ops::linear(a, b);
  device.synchronize();
  constexpr int reps = 10;
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) (void)rbee::ops::linear(a, b);
    device.synchronize();
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * (double)n * n * n * reps / best;
}

int main(int argc, char** argv) {
  CLI::App app{"rbee_sd_bench: Stable Diffusion seconds per image"};
  std::string model, tokenizer = std::string(RBEE_SOURCE_DIR) + "/tests/data/tiny_sd/sd15/tokenizer";
  std::string tokenizer_2 = std::string(RBEE_SOURCE_DIR) + "/tests/data/tiny_sd/sdxl/tokenizer_2";
  std::string backend = "auto", sampler = "euler", out_png, prompt = "a photograph of an astronaut riding a horse";
  bool random_sd15 = false, random_sdxl = false, f16 = false, compare_cpu = false, prompt_cache = false;
  bool no_unet_graph = false;
  double tol_mean = 1e-2, tol_max = 0.1;
  int device_index = 0, steps = 20, width = 512, height = 512, runs = 3, warmup = 1, batch = 1;
  double guidance = 7.5;
  uint64_t seed = 42;
  app.add_option("--model", model, "diffusers folder (model_index.json, unet/, vae/, text_encoder/, ...)");
  app.add_flag("--random-sd15", random_sd15, "full-size SD 1.5 architecture with random weights");
  app.add_flag("--random-sdxl", random_sdxl, "full-size SDXL base architecture with random weights");
  app.add_option("--tokenizer", tokenizer, "CLIP tokenizer folder for --random-sd15 / --random-sdxl");
  app.add_option("--tokenizer-2", tokenizer_2, "second CLIP tokenizer folder for --random-sdxl");
  app.add_option("--backend", backend, "auto|cpu|cuda|rocm");
  app.add_option("--device", device_index, "device index");
  app.add_flag("--f16", f16, "f16 weights (and f16 activations on GPUs)");
  app.add_option("--steps", steps);
  app.add_option("--width", width);
  app.add_option("--height", height);
  app.add_option("--guidance", guidance);
  app.add_option("--sampler", sampler, "euler|euler_a|ddim|dpmpp_2m|dpmpp_2m_karras|lcm|heun|pndm|unipc|dpmpp_sde");
  app.add_option("--seed", seed);
  app.add_option("--prompt", prompt);
  app.add_option("--runs", runs, "timed images (batches with --batch)");
  app.add_option("--batch", batch, "images per request (seeds seed .. seed + batch - 1), one UNet batch");
  app.add_option("--warmup", warmup, "untimed images first");
  app.add_option("--png", out_png, "write the last image here (parameters in a tEXt chunk)");
  app.add_flag("--compare-cpu", compare_cpu, "compare one image with the CPU's (f32) instead of timing");
  app.add_flag("--prompt-cache", prompt_cache,
               "reuse the text encoders' output of a repeated prompt (as a worker does); off by default so every "
               "timed image runs the text encoders, as the diffusers peer does");
  app.add_flag("--no-unet-graph", no_unet_graph,
               "run every UNet step eagerly (default on GPUs: the step is recorded once as a device graph and "
               "replayed)");
  bool no_prepare = false;
  app.add_flag("--no-prepare", no_prepare,
               "skip the load's prepare step (GPU): the first image makes the per-shape plans, as before");
  bool attention = false;
  app.add_flag("--attention", attention, "time the SD 1.5 / SDXL UNets' attention calls alone (no model)");
  app.add_option("--tol-mean", tol_mean, "--compare-cpu: largest mean absolute difference");
  app.add_option("--tol-max", tol_max, "--compare-cpu: largest absolute difference");
  CLI11_PARSE(app, argc, argv);

  try {
    RBEE_CHECK(attention || (int)random_sd15 + (int)random_sdxl + (int)!model.empty() == 1,
               "give exactly one of --model, --random-sd15 and --random-sdxl");
    rbee::Registry& registry = rbee::Registry::global();
    for (const auto& line : registry.load_plugins()) std::fprintf(stderr, "plugin: %s\n", line.c_str());
    std::string reason;
    rbee::Device& device = registry.select(backend, device_index, &reason);
    std::printf("device: %s (%s)\n", device.info().name.c_str(), reason.c_str());
    if (attention) {
      run_sd_attention_bench(device);
      return 0;
    }

    rbee::sd::LoadOptions opt;
    opt.device = &device;
    opt.dtype = f16 ? rbee::DType::F16 : rbee::DType::F32;
    opt.load_vae_encoder = false;
    opt.prompt_cache = prompt_cache ? 8 : 0;
    opt.unet_graphs = !no_unet_graph;
    opt.prepare = !no_prepare;
    auto t0 = Clock::now();
    rbee::sd::Pipeline pipe =
        random_sd15   ? rbee::sd::Pipeline::random(rbee::sd::PipelineSpec::sd15(tokenizer), opt)
        : random_sdxl ? rbee::sd::Pipeline::random(rbee::sd::PipelineSpec::sdxl(tokenizer, tokenizer_2), opt)
                      : rbee::sd::Pipeline::load(model, opt);
    device.synchronize();
    std::printf("load: %.2f s (prepare at the default size %lldx%lld: %.2f s)\n", seconds_since(t0),
                (long long)pipe.limits().default_side, (long long)pipe.limits().default_side,
                pipe.load_prepare_seconds());

    rbee::sd::GenerateRequest r;
    r.prompt = prompt;
    r.steps = steps;
    r.width = width;
    r.height = height;
    r.guidance_scale = guidance;
    r.sampler = rbee::sd::diffusion_scheduler_kind_from_name(sampler);
    r.seed = seed;
    r.batch = batch;
    if (compare_cpu) {
      RBEE_CHECK(!model.empty(), "--compare-cpu needs --model");
      rbee::sd::LoadOptions cpu_opt;
      cpu_opt.load_vae_encoder = false;
      const rbee::sd::Pipeline cpu_pipe = rbee::sd::Pipeline::load(model, cpu_opt);
      const rbee::Tensor want = image_on_host(cpu_pipe, r), got = image_on_host(pipe, r);
      RBEE_CHECK(want.shape() == got.shape(), "image shapes differ");
      const std::vector<float> a = want.to_vector<float>(), b = got.to_vector<float>();
      double sum = 0, worst = 0;
      bool finite = true;
      for (size_t i = 0; i < a.size(); ++i) {
        const double d = std::fabs((double)a[i] - (double)b[i]);
        finite = finite && std::isfinite(b[i]);
        sum += d;
        worst = std::max(worst, d);
      }
      const double mean = sum / (double)a.size();
      const bool ok = finite && mean <= tol_mean && worst <= tol_max;
      const rbee::sd::Pipeline::GraphCounts g = pipe.unet_graph_counts();
      std::printf("compare-cpu: UNet step graphs: %d recorded, %d replays\n", g.captures, g.replays);
      std::printf("compare-cpu: %s %s vs cpu f32, %dx%d, %d steps: mean |diff| %.3g (tol %.3g), max |diff| %.3g "
                  "(tol %.3g)%s: %s\n",
                  device.info().backend.c_str(), f16 ? "f16" : "f32", width, height, steps, mean, tol_mean, worst,
                  tol_max, finite ? "" : ", non-finite values", ok ? "PASS" : "FAIL");
      return ok ? 0 : 2;
    }
    const bool gpu = device.info().backend != "cpu";
    if (gpu && !no_prepare && (width != pipe.limits().default_side || height != pipe.limits().default_side))
      std::printf("prepare %dx%d: %.2f s\n", width, height, pipe.prepare(width, height));
    const double gemm_rate = gpu ? measured_gemm_rate(device) : 0.0;
    if (gpu) std::printf("GEMM rate: %.1f TFLOP/s (f16 8192 x 8192 x 8192 through ops::linear, measured here)\n",
                         gemm_rate * 1e-12);
    Clock::time_point step_t0;
    double unet_s = 0;
    r.on_step = [&](int, int) {
      device.synchronize();
      unet_s += seconds_since(step_t0);
      step_t0 = Clock::now();
      return true;
    };
    double best = 1e30, total = 0, step_s = 0;
    rbee::sd::Image img;
    for (int i = 0; i < warmup + runs; ++i) {
      unet_s = 0;
      auto t = Clock::now();
      step_t0 = t;  // the first "step" also holds the prompt encoding
      rbee::Tensor lat = pipe.generate_latents(r);
      device.synchronize();
      auto td = Clock::now();
      rbee::Tensor image = pipe.decode(lat);
      device.synchronize();
      double dec = seconds_since(td), all = seconds_since(t);
      img = rbee::sd::Pipeline::to_image(image.narrow(0, 0, 1));
      if (batch == 1)
        std::printf("%s %d: %.3f s/image (denoise %.3f s = %.4f s/step incl. prompt, vae decode %.3f s)\n",
                    i < warmup ? "warmup" : "run", i, all, unet_s, unet_s / steps, dec);
      else
        std::printf("%s %d: %.3f s for %d images = %.2f images/s (denoise %.3f s = %.4f s/step incl. prompt, vae "
                    "decode %.3f s)\n",
                    i < warmup ? "warmup" : "run", i, all, batch, batch / all, unet_s, unet_s / steps, dec);
      if (i + 1 == warmup) rbee::sd::profile::reset();
      if (i >= warmup) {
        best = std::min(best, all);
        total += all;
        step_s += unet_s / steps;
      }
    }
    const rbee::sd::Pipeline::GraphCounts g = pipe.unet_graph_counts();
    std::printf("UNet step graphs: %d recorded, %d replays\n", g.captures, g.replays);
    if (runs > 0)
      std::printf("result: %dx%d, %d steps, %s, guidance %.1f, %s weights, batch %d: mean %.3f s/image, best %.3f "
                  "s/image (%.2f images/s)\n",
                  width, height, steps, sampler.c_str(), guidance, f16 ? "f16" : "f32", batch, total / runs / batch,
                  best / batch, batch * runs / total);
    if (runs > 0 && pipe.unet_step_flops() > 0) {
      // The timed runs' mean seconds per step (each run's denoise over its steps, the prompt encoding included).
      const double flops = pipe.unet_step_flops(), s = step_s / runs;
      std::printf("UNet step: %.4g TFLOP, %.2f ms, %.1f TFLOP/s", flops * 1e-12, s * 1e3, flops / s * 1e-12);
      if (gemm_rate > 0) std::printf(" = %.2f of the measured GEMM rate", flops / s / gemm_rate);
      std::printf("\n");
    }
    if (rbee::sd::profile::enabled()) std::printf("%s", rbee::sd::profile::report().c_str());
    if (!out_png.empty()) {
      std::string params = prompt + "\nSteps: " + std::to_string(steps) + ", Sampler: " + sampler +
                           ", CFG scale: " + std::to_string(guidance) + ", Seed: " + std::to_string(seed) +
                           ", Size: " + std::to_string(width) + "x" + std::to_string(height);
      rbee::sd::write_png_file(out_png, img, {{"parameters", params}});
    }
  } catch (const rbee::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
