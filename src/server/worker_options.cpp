#include "server/worker_options.h"

#include <algorithm>

#include "rbee/backend/device.h"
#include "rbee/core/log.h"
#include "rbee/core/thread_pool.h"

namespace rbee::server {

CLI::Option* add_worker_options(CLI::App& app, WorkerOptions& opt, const std::string& model_help) {
  app.add_option("--model", opt.model, model_help)->required();
  app.add_option("--model-ref", opt.model_ref, "Label reported to the hive (e.g. hf:org/repo:file)");
  app.add_option("--worker-id", opt.worker_id, "Worker id for the hive (default: random)");
  app.add_option("--host", opt.host, "Address to listen on")->capture_default_str();
  app.add_option("--port", opt.port, "Port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--hive-url", opt.hive_url, "Hive to send heartbeats to (http://host:port)");
  CLI::Option* backend = app.add_option("--backend", opt.backend, "auto (CUDA, then ROCm, then CPU), cpu, cuda or rocm")
                             ->check(CLI::IsMember({"auto", "cpu", "cuda", "rocm"}))
                             ->capture_default_str();
  app.add_option("--device,--cuda-device,--rocm-device", opt.device, "GPU index within the backend")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("-t,--threads", opt.threads, "CPU threads (default: RBEE_THREADS or every CPU)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--http-threads", opt.http_threads, "HTTP connection threads (default: one per running and queued "
                                                     "job's stream, plus 16)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-body-kb", opt.max_body_kb, "Largest request body in KiB (beyond: 413)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--max-connections", opt.max_connections, "Open HTTP connections at most (beyond: 503 and close)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--max-connections-per-client", opt.max_connections_per_client,
                 "Open HTTP connections per client address at most")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--cors-origins", opt.cors_origins, "Browser origins allowed to call the API, comma-separated "
                                                     "(\"*\": any; \"\": none)")
      ->capture_default_str();
  app.add_option("--request-timeout", opt.request_timeout, "Seconds a job may take at most")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--shutdown-timeout", opt.shutdown_timeout, "Seconds running jobs get to finish on SIGTERM")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--heartbeat-interval", opt.heartbeat_interval, "Seconds between heartbeats")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--public-probes", opt.public_probes,
               "Serve /ready and /metrics without the token (for Kubernetes probes and metric scrapers such as "
               "the Gateway API Inference Extension's endpoint picker, which send none)");
  return backend;
}

Device& select_worker_device(const WorkerOptions& opt) {
  if (opt.threads > 0) ThreadPool::set_global_threads(opt.threads);
  Registry& registry = Registry::global();
  for (const auto& line : registry.load_plugins()) log::info("event=plugin {}", line);
  std::string why;
  Device& device = registry.select(opt.backend, opt.device, &why);
  log::info("event=device id={} name=\"{}\" reason=\"{}\"", device.id(), device.info().name, why);
  return device;
}

HttpOptions worker_http_options(const WorkerOptions& opt, int default_threads) {
  HttpOptions h;
  h.host = opt.host;
  h.port = opt.port;
  h.threads = opt.http_threads > 0 ? opt.http_threads : default_threads;
  h.max_body_bytes = (size_t)opt.max_body_kb * 1024;
  h.max_connections = opt.max_connections;
  h.max_connections_per_client = opt.max_connections_per_client;
  h.cors_origins.clear();
  for (size_t start = 0; start <= opt.cors_origins.size();) {
    const size_t comma = std::min(opt.cors_origins.find(',', start), opt.cors_origins.size());
    std::string origin = opt.cors_origins.substr(start, comma - start);
    origin.erase(0, origin.find_first_not_of(' '));
    origin.erase(origin.find_last_not_of(' ') + 1);
    if (!origin.empty()) h.cors_origins.push_back(origin);
    start = comma + 1;
  }
  if (opt.public_probes) {
    h.public_paths.push_back("/ready");
    h.public_paths.push_back("/metrics");
  }
  api_token_from_env(h);
  return h;
}

WorkerFrontEnd::~WorkerFrontEnd() {
  if (thread_.joinable()) stop("stopped");
}

void WorkerFrontEnd::start(const WorkerOptions& opt, bool auth, std::function<std::string()> status,
                           std::function<nlohmann::json()> load) {
  load_ = std::move(load);
  http_.bind();
  identity_.port = http_.port();
  thread_ = std::thread([this] { http_.run(); });
  log::info("event=listening host={} port={} auth={} worker_id={}", opt.host, http_.port(), auth ? "bearer" : "off",
            identity_.worker_id);
  if (!opt.hive_url.empty()) {
    heartbeat_ = start_heartbeat(opt.hive_url, opt.heartbeat_interval, [this, status = std::move(status)] {
      nlohmann::json body = heartbeat_body(identity_, status(), &device_);
      if (load_) body["worker"]["load"] = load_();
      return body;
    });
  }
}

void WorkerFrontEnd::stop(const std::string& final_status) {
  if (heartbeat_) {
    nlohmann::json body = heartbeat_body(identity_, final_status, &device_);
    if (load_) body["worker"]["load"] = load_();
    heartbeat_->stop(&body);
    heartbeat_.reset();
  }
  http_.stop();
  if (thread_.joinable()) thread_.join();
}

void wait_for_streams(const std::function<size_t()>& streaming, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (streaming() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace rbee::server
