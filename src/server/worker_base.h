// What every rbee worker (llm-worker-rbee, sd-worker-rbee) has around its model: /health, /ready, /metrics,
// the heartbeat body of docs/DESIGN.md section 5, and the process-level metrics (VRAM). A worker adds its own routes.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/device_stats.h"
#include "server/heartbeat.h"
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
//  "vram_total","devices":[{"id","name","vram_used","vram_total"}, ...]},"timestamp"}: "device" and the vram
// figures cover every device the model uses (ids joined with ',', memory summed), "devices" each one. device may
// be null while no device is chosen (then "", zeros and []).
nlohmann::json heartbeat_body(const WorkerIdentity& id, const std::string& status, DeviceStats* device);

// The GET /info fields every worker has: worker_id, implementation ("rbee"), version, model, model_path, model_ref
// (null when none), backend, and device {id, name, vendor, arch, vram_total, vram_used} of the snapshot `d`.
// A worker adds its own fields.
nlohmann::json worker_info_common(const WorkerIdentity& id, const std::string& model_name,
                                  const std::string& model_path, const std::string& model_ref,
                                  const DeviceSnapshot& d);

// What a job route answers before the model is ready: ApiError 503 "loading" with Retry-After, or 503
// "load_failed" once loading failed.
[[noreturn]] void throw_not_ready(const Lifecycle& lifecycle);

// The backend a program's name fixes: "<base>-cuda" -> "cuda" (also cpu, rocm); "" for the plain name.
std::string backend_from_program_name(const char* argv0, std::string_view base);
// Applies a backend fixed by the program name to `backend` (the --backend value). Returns false, having printed why
// on stderr, when --backend was given (`given`) and contradicts the name.
bool apply_program_backend(const std::string& fixed, bool given, std::string& backend, std::string_view program);

// Sets options.api_token from LLORCH_API_TOKEN when that is set and not empty.
void api_token_from_env(HttpOptions& options);

// Starts heartbeats to hive_url every interval_s seconds; retries back off up to six intervals, so a hive that
// comes back hears from the worker soon.
std::unique_ptr<Heartbeat> start_heartbeat(const std::string& hive_url, double interval_s, Heartbeat::BodyFn body);

}  // namespace rbee::server
