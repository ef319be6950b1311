// What routers read from an LLM worker: queue depth, running requests, KV-cache usage and the prefix-cache hit
// ratio, under rbee's names and under the vLLM names that the Gateway API Inference Extension's model-server
// protocol scrapes (vllm:num_requests_waiting, vllm:num_requests_running, vllm:gpu_cache_usage_perc and its newer
// spelling vllm:kv_cache_usage_perc), so an unmodified endpoint picker can route to rbee (docs/DEPLOY.md).
// The same figures go into the heartbeat to the hive and /info ("load").
#pragma once

#include <cstdint>
#include <mutex>

#include <nlohmann/json.hpp>

#include "rbee/llm/scheduler.h"
#include "server/metrics.h"

namespace rbee::server::llm_api {

struct ServingFigures {
  int queued = 0;                 // jobs waiting for a slot
  int running = 0;                // jobs in the running batch
  int parallel = 0;               // slots (--parallel)
  double kv_cache_usage = 0;      // blocks held by running jobs / all blocks, 0..1 (parked cached blocks are free)
  int kv_blocks_total = 0, kv_blocks_free = 0;
  int block_size = 0;
  int cached_blocks = 0;          // prefix-cache blocks, held or parked
  uint64_t prefix_queried_tokens = 0, prefix_hit_tokens = 0;
  double prefix_cache_hit_ratio = 0;  // hit / queried prompt tokens since start (0 before any query)
  uint64_t spec_drafted_tokens = 0, spec_accepted_tokens = 0;
};

ServingFigures serving_figures(const llm::SchedulerStats& stats, int parallel);
// {"queued","running","parallel","kv_cache_usage","prefix_cache_hit_ratio","prefix_cache_hit_tokens",
//  "prefix_cache_queried_tokens","spec_drafted_tokens","spec_accepted_tokens"}
nlohmann::json serving_json(const ServingFigures& f);

// The metric families, described once; update() sets the gauges and advances the counters to the figures' totals.
class ServingMetrics {
 public:
  explicit ServingMetrics(Metrics& metrics);
  // Before the model is loaded: slots only (everything else stays 0).
  void update_idle(int parallel);
  void update(const ServingFigures& f);

 private:
  Metrics& m_;
  std::mutex mutex_;
  uint64_t queried_ = 0, hits_ = 0, drafted_ = 0, accepted_ = 0;  // totals already added to the counters
  int64_t started_unix_ = 0;
};

}  // namespace rbee::server::llm_api
