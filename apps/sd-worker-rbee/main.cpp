// sd-worker-rbee: one process serving one Stable Diffusion model on one device over the rbee worker contract and
// OpenAI's images API (docs/DESIGN.md section 5). sd-worker-rbee-cpu, -cuda and -rocm are the same program with the
// backend fixed by its name.
//
// Start-up: parse flags -> pick the device -> listen (so /health and /ready answer while loading) -> heartbeat ->
// load the pipeline -> ready. SIGTERM/SIGINT: stop taking jobs (503), let the running and the queued (accepted)
// ones finish within --shutdown-timeout, flush their streams, exit 0.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/core/log.h"
#include "rbee/sd/model_files.h"
#include "server/sd/routes.h"
#include "server/http_server.h"
#include "server/lifecycle.h"
#include "server/util.h"
#include "server/worker_base.h"
#include "server/worker_options.h"

namespace {

struct Options {
  rbee::server::WorkerOptions w;
  std::string config, sd_version = "auto", sampler, variant, noise = "rbee";
  int queue_size = 8, preview_every = 5, batch_images = 4;
  bool use_f16 = false;
};

using namespace rbee;
using namespace rbee::server;

// What a request gets for the fields it omits, by model family (the sizes each was trained at; turbo models run
// one step without guidance).
sd_api::RequestDefaults defaults_for(const std::string& version, const std::string& sampler, const std::string& noise,
                                     int preview_every) {
  sd_api::RequestDefaults d;
  if (version == "v2-1") d.width = d.height = 768;
  if (version == "xl") d.width = d.height = 1024;
  if (version == "turbo") {
    d.steps = 1;
    d.guidance_scale = 0.0;
    d.sampler = sd::DiffusionSchedulerKind::EulerAncestral;
  }
  if (!sampler.empty()) d.sampler = sd::diffusion_scheduler_kind_from_name(sampler);
  d.noise = sd::noise_kind_from_name(noise);
  d.preview_every = preview_every;
  return d;
}

int run(const Options& opt) {
  Lifecycle lifecycle;
  lifecycle.install_signal_handlers();  // before any thread starts, so all inherit the signal mask

  Device& device = select_worker_device(opt.w);

  Metrics metrics;
  DeviceStats device_stats(device);
  sd_api::describe_sd_metrics(metrics);

  const HttpOptions http_opt = worker_http_options(opt.w, opt.queue_size + 16);
  HttpServer http(http_opt, metrics);

  sd_api::SdWorkerContext ctx(lifecycle, metrics, device_stats);
  ctx.model_path = opt.w.model;
  ctx.model_ref = opt.w.model_ref;
  ctx.model_name = !opt.w.model_ref.empty() ? opt.w.model_ref : std::filesystem::path(opt.w.model).filename().string();
  ctx.sd_version_requested = opt.sd_version;
  ctx.sd_version = opt.sd_version;
  if (opt.sd_version == "auto") {
    // The family the files hold decides the defaults (an SDXL folder gets 1024x1024); a folder that cannot be read
    // fails the same way at load below.
    try {
      ctx.sd_version = sd::detect_sd_version(opt.w.model, opt.config);
    } catch (const std::exception& e) {
      log::warn("event=sd_version_unknown error=\"{}\"", e.what());
    }
  }
  ctx.defaults = defaults_for(ctx.sd_version, opt.sampler, opt.noise, opt.preview_every);
  ctx.queue_size = opt.queue_size;
  ctx.identity.worker_id = opt.w.worker_id.empty() ? random_id("sd-worker") : opt.w.worker_id;
  ctx.identity.model_id = ctx.model_name;
  ctx.identity.version = RBEE_VERSION;
  add_common_routes(http, lifecycle, metrics, &device_stats);
  sd_api::add_sd_routes(http, ctx);
  metrics.add_collector([&ctx](Metrics& m) {
    if (sd_api::SdService* s = ctx.service.load()) {
      const auto st = s->stats();
      m.set("rbee_queue_depth", st.queued);
      m.set("rbee_running_jobs", st.running ? 1 : 0);
    }
  });

  WorkerFrontEnd front(http, ctx.identity, device_stats);
  front.start(opt.w, !http_opt.api_token.empty(), [&ctx] { return sd_api::worker_status(ctx); });

  std::optional<sd::Pipeline> pipeline;
  try {
    sd::LoadOptions load;
    load.device = &device;
    load.dtype = opt.use_f16 ? DType::F16 : DType::F32;
    load.variant = opt.variant;
    // The loader reports no progress of its own: /ready says 0 until the whole pipeline is in memory.
    lifecycle.set_progress(0.0f);
    const auto t0 = std::chrono::steady_clock::now();
    pipeline = sd::load_model_files({opt.w.model, opt.config, opt.sd_version}, load);
    // On GPUs the load ends with Pipeline::prepare at the default size (its seconds included, and given apart).
    log::info("event=model_loaded model=\"{}\" sd_version={} seconds={:.2f} prepare_seconds={:.2f} dtype={}",
              opt.w.model, ctx.sd_version, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
              pipeline->load_prepare_seconds(), opt.use_f16 ? "f16" : "f32");
  } catch (const std::exception& e) {
    log::error("event=load_failed model=\"{}\" error=\"{}\"", opt.w.model, e.what());
    lifecycle.set_failed(e.what());
    front.stop("failed");
    return 1;
  }

  sd_api::ServiceOptions svc_opt;
  svc_opt.model_name = ctx.model_name;
  svc_opt.queue_size = opt.queue_size;
  svc_opt.request_timeout_s = opt.w.request_timeout;
  svc_opt.batch_images = opt.batch_images;
  sd_api::SdService service(*pipeline, metrics, svc_opt);
  ctx.service = &service;
  lifecycle.set_ready();
  log::info("event=ready queue={} preview_every={} batch_images={}", opt.queue_size, opt.preview_every,
            opt.batch_images);

  lifecycle.wait_for_shutdown();
  lifecycle.set_draining();
  const auto st = service.stats();
  log::info("event=draining running={} queued={} grace_s={}", st.running ? 1 : 0, st.queued, opt.w.shutdown_timeout);
  service.drain(std::chrono::milliseconds((int64_t)(opt.w.shutdown_timeout * 1000)));
  // Every job has ended; give the open streams a moment to write their last events and [DONE].
  wait_for_streams([&service] { return service.streaming(); }, std::chrono::seconds(5));
  front.stop("stopped");
  ctx.service = nullptr;
  log::info("event=stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  rbee::log::init_from_env();
  Options opt;
  const std::string fixed_backend = rbee::server::backend_from_program_name(argv[0], "sd-worker-rbee");
  CLI::App app{"sd-worker-rbee: serves one Stable Diffusion model over the rbee worker contract and OpenAI's "
               "images API"};
  app.set_version_flag("--version", std::string("sd-worker-rbee ") + RBEE_VERSION);
  opt.w.max_body_kb = 48 * 1024;  // images come base64: a 2048x2048 PNG can be 16 MB of text
  auto* backend = rbee::server::add_worker_options(
      app, opt.w, "A diffusers folder, or a single-file .safetensors checkpoint (with --config)");
  app.add_option("--config", opt.config, "For a single-file checkpoint: a diffusers folder of the same architecture "
                                         "(its configs and tokenizer are used, its weights are not)");
  app.add_option("--sd-version", opt.sd_version, "Model family: auto (read from the files, reported in /info), v1-5, "
                                                 "v2-1, xl or turbo (checked against the files; sets the request "
                                                 "defaults: 512, 768, 1024 px sides; turbo 1 step, no guidance)")
      ->check(CLI::IsMember({"auto", "v1-5", "v2-1", "xl", "turbo"}))
      ->capture_default_str();
  app.add_flag("--use-f16", opt.use_f16, "Keep linear and convolution weights in f16 (halves their memory on GPUs)");
  app.add_option("--variant", opt.variant, "Read the weights files of this diffusers variant, e.g. fp16 "
                                           "(diffusion_pytorch_model.fp16.safetensors); default: the plain files");
  app.add_option("--noise", opt.noise, "Noise generator of requests that name none: rbee (counter-based) or torch "
                                       "(PyTorch's CPU generator in diffusers' order)")
      ->check(CLI::IsMember({"rbee", "torch"}))
      ->capture_default_str();
  app.add_option("--sampler", opt.sampler,
                 "Sampler of requests that name none (default: euler; euler_a for turbo): " +
                     rbee::server::sd_api::sampler_names())
      ->check(CLI::IsMember(rbee::server::sd_api::sampler_list()));
  app.add_option("--preview-every", opt.preview_every, "Steps between preview events of a job (0: no previews)")
      ->check(CLI::Range(0, 150))
      ->capture_default_str();
  app.add_option("--queue-size", opt.queue_size, "Jobs waiting for the device at most; beyond, 429 with Retry-After")
      ->check(CLI::Range(0, 10000))
      ->capture_default_str();
  app.add_option("--batch-images", opt.batch_images,
                 "Images one UNet batch holds at most when queued text-to-image jobs of the same size, steps, "
                 "sampler, guidance and noise run together (1: one job at a time; each job's images stay the ones it "
                 "makes alone)")
      ->check(CLI::Range(1, rbee::sd::kMaxBatch))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!rbee::server::apply_program_backend(fixed_backend, backend->count() > 0, opt.w.backend, "sd-worker-rbee")) {
    return 2;
  }
  try {
    return run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sd-worker-rbee: error: %s\n", e.what());
    return 1;
  }
}
