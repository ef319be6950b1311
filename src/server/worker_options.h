// What both workers' main() share: the flags every worker takes (the CLI of docs/DESIGN.md section 5 plus the serving knobs),
// the device choice, the HTTP options, and the front end that serves HTTP and sends heartbeats from bind to
// shutdown. Each worker adds its model-specific flags and its routes.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "server/device_stats.h"
#include "server/heartbeat.h"
#include "server/http_server.h"
#include "server/worker_base.h"

namespace rbee {
class Device;
}

namespace rbee::server {

struct WorkerOptions {
  std::string model, model_ref, worker_id, host = "127.0.0.1", hive_url, backend = "auto";
  int port = 8080, device = 0, threads = 0, http_threads = 0, max_body_kb = 1024;
  int max_connections = 2048, max_connections_per_client = 512;
  std::string cors_origins = "*";
  double heartbeat_interval = 5.0, request_timeout = 600.0, shutdown_timeout = 30.0;
  bool public_probes = false;  // /ready and /metrics without the token (Kubernetes probes, metric scrapers)
};

// Registers --model (required, described by model_help), --model-ref, --worker-id, --host, --port, --hive-url,
// --backend, --device (alias --cuda-device, --rocm-device), -t/--threads, --http-threads, --max-body-kb,
// --request-timeout, --shutdown-timeout, --heartbeat-interval, --max-connections, --max-connections-per-client,
// --cors-origins and --public-probes. Returns the --backend option (its count()
// tells whether it was given, for apply_program_backend).
CLI::Option* add_worker_options(CLI::App& app, WorkerOptions& opt, const std::string& model_help);

// Sets the CPU thread count, loads the GPU plug-ins and picks the device (logged with the reason).
Device& select_worker_device(const WorkerOptions& opt);

// host, port, body limit, token (LLORCH_API_TOKEN), connection threads (--http-threads, else default_threads) and
// the public paths (/health; with --public-probes also /ready and /metrics).
HttpOptions worker_http_options(const WorkerOptions& opt, int default_threads);

// The HTTP server on its own thread and the heartbeat, from start() to stop().
class WorkerFrontEnd {
 public:
  WorkerFrontEnd(HttpServer& http, WorkerIdentity& identity, DeviceStats& device)
      : http_(http), identity_(identity), device_(device) {}
  ~WorkerFrontEnd();

  // Binds (identity.port gets the port), serves on a thread, logs event=listening, and sends heartbeats to
  // opt.hive_url (when set) with the status word `status` returns and, when `load` is given, its object as
  // worker.load (the LLM worker's queue, slots and cache figures: the ones /metrics has for routers).
  void start(const WorkerOptions& opt, bool auth, std::function<std::string()> status,
             std::function<nlohmann::json()> load = nullptr);
  // Sends one last heartbeat with final_status, stops serving and joins the HTTP thread.
  void stop(const std::string& final_status);

 private:
  HttpServer& http_;
  WorkerIdentity& identity_;
  DeviceStats& device_;
  std::thread thread_;
  std::unique_ptr<Heartbeat> heartbeat_;
  std::function<nlohmann::json()> load_;
};

// After a drain: gives the open streams up to `limit` to write their last events; streaming() counts them.
void wait_for_streams(const std::function<size_t()>& streaming, std::chrono::milliseconds limit);

}  // namespace rbee::server
