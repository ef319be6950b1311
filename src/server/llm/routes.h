// The LLM worker's routes (docs/DESIGN.md section 5): the rbee contract (/info, /v1/jobs, /v1/inference, SSE streams,
// DELETE), the OpenAI-compatible API and the chat page at /. /health, /ready and /metrics come from
// worker_base.h. Routes are registered before the model loads; until the service is set, job routes answer
// 503 "loading" with Retry-After.
#pragma once

#include <atomic>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/device_stats.h"
#include "server/http_server.h"
#include "server/lifecycle.h"
#include "server/llm/llm_service.h"
#include "server/metrics.h"
#include "server/worker_base.h"

namespace rbee::server::llm_api {

struct LlmWorkerContext {
  LlmWorkerContext(Lifecycle& l, Metrics& m, DeviceStats& d) : lifecycle(l), metrics(m), device(d) {}
  Lifecycle& lifecycle;
  Metrics& metrics;
  DeviceStats& device;
  WorkerIdentity identity;
  std::string model_path;
  std::string model_ref;
  std::string model_name;          // what /v1/models lists
  int ctx_size = 0;
  int parallel = 0;
  nlohmann::json memory_plan;      // MemoryPlan::to_json() of the load (null before)
  std::atomic<LlmService*> service{nullptr};  // set once the model is loaded
  int64_t started_unix = 0;

  // The service, or ApiError 503 "loading" while the model loads.
  LlmService& need_service();
  nlohmann::json info();
};

void add_rbee_routes(HttpServer& http, LlmWorkerContext& ctx);
void add_openai_routes(HttpServer& http, LlmWorkerContext& ctx);
// POST /tokenize and /detokenize.
void add_tokenize_routes(HttpServer& http, LlmWorkerContext& ctx);
// GET / serves the chat page (static HTML, no secret in it). It is a public path: the page loads without the token,
// asks for it when the API answers 401 and sends it as an Authorization header on its own API calls.
void add_page_route(HttpServer& http, std::string_view html);

// The worker's status word for heartbeats: "loading", "ready", "busy" (every slot taken), "draining", "failed".
std::string worker_status(LlmWorkerContext& ctx);

}  // namespace rbee::server::llm_api
