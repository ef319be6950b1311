// llm-worker-rbee: one process serving one LLM on one device over the rbee worker contract and an
// OpenAI-compatible API (DESIGN section 4). llm-worker-rbee-cpu, -cuda and -rocm are the same program with the
// backend fixed by its name.
//
// Start-up: parse flags -> pick the device -> listen (so /health and /ready answer while loading) -> heartbeat ->
// load the model (/ready reports progress) -> KV cache and scheduler -> ready. SIGTERM/SIGINT: stop taking jobs
// (503), cancel queued ones, let running ones finish within --shutdown-timeout, flush their streams, exit 0.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <string_view>
#include <thread>

#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/core/log.h"
#include "rbee/core/thread_pool.h"
#include "rbee/llm/kv_cache.h"
#include "rbee/llm/model.h"
#include "rbee/llm/scheduler.h"
#include "server/heartbeat.h"
#include "server/http_server.h"
#include "server/lifecycle.h"
#include "server/llm/routes.h"
#include "server/util.h"
#include "server/worker_base.h"

namespace rbee::worker {
extern const std::string_view kChatPage;
}

namespace {

struct Options {
  std::string model, model_ref, worker_id, host = "127.0.0.1", hive_url, backend = "auto", kv_dtype = "f16";
  int port = 8080, device = 0, ctx_size = 8192, parallel = 4, threads = 0, queue_size = 64, prefill_chunk = 256;
  int http_threads = 0, default_max_tokens = 512, max_body_kb = 1024;
  double heartbeat_interval = 5.0, request_timeout = 600.0, shutdown_timeout = 30.0;
};

using namespace rbee;
using namespace rbee::server;

int run(const Options& opt) {
  Lifecycle lifecycle;
  lifecycle.install_signal_handlers();  // before any thread starts, so all inherit the signal mask

  if (opt.threads > 0) ThreadPool::set_global_threads(opt.threads);
  Registry& registry = Registry::global();
  for (const auto& line : registry.load_plugins()) log::info("event=plugin {}", line);
  std::string why;
  Device& device = registry.select(opt.backend, opt.device, &why);
  log::info("event=device id={} name=\"{}\" reason=\"{}\"", device.id(), device.info().name, why);

  Metrics metrics;
  DeviceStats device_stats(device);
  llm_api::describe_job_metrics(metrics);

  HttpOptions http_opt;
  http_opt.host = opt.host;
  http_opt.port = opt.port;
  http_opt.threads = opt.http_threads > 0 ? opt.http_threads : opt.parallel + opt.queue_size + 16;
  http_opt.max_body_bytes = (size_t)opt.max_body_kb * 1024;
  api_token_from_env(http_opt);
  http_opt.public_paths = {"/health"};
  http_opt.query_token_paths = {"/"};  // the chat page: open http://host:port/?token=TOKEN in a browser
  HttpServer http(http_opt, metrics);

  llm_api::LlmWorkerContext ctx(lifecycle, metrics, device_stats);
  ctx.model_path = opt.model;
  ctx.model_ref = opt.model_ref;
  ctx.model_name = !opt.model_ref.empty() ? opt.model_ref : std::filesystem::path(opt.model).filename().string();
  ctx.parallel = opt.parallel;
  ctx.started_unix = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
  ctx.identity.worker_id = opt.worker_id.empty() ? random_id("llm-worker") : opt.worker_id;
  ctx.identity.model_id = ctx.model_name;
  ctx.identity.version = RBEE_VERSION;

  add_common_routes(http, lifecycle, metrics, &device_stats);
  llm_api::add_rbee_routes(http, ctx);
  llm_api::add_openai_routes(http, ctx);
  llm_api::add_page_route(http, rbee::worker::kChatPage);
  metrics.describe_gauge("rbee_queue_depth", "Jobs waiting for a slot.");
  metrics.describe_gauge("rbee_running_sequences", "Jobs in the running batch.");
  metrics.describe_gauge("rbee_parallel_slots", "Running jobs at most (--parallel).");
  metrics.describe_gauge("rbee_kv_cache_blocks_free", "Free KV cache blocks.");
  metrics.describe_gauge("rbee_kv_cache_blocks_total", "KV cache blocks in total.");
  metrics.add_collector([&ctx](Metrics& m) {
    m.set("rbee_parallel_slots", ctx.parallel);
    if (llm_api::LlmService* s = ctx.service.load()) {
      const auto st = s->scheduler().stats();
      m.set("rbee_queue_depth", st.queued);
      m.set("rbee_running_sequences", st.running);
      m.set("rbee_kv_cache_blocks_free", st.free_blocks);
      m.set("rbee_kv_cache_blocks_total", st.total_blocks);
    }
  });

  http.bind();
  ctx.identity.port = http.port();
  std::thread http_thread([&http] { http.run(); });
  log::info("event=listening host={} port={} auth={} worker_id={}", opt.host, http.port(),
            http_opt.api_token.empty() ? "off" : "bearer", ctx.identity.worker_id);

  std::unique_ptr<Heartbeat> heartbeat;
  if (!opt.hive_url.empty()) {
    heartbeat = start_heartbeat(opt.hive_url, opt.heartbeat_interval, [&ctx] {
      return heartbeat_body(ctx.identity, llm_api::worker_status(ctx), &ctx.device);
    });
  }
  auto stop_serving = [&](const std::string& final_status) {
    if (heartbeat) {
      const auto body = heartbeat_body(ctx.identity, final_status, &device_stats);
      heartbeat->stop(&body);
    }
    http.stop();
    http_thread.join();
  };

  std::unique_ptr<llm::Model> model;
  std::unique_ptr<llm::KvCache> cache;
  try {
    llm::LoadOptions load;
    load.device = &device;
    load.progress = [&lifecycle](float f) { lifecycle.set_progress(f * 0.95f); };
    model = llm::Model::load(opt.model, load);
    const auto& cfg = model->config();
    const int block = 16;
    const DType kv = *dtype_from_name(opt.kv_dtype);
    cache = std::make_unique<llm::KvCache>(device, cfg, (opt.ctx_size + block - 1) / block, block, kv);
    log::info("event=model_loaded model=\"{}\" {} kv_positions={} kv_mib={:.1f} weights_mib={:.1f}", opt.model,
              cfg.summary(), opt.ctx_size, (double)cache->bytes() / (1 << 20),
              (double)model->weight_bytes() / (1 << 20));
  } catch (const std::exception& e) {
    log::error("event=load_failed model=\"{}\" error=\"{}\"", opt.model, e.what());
    lifecycle.set_failed(e.what());
    stop_serving("failed");
    return 1;
  }

  const int per_job = model->config().max_positions > 0 ? std::min(opt.ctx_size, model->config().max_positions)
                                                        : opt.ctx_size;
  llm::SchedulerOptions sched_opt;
  sched_opt.parallel = opt.parallel;
  sched_opt.max_queue = opt.queue_size;
  sched_opt.prefill_budget = opt.prefill_chunk;
  sched_opt.max_job_positions = per_job;
  llm::Scheduler scheduler(*model, *cache, sched_opt);
  llm_api::ServiceOptions svc_opt;
  svc_opt.model_name = ctx.model_name;
  svc_opt.model_aliases = {opt.model, std::filesystem::path(opt.model).filename().string(), model->config().name};
  svc_opt.default_max_tokens = opt.default_max_tokens;
  svc_opt.request_timeout_s = opt.request_timeout;
  llm_api::LlmService service(*model, scheduler, metrics, svc_opt);
  ctx.ctx_size = per_job;
  ctx.service = &service;
  lifecycle.set_ready();
  log::info("event=ready parallel={} queue={} prefill_chunk={} ctx_per_job={}", opt.parallel, opt.queue_size,
            opt.prefill_chunk, per_job);

  lifecycle.wait_for_shutdown();
  lifecycle.set_draining();
  log::info("event=draining running={} queued={} grace_s={}", scheduler.stats().running, scheduler.stats().queued,
            opt.shutdown_timeout);
  scheduler.drain(std::chrono::milliseconds((int64_t)(opt.shutdown_timeout * 1000)));
  // Every job has ended; give the open streams a moment to write their last events and [DONE].
  const auto flush_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (service.streaming() > 0 && std::chrono::steady_clock::now() < flush_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop_serving("stopped");
  ctx.service = nullptr;
  log::info("event=stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  rbee::log::init_from_env();
  Options opt;
  const std::string fixed_backend = rbee::server::backend_from_program_name(argv[0], "llm-worker-rbee");
  CLI::App app{"llm-worker-rbee: serves one LLM over the rbee worker contract and an OpenAI-compatible API"};
  app.set_version_flag("--version", std::string("llm-worker-rbee ") + RBEE_VERSION);
  app.add_option("--model", opt.model, "A .gguf file, or a safetensors directory with config.json and tokenizer.json")
      ->required();
  app.add_option("--model-ref", opt.model_ref, "Label reported to the hive and listed by /v1/models (e.g. hf:org/repo:file)");
  app.add_option("--worker-id", opt.worker_id, "Worker id for the hive (default: random)");
  app.add_option("--host", opt.host, "Address to listen on")->capture_default_str();
  app.add_option("--port", opt.port, "Port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--hive-url", opt.hive_url, "Hive to send heartbeats to (http://host:port)");
  auto* backend = app.add_option("--backend", opt.backend, "auto (CUDA, then ROCm, then CPU), cpu, cuda or rocm")
                      ->check(CLI::IsMember({"auto", "cpu", "cuda", "rocm"}))
                      ->capture_default_str();
  app.add_option("--device,--cuda-device,--rocm-device", opt.device, "GPU index within the backend")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--ctx-size", opt.ctx_size, "KV cache positions shared by all running jobs (one job may use them "
                                             "all, up to the model's context length)")
      ->check(CLI::Range(16, 1 << 24))
      ->capture_default_str();
  app.add_option("--parallel", opt.parallel, "Jobs decoded together at most (continuous batching slots)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--queue-size", opt.queue_size, "Jobs waiting for a slot at most; beyond, 429 with Retry-After")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  app.add_option("--prefill-chunk", opt.prefill_chunk, "Prompt tokens processed per step at most (chunked prefill)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("-t,--threads", opt.threads, "CPU threads (default: RBEE_THREADS or every CPU)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-dtype", opt.kv_dtype, "KV cache element type")
      ->check(CLI::IsMember({"f16", "bf16", "f32"}))
      ->capture_default_str();
  app.add_option("--http-threads", opt.http_threads, "HTTP connection threads (default: parallel + queue + 16)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-body-kb", opt.max_body_kb, "Largest request body in KiB (beyond: 413)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--default-max-tokens", opt.default_max_tokens, "max_tokens of jobs and chats that give none")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--request-timeout", opt.request_timeout, "Seconds a job may run at most")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--shutdown-timeout", opt.shutdown_timeout, "Seconds running jobs get to finish on SIGTERM")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--heartbeat-interval", opt.heartbeat_interval, "Seconds between heartbeats")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!rbee::server::apply_program_backend(fixed_backend, backend->count() > 0, opt.backend, "llm-worker-rbee")) {
    return 2;
  }
  try {
    return run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llm-worker-rbee: error: %s\n", e.what());
    return 1;
  }
}
