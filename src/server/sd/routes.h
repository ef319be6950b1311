// sd-worker-rbee's routes (docs/DESIGN.md section 5): /info, POST /v1/jobs (alias /v1/inference), the job's SSE stream
// with named events (progress, preview, complete, error; then `data: [DONE]`), DELETE /v1/jobs/{id}, and
// OpenAI's POST /v1/images/generations. /health, /ready and /metrics come from worker_base.h. Routes are
// registered before the model loads; until the service is set, job routes answer 503 "loading" with Retry-After.
#pragma once

#include <atomic>
#include <string>

#include <nlohmann/json.hpp>

#include "server/sd/requests.h"
#include "server/sd/sd_service.h"
#include "server/device_stats.h"
#include "server/http_server.h"
#include "server/lifecycle.h"
#include "server/worker_base.h"

namespace rbee::server::sd_api {

struct SdWorkerContext {
  SdWorkerContext(Lifecycle& l, Metrics& m, DeviceStats& d) : lifecycle(l), metrics(m), device(d) {}
  Lifecycle& lifecycle;
  Metrics& metrics;
  DeviceStats& device;
  WorkerIdentity identity;
  std::string model_path, model_ref, model_name;
  std::string sd_version;            // the family the files hold (detected when --sd-version is auto)
  std::string sd_version_requested;  // --sd-version as given
  RequestDefaults defaults;
  int queue_size = 0;
  std::atomic<SdService*> service{nullptr};  // set once the model is loaded

  // The service, or ApiError 503 "loading" while the model loads.
  SdService& need_service();
  nlohmann::json info();
};

void add_sd_routes(HttpServer& http, SdWorkerContext& ctx);

// The worker's status word for heartbeats: "loading", "ready", "busy" (a job on the device), "draining", "failed".
std::string worker_status(SdWorkerContext& ctx);

}  // namespace rbee::server::sd_api
