// llm-worker-rbee: one process serving one LLM on one device over the rbee worker contract and an
// OpenAI-compatible API (docs/DESIGN.md section 5). llm-worker-rbee-cpu, -cuda and -rocm are the same program with the
// backend fixed by its name.
//
// Start-up: parse flags -> pick the device -> listen (so /health and /ready answer while loading) -> heartbeat ->
// load the model (/ready reports progress) -> KV cache and scheduler -> ready. SIGTERM/SIGINT: stop taking jobs
// (503), let running and queued (accepted) ones finish within --shutdown-timeout, flush their streams, exit 0.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string_view>
#include <thread>

#include "rbee/backend/device.h"
#include "rbee/core/env.h"
#include "rbee/core/error.h"
#include "rbee/core/log.h"
#include "rbee/core/thread_pool.h"
#include "rbee/llm/chat_template.h"
#include "rbee/llm/kv_cache.h"
#include "rbee/llm/memory_plan.h"
#include "rbee/llm/model.h"
#include "rbee/llm/placement.h"
#include "rbee/llm/scheduler.h"
#include "server/heartbeat.h"
#include "server/http_server.h"
#include "server/lifecycle.h"
#include "server/llm/routes.h"
#include "server/llm/serving_metrics.h"
#include "server/util.h"
#include "server/worker_base.h"
#include "server/worker_options.h"

namespace rbee::worker {
extern const std::string_view kChatPage;
}

namespace {

struct Options {
  rbee::server::WorkerOptions w;
  std::string kv_dtype = "f16";
  int ctx_size = 8192, parallel = 4, queue_size = 64, prefill_chunk = 256, default_max_tokens = 512;
  std::string chat_template_file;  // replaces the model's chat template
  std::string pooling = "auto";    // /v1/embeddings
  bool matryoshka = false;
  bool no_prefix_cache = false;
  std::string spec_method = "off", draft;  // speculative decoding
  int spec_tokens = 4, spec_ngram_min = 2, spec_ngram_max = 4;
  // Several devices and partial offload (docs/DESIGN.md section 7).
  std::string devices, split = "layer", split_ratio, gpu_layers = "auto";
  bool fit = true;
  CLI::Option* ctx_option = nullptr;
};

using namespace rbee;
using namespace rbee::server;

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

int run(const Options& opt) {
  Lifecycle lifecycle;
  lifecycle.install_signal_handlers();  // before any thread starts, so all inherit the signal mask

  std::vector<Device*> devices;
  if (opt.devices.empty()) {
    devices.push_back(&select_worker_device(opt.w));
  } else {
    if (opt.w.threads > 0) ThreadPool::set_global_threads(opt.w.threads);
    devices = llm::parse_device_list(opt.devices);
    for (Device* d : devices) log::info("event=device id={} name=\"{}\" reason=\"--devices\"", d->id(), d->info().name);
  }

  Metrics metrics;
  DeviceStats device_stats(devices);
  llm_api::describe_job_metrics(metrics);

  HttpOptions http_opt = worker_http_options(opt.w, opt.parallel + opt.queue_size + 16);
  // The chat page is static HTML holding no secret: it loads without the token, asks for it and sends it as a header.
  http_opt.public_paths.push_back("/");
  HttpServer http(http_opt, metrics);

  llm_api::LlmWorkerContext ctx(lifecycle, metrics, device_stats);
  ctx.model_path = opt.w.model;
  ctx.model_ref = opt.w.model_ref;
  ctx.model_name = !opt.w.model_ref.empty() ? opt.w.model_ref : std::filesystem::path(opt.w.model).filename().string();
  ctx.parallel = opt.parallel;
  ctx.started_unix = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
  ctx.identity.worker_id = opt.w.worker_id.empty() ? random_id("llm-worker") : opt.w.worker_id;
  ctx.identity.model_id = ctx.model_name;
  ctx.identity.version = RBEE_VERSION;

  add_common_routes(http, lifecycle, metrics, &device_stats);
  llm_api::add_rbee_routes(http, ctx);
  llm_api::add_openai_routes(http, ctx);
  llm_api::add_tokenize_routes(http, ctx);
  llm_api::add_page_route(http, rbee::worker::kChatPage);
  // Queue, slots, KV cache and prefix cache for routers: rbee's names and vLLM's (server/llm/serving_metrics.h).
  llm_api::ServingMetrics serving_metrics(metrics);
  auto figures = [&ctx] {
    llm_api::LlmService* s = ctx.service.load();
    if (!s) {
      llm_api::ServingFigures idle;
      idle.parallel = ctx.parallel;
      return idle;
    }
    return llm_api::serving_figures(s->scheduler().stats(), ctx.parallel);
  };
  metrics.add_collector([&ctx, &serving_metrics, figures](Metrics&) {
    if (ctx.service.load()) serving_metrics.update(figures());
    else serving_metrics.update_idle(ctx.parallel);
  });

  WorkerFrontEnd front(http, ctx.identity, device_stats);
  front.start(opt.w, !http_opt.api_token.empty(), [&ctx] { return llm_api::worker_status(ctx); },
              [figures] { return llm_api::serving_json(figures()); });

  std::unique_ptr<llm::Model> model, draft_model;
  std::unique_ptr<llm::KvCache> cache, draft_cache;
  std::unique_ptr<llm::DraftModel> drafter;
  llm::MemoryPlan plan;
  try {
    // The plan first, from the model's metadata: a model that cannot fit is refused before any weight is read.
    const llm::ModelDescription desc = llm::describe_model(opt.w.model);
    llm::PlanRequest req;
    req.devices = devices;
    req.split = opt.split == "tensor" ? llm::SplitMode::Tensor : llm::SplitMode::Layer;
    if (!opt.split_ratio.empty()) req.split_ratio = llm::parse_split_ratio(opt.split_ratio);
    req.gpu_layers = std::min(llm::parse_gpu_layers(opt.gpu_layers), desc.config.n_layers);
    req.ctx_size = opt.ctx_size;
    req.ctx_given = opt.ctx_option && opt.ctx_option->count() > 0;
    req.parallel = opt.parallel;
    // The largest step: a prompt chunk beside every decoding job's next token and, with speculation, its drafts
    // (each with a row of logits).
    const int rows_per_job = opt.spec_method == "off" ? 1 : 1 + opt.spec_tokens;
    req.batch_tokens = opt.prefill_chunk + opt.parallel * rows_per_job;
    req.logit_rows = opt.parallel * rows_per_job;
    req.kv_dtype = *dtype_from_name(opt.kv_dtype);
    req.fit = opt.fit;
    // The draft model counts in the plan (on the device of the model's logits): one that does not fit with the
    // model is refused here, from metadata, before any weight is read.
    std::optional<llm::ModelDescription> draft_desc;
    if (!opt.draft.empty()) {
      draft_desc = llm::describe_model(opt.draft);
      req.draft = &*draft_desc;
    }
    plan = llm::plan_memory(desc, req);
    for (const auto& line : split_lines(plan.table())) log::info("event=memory_plan {}", line);
    llm::require_fit(plan);
    device_stats.set_devices(plan.placement.devices);
    ctx.memory_plan = plan.to_json();
    llm::LoadOptions load;
    load.placement = plan.placement;
    load.progress = [&lifecycle](float f) { lifecycle.set_progress(f * 0.95f); };
    const auto baseline = llm::held_bytes(plan.placement.devices);
    // Fault injection (docs/RELIABILITY.md): a slow load, so that tests can see what answers while loading.
    if (const std::optional<int64_t> delay = env::integer("RBEE_FAULT_LOAD_DELAY_MS", 0, 3'600'000))
      std::this_thread::sleep_for(std::chrono::milliseconds(*delay));
    model = llm::Model::load(opt.w.model, load);
    const auto& cfg = model->config();
    cache = std::make_unique<llm::KvCache>(model->kv_layout(), plan.kv_blocks(), plan.block_size, plan.kv_dtype);
    log::info("event=model_loaded model=\"{}\" {} kv_positions={} kv_mib={:.1f} weights_mib={:.1f} placement=\"{}\"",
              opt.w.model, cfg.summary(), plan.ctx_size, (double)cache->bytes() / (1 << 20),
              (double)model->weight_bytes() / (1 << 20), plan.placement.describe());
    if (!opt.draft.empty()) {
      // The draft model: on the device of the model's logits, same tokenizer (checked), a KV cache of as many
      // blocks as the model's, catch-up passes of the plan's largest step (all counted in the plan above).
      llm::LoadOptions dload;
      dload.device = &model->device();
      draft_model = llm::Model::load(opt.draft, dload);
      llm::check_same_tokenizer(model->tokenizer(), draft_model->tokenizer());
      draft_cache = std::make_unique<llm::KvCache>(draft_model->kv_layout(), plan.kv_blocks(), plan.block_size,
                                                   plan.kv_dtype);
      drafter = std::make_unique<llm::DraftModel>(*draft_model, *draft_cache, !opt.no_prefix_cache, plan.batch_tokens);
      log::info("event=draft_loaded model=\"{}\" {} kv_mib={:.1f} weights_mib={:.1f}", opt.draft,
                draft_model->config().summary(), (double)draft_cache->bytes() / (1 << 20),
                (double)draft_model->weight_bytes() / (1 << 20));
    }
    for (const auto& c : llm::measure_plan(plan, *model, *cache, baseline)) {
      log::info("event=plan_check device={} weights_mib={:.1f} planned_weights_mib={:.1f} kv_mib={:.1f} "
                "planned_kv_mib={:.1f} allocated_mib={:.1f} planned_allocated_mib={:.1f}",
                c.id, (double)c.measured_weights / (1 << 20), (double)c.planned_weights / (1 << 20),
                (double)c.measured_kv / (1 << 20), (double)c.planned_kv / (1 << 20),
                (double)c.measured_allocated / (1 << 20), (double)c.planned_allocated / (1 << 20));
    }
  } catch (const std::exception& e) {
    log::error("event=load_failed model=\"{}\" error=\"{}\"", opt.w.model, e.what());
    lifecycle.set_failed(e.what());
    front.stop("failed");
    return 1;
  }

  const int per_job = plan.ctx_size;
  llm::SchedulerOptions sched_opt;
  sched_opt.parallel = opt.parallel;
  sched_opt.max_queue = opt.queue_size;
  sched_opt.prefill_budget = opt.prefill_chunk;
  sched_opt.max_job_positions = per_job;
  sched_opt.prefix_cache = !opt.no_prefix_cache;
  using Method = llm::SpeculativeOptions::Method;
  sched_opt.speculative.method = opt.spec_method == "prompt-lookup" ? Method::PromptLookup
                                 : opt.spec_method == "draft"       ? Method::DraftModel
                                                                    : Method::Off;
  sched_opt.speculative.tokens = opt.spec_tokens;
  sched_opt.speculative.ngram_min = opt.spec_ngram_min;
  sched_opt.speculative.ngram_max = opt.spec_ngram_max;
  sched_opt.draft = drafter.get();
  llm::Scheduler scheduler(*model, *cache, sched_opt);
  llm_api::ServiceOptions svc_opt;
  svc_opt.model_name = ctx.model_name;
  svc_opt.model_aliases = {opt.w.model, std::filesystem::path(opt.w.model).filename().string(), model->config().name};
  svc_opt.default_max_tokens = opt.default_max_tokens;
  svc_opt.request_timeout_s = opt.w.request_timeout;
  // Embedding pooling: --pooling, else what the model declares (GGUF pooling_type), else the last token's state.
  const int declared = model->config().pooling_type;
  const std::string pooling = opt.pooling != "auto" ? opt.pooling
                              : declared == 1       ? "mean"
                              : declared == 2       ? "cls"
                                                    : "last";
  svc_opt.pooling = pooling == "mean" ? llm::Pooling::Mean : pooling == "cls" ? llm::Pooling::Cls : llm::Pooling::Last;
  svc_opt.matryoshka = opt.matryoshka;
  log::info("event=embeddings pooling={} declared={} matryoshka={}", pooling, declared, opt.matryoshka);
  if (!opt.chat_template_file.empty()) {
    std::ifstream in(opt.chat_template_file, std::ios::binary);
    svc_opt.chat_template.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      log::error("event=load_failed chat_template=\"{}\" error=\"cannot read it\"", opt.chat_template_file);
      front.stop("failed");
      return 1;
    }
    try {
      llm::ChatTemplate::parse(svc_opt.chat_template);
    } catch (const std::exception& e) {
      log::error("event=load_failed chat_template=\"{}\" error=\"{}\"", opt.chat_template_file, e.what());
      lifecycle.set_failed(e.what());
      front.stop("failed");
      return 1;
    }
  }
  llm_api::LlmService service(*model, scheduler, metrics, svc_opt);
  ctx.ctx_size = per_job;
  ctx.service = &service;
  lifecycle.set_ready();
  const char* invariant = std::getenv("RBEE_BATCH_INVARIANT");
  log::info("event=ready parallel={} queue={} prefill_chunk={} ctx_per_job={} prefix_cache={} speculative={} "
            "spec_tokens={} batch_invariant={}",
            opt.parallel, opt.queue_size, opt.prefill_chunk, per_job, sched_opt.prefix_cache ? "on" : "off",
            llm::speculative_method_name(sched_opt.speculative.method), opt.spec_tokens,
            invariant != nullptr && *invariant != 0 && std::string_view(invariant) != "0" ? "on" : "off");

  lifecycle.wait_for_shutdown();
  lifecycle.set_draining();
  log::info("event=draining running={} queued={} grace_s={}", scheduler.stats().running, scheduler.stats().queued,
            opt.w.shutdown_timeout);
  scheduler.drain(std::chrono::milliseconds((int64_t)(opt.w.shutdown_timeout * 1000)));
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
  const std::string fixed_backend = rbee::server::backend_from_program_name(argv[0], "llm-worker-rbee");
  CLI::App app{"llm-worker-rbee: serves one LLM over the rbee worker contract and an OpenAI-compatible API"};
  app.set_version_flag("--version", std::string("llm-worker-rbee ") + RBEE_VERSION);
  auto* backend = rbee::server::add_worker_options(
      app, opt.w, "A .gguf file, or a safetensors directory with config.json and tokenizer.json");
  opt.ctx_option = app.add_option("--ctx-size", opt.ctx_size,
                                  "KV cache positions shared by all running jobs (one job may use them all, up to the "
                                  "model's context length); lowered to fit when not given (see --no-fit)")
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
  app.add_option("--kv-dtype", opt.kv_dtype, "KV cache element type")
      ->check(CLI::IsMember({"f16", "bf16", "f32"}))
      ->capture_default_str();
  app.add_option("--default-max-tokens", opt.default_max_tokens, "max_tokens of jobs and chats that give none")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--chat-template", opt.chat_template_file,
                 "A Jinja chat template file to use instead of the model's (e.g. one with tool support)")
      ->check(CLI::ExistingFile);
  app.add_option("--pooling", opt.pooling,
                 "How /v1/embeddings pools the last hidden states: auto (the model's GGUF pooling_type, else last), "
                 "mean, last or cls")
      ->check(CLI::IsMember({"auto", "mean", "last", "cls"}))
      ->capture_default_str();
  // The GPU kernels read RBEE_BATCH_INVARIANT at each launch: set it while parsing, before any thread starts.
  app.add_flag_callback(
      "--batch-invariant", [] { setenv("RBEE_BATCH_INVARIANT", "1", 1); },
      "Batch-invariant GPU kernels (also RBEE_BATCH_INVARIANT=1): a request's logits do not depend on the other "
      "requests in its steps, the prefix cache or speculative verification, so greedy answers are reproducible; "
      "slower (docs/DEPLOY.md); the CPU always is");
  app.add_flag("--no-prefix-cache", opt.no_prefix_cache,
               "Turn automatic prefix caching off (by default full KV blocks of a prompt are cached by the hash of "
               "their token prefix and reused by later requests that start with the same tokens)");
  app.add_option("--spec", opt.spec_method,
                 "Speculative decoding: off, prompt-lookup (drafts from n-grams of the prompt and output: no second "
                 "model) or draft (a draft model, --draft); greedy output is unchanged")
      ->check(CLI::IsMember({"off", "prompt-lookup", "draft"}))
      ->capture_default_str();
  app.add_option("--draft", opt.draft,
                 "Draft model for speculative decoding (a .gguf file or safetensors folder with the model's tokenizer); "
                 "implies --spec draft");
  app.add_option("--spec-tokens", opt.spec_tokens, "Draft tokens verified per decode step at most")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  app.add_option("--spec-ngram-min", opt.spec_ngram_min, "Prompt lookup: shortest n-gram matched")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--spec-ngram-max", opt.spec_ngram_max, "Prompt lookup: longest n-gram matched (tried first)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_flag("--matryoshka", opt.matryoshka,
               "The model's embeddings may be cut to fewer dimensions (\"dimensions\" in /v1/embeddings)");
  app.add_option("--devices", opt.devices,
                 "Run on several devices: a list like cuda:0,cuda:1 or cuda:0,rocm:0; replaces --backend / --device");
  app.add_option("--split", opt.split, "How --devices share the model: layer or tensor")
      ->check(CLI::IsMember({"layer", "tensor"}))
      ->capture_default_str();
  app.add_option("--split-ratio", opt.split_ratio,
                 "Shares of the devices, e.g. 3,1 (default: free memory for --split layer, equal for tensor)");
  app.add_option("--gpu-layers,--n-gpu-layers", opt.gpu_layers,
                 "Layers on the GPU(s), the first ones on the CPU: a number or auto (as many as fit)")
      ->capture_default_str();
  app.add_flag("!--no-fit", opt.fit,
               "Refuse to start instead of lowering the context or moving layers to the CPU when the model does not "
               "fit");
  CLI11_PARSE(app, argc, argv);
  if (!opt.draft.empty() && opt.spec_method == "off") opt.spec_method = "draft";
  if (opt.spec_method == "draft" && opt.draft.empty()) {
    std::fprintf(stderr, "llm-worker-rbee: --spec draft needs --draft MODEL\n");
    return 2;
  }
  if (opt.spec_method != "draft" && !opt.draft.empty()) {
    std::fprintf(stderr, "llm-worker-rbee: --draft contradicts --spec %s\n", opt.spec_method.c_str());
    return 2;
  }
  if (opt.spec_ngram_min > opt.spec_ngram_max) {
    std::fprintf(stderr, "llm-worker-rbee: --spec-ngram-min (%d) exceeds --spec-ngram-max (%d)\n", opt.spec_ngram_min,
                 opt.spec_ngram_max);
    return 2;
  }
  if (!rbee::server::apply_program_backend(fixed_backend, backend->count() > 0, opt.w.backend, "llm-worker-rbee")) {
    return 2;
  }
  try {
    return run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llm-worker-rbee: error: %s\n", e.what());
    return 1;
  }
}
