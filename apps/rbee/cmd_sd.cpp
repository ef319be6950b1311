// `rbee sd`: one Stable Diffusion image from a prompt (txt2img), from a prompt and an image (img2img, with
// --init-image and --strength) or with a mask (inpaint, --mask), written as a PNG whose "parameters" text chunk
// records how it was made. Progress bar on a terminal; seconds per image and iterations per second on stderr.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "commands.h"
#include "model_options.h"
#include "progress_bar.h"
#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/core/log.h"
#include "rbee/sd/model_files.h"
#include "rbee/sd/parameters.h"
#include "rbee/sd/png.h"

namespace rbee::cli {

namespace {

struct SdOptions {
  std::string model, config, sd_version = "auto", prompt, negative_prompt, output = "out.png";
  std::string sampler = "euler", init_image, mask, backend = "auto", variant, noise = "rbee";
  int steps = 20, width = 0, height = 0, device = 0, threads = 0;
  int64_t seed = -1;
  double guidance = 7.5, strength = -1;  // strength < 0: diffusers' default (img2img 0.8, inpaint 1.0)
  bool use_f16 = false, quiet = false;
};

sd::Image read_image(const std::string& path, const char* option) {
  std::ifstream f(path, std::ios::binary);
  RBEE_CHECK_CODE(f.good(), ErrorCode::NotFound, "{}: cannot read '{}'", option, path);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  try {
    return sd::decode_image(bytes.data(), bytes.size());
  } catch (const Error& e) {
    RBEE_THROW(ErrorCode::InvalidArgument, "{} '{}': {}", option, path, e.message());
  }
}

int run_sd(const SdOptions& opt) {
  RBEE_CHECK(opt.mask.empty() || !opt.init_image.empty(), "--mask needs --init-image (the image to inpaint)");
  Device& device = select_device(opt.backend, opt.device, opt.threads);

  sd::GenerateRequest r;
  r.prompt = opt.prompt;
  r.negative_prompt = opt.negative_prompt;
  r.steps = opt.steps;
  r.guidance_scale = opt.guidance;
  r.sampler = sd::diffusion_scheduler_kind_from_name(opt.sampler);
  r.noise = sd::noise_kind_from_name(opt.noise);
  r.strength = opt.strength >= 0 ? opt.strength : opt.mask.empty() ? 0.8 : 1.0;
  if (opt.seed >= 0) {
    r.seed = (uint64_t)opt.seed;
  } else {
    std::random_device rd;
    r.seed = ((uint64_t)rd() << 32 | rd()) & (uint64_t)INT64_MAX;
  }
  sd::Image init, mask;
  if (!opt.init_image.empty()) init = read_image(opt.init_image, "--init-image");
  // Everything the request can be checked against before the (slow) load: the files' configs.
  sd::LoadOptions load;
  load.device = &device;
  load.dtype = opt.use_f16 ? DType::F16 : DType::F32;
  load.variant = opt.variant;
  load.load_vae_encoder = !opt.init_image.empty();
  load.prepare = false;  // one request per process: it makes the plans of its own size, nothing to prepare ahead
  const sd::ModelFiles files{opt.model, opt.config, opt.sd_version};
  const sd::ModelLimits limits = sd::read_model_limits(files, load);
  // Default size: the init image's, else the model's (unet sample_size x latent scale: 512 for SD 1.5, 1024 SDXL).
  r.width = opt.width > 0 ? opt.width : init.width > 0 ? init.width : (int)limits.default_side;
  r.height = opt.height > 0 ? opt.height : init.height > 0 ? init.height : (int)limits.default_side;
  if (!opt.init_image.empty()) {
    RBEE_CHECK(init.width == r.width && init.height == r.height, "--init-image '{}' is {}x{}, the image is {}x{}",
               opt.init_image, init.width, init.height, r.width, r.height);
    RBEE_CHECK((int)(r.steps * r.strength) >= 1, "--strength {} with {} steps runs no step (steps * strength < 1)",
               r.strength, r.steps);
  }
  if (!opt.mask.empty()) {
    mask = read_image(opt.mask, "--mask");
    RBEE_CHECK(mask.width == r.width && mask.height == r.height, "--mask '{}' is {}x{}, the image is {}x{}", opt.mask,
               mask.width, mask.height, r.width, r.height);
  }
  if (auto p = sd::check_request(r, limits)) {
    const std::string flag = p->field == "guidance_scale" ? "--guidance" : "--" + p->field;
    RBEE_THROW(ErrorCode::InvalidArgument, "{}: {}", flag, p->message);
  }

  const auto t_load = std::chrono::steady_clock::now();
  const sd::Pipeline pipeline = sd::load_model_files(files, load);
  log::info("model loaded in {:.2f} s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count());
  if (init.width > 0) r.init_image = pipeline.from_image(init);
  if (mask.width > 0) {
    // White (red channel >= 128) repaints, black keeps: binarised at 0.5 as diffusers does.
    std::vector<float> m((size_t)mask.width * (size_t)mask.height);
    for (size_t p = 0; p < m.size(); ++p) m[p] = mask.rgb[p * 3] >= 128 ? 1.0f : 0.0f;
    r.mask = Tensor::from_vector(m, {1, 1, mask.height, mask.width}, device);
  }

  ProgressBar bar(!opt.quiet, "sd");
  const auto t0 = std::chrono::steady_clock::now();
  int steps_run = 0;
  r.on_step = [&](int step, int total) {
    steps_run = step;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char suffix[64];
    std::snprintf(suffix, sizeof suffix, "step %d/%d, %.2f it/s", step, total, step / std::max(s, 1e-9));
    bar.update((float)step / (float)total, suffix);
    return true;
  };
  const sd::Image image = pipeline.generate(r);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string model_name = std::filesystem::path(opt.model).filename().string();
  sd::write_png_file(opt.output, image, {{"parameters", sd::generation_parameters(r, model_name)}});
  std::fprintf(stderr, "wrote %s (%dx%d, seed %llu) | %.3f s per image | %.2f it/s (%d steps)\n", opt.output.c_str(),
               image.width, image.height, (unsigned long long)r.seed, seconds, steps_run / std::max(seconds, 1e-9),
               steps_run);
  return 0;
}

}  // namespace

Command add_sd_command(CLI::App& app) {
  auto opt = std::make_shared<SdOptions>();
  CLI::App* sub = app.add_subcommand("sd", "Make a Stable Diffusion image (txt2img, img2img, inpaint) as a PNG");
  sub->add_option("-m,--model", opt->model, "A diffusers folder, or a single-file .safetensors checkpoint (with "
                                            "--config)")
      ->required();
  sub->add_option("--config", opt->config, "For a single-file checkpoint: a diffusers folder of the same "
                                           "architecture (configs and tokenizer)");
  sub->add_option("--sd-version", opt->sd_version, "auto, v1-5, v2-1, xl or turbo (checked against the files)")
      ->check(CLI::IsMember({"auto", "v1-5", "v2-1", "xl", "turbo"}))
      ->capture_default_str();
  sub->add_option("-p,--prompt", opt->prompt, "What the image shows")->required();
  sub->add_option("-n,--negative-prompt", opt->negative_prompt, "What it should not show (the unconditional side of "
                                                                "guidance)");
  sub->add_option("-o,--output", opt->output, "PNG file to write")->capture_default_str();
  sub->add_option("--steps", opt->steps, "Denoising steps")->check(CLI::Range(1, 150))->capture_default_str();
  sub->add_option("-W,--width", opt->width, "Image width, a multiple of 8 up to 2048 (default: the init image's, "
                                            "else the model's: 512 for SD 1.x, 768 for SD 2.x, 1024 for SDXL)");
  sub->add_option("-H,--height", opt->height, "Image height, a multiple of 8 up to 2048 (default: the init image's, "
                                              "else the model's)");
  sub->add_option("-s,--seed", opt->seed, "Seed of the noise (-1: random, printed at the end)")
      ->check(CLI::Range((int64_t)-1, INT64_MAX))
      ->capture_default_str();
  sub->add_option("--sampler", opt->sampler,
                  "euler, euler_a, ddim, dpmpp_2m, dpmpp_2m_karras, lcm, heun, pndm, unipc or dpmpp_sde (diffusers' "
                  "schedulers of those names, configured from the model's scheduler config)")
      ->check(CLI::IsMember(
          {"euler", "euler_a", "ddim", "dpmpp_2m", "dpmpp_2m_karras", "lcm", "heun", "pndm", "unipc", "dpmpp_sde"}))
      ->capture_default_str();
  sub->add_option("-g,--guidance", opt->guidance, "Classifier-free guidance scale (<= 1: off)")
      ->check(CLI::Range(0.0, 20.0))
      ->capture_default_str();
  sub->add_option("--init-image", opt->init_image, "Image to start from (PNG, JPEG or WebP; img2img; inpaint with --mask)");
  sub->add_option("--strength", opt->strength, "img2img / inpaint: how much of the schedule to run (1: ignore the "
                                               "image; default 0.8, with --mask 1.0, as diffusers)")
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--mask", opt->mask,
                  "Mask image (PNG, JPEG or WebP) of --init-image's size: white repaints, black keeps (inpaint)");
  sub->add_option("--backend", opt->backend, "auto (CUDA, then ROCm, then CPU), cpu, cuda or rocm")
      ->check(CLI::IsMember({"auto", "cpu", "cuda", "rocm"}))
      ->capture_default_str();
  sub->add_option("--device", opt->device, "GPU index within the backend")->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_flag("--use-f16", opt->use_f16, "Keep linear and convolution weights in f16 (halves their memory)");
  sub->add_option("--variant", opt->variant, "Read the weights files of this diffusers variant, e.g. fp16 "
                                             "(diffusion_pytorch_model.fp16.safetensors); default: the plain files");
  sub->add_option("--noise", opt->noise, "Noise generator: rbee (counter-based, the same on every backend) or torch "
                                         "(PyTorch's CPU generator in diffusers' order: the image diffusers makes "
                                         "from the same seed)")
      ->check(CLI::IsMember({"rbee", "torch"}))
      ->capture_default_str();
  sub->add_option("-t,--threads", opt->threads, "CPU threads (default: RBEE_THREADS or every CPU)")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("-q,--quiet", opt->quiet, "No progress bar");
  return [opt] { return run_sd(*opt); };
}

}  // namespace rbee::cli
