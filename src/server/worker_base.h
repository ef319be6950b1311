// What every rbee worker (llm-worker-rbee, sd-worker-rbee) has around its model: /health, /ready, /metrics,
// the heartbeat body of DESIGN section 4, and the process-level metrics (VRAM). A worker adds its own routes.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "server/device_stats.h"
#include "server/http_server.h"
#include "server/lifecycle.h"
#include "server/metrics.h"

namespace rbee::server {

struct WorkerIdentity {
  std::string worker_id;
  std::string model_id;   // --model-ref when given, else the model path
  std::string version;    // RBEE_VERSION
  int port = 0;
};

// Registers GET /health (no auth), GET /ready and GET /metrics, and the VRAM gauges.
// `status` returns the worker status word for heartbeats ("loading", "ready", "busy", "draining").
void add_common_routes(HttpServer& http, Lifecycle& lifecycle, Metrics& metrics, DeviceStats* device);

// {"worker":{"id","model_id","device","port","status","implementation":"rbee","version","vram_used",
//  "vram_total"},"timestamp"}. device may be null while no device is chosen (then "" and zeros).
nlohmann::json heartbeat_body(const WorkerIdentity& id, const std::string& status, DeviceStats* device);

}  // namespace rbee::server
