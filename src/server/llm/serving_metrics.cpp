#include "server/llm/serving_metrics.h"

#include <chrono>
#include <string>

namespace rbee::server::llm_api {

ServingFigures serving_figures(const llm::SchedulerStats& s, int parallel) {
  ServingFigures f;
  f.queued = s.queued;
  f.running = s.running;
  f.parallel = parallel;
  f.kv_blocks_total = s.total_blocks;
  f.kv_blocks_free = s.free_blocks;
  f.block_size = s.block_size;
  f.kv_cache_usage = s.total_blocks > 0 ? (double)(s.total_blocks - s.free_blocks) / s.total_blocks : 0.0;
  f.cached_blocks = s.cached_blocks;
  f.prefix_queried_tokens = s.prefix_queried_tokens;
  f.prefix_hit_tokens = s.prefix_hit_tokens;
  f.prefix_cache_hit_ratio =
      s.prefix_queried_tokens > 0 ? (double)s.prefix_hit_tokens / (double)s.prefix_queried_tokens : 0.0;
  f.spec_drafted_tokens = s.spec_drafted_tokens;
  f.spec_accepted_tokens = s.spec_accepted_tokens;
  return f;
}

nlohmann::json serving_json(const ServingFigures& f) {
  return {{"queued", f.queued},
          {"running", f.running},
          {"parallel", f.parallel},
          {"kv_cache_usage", f.kv_cache_usage},
          {"prefix_cache_hit_ratio", f.prefix_cache_hit_ratio},
          {"prefix_cache_hit_tokens", f.prefix_hit_tokens},
          {"prefix_cache_queried_tokens", f.prefix_queried_tokens},
          {"spec_drafted_tokens", f.spec_drafted_tokens},
          {"spec_accepted_tokens", f.spec_accepted_tokens}};
}

ServingMetrics::ServingMetrics(Metrics& m) : m_(m) {
  started_unix_ =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  m.describe_gauge("rbee_queue_depth", "Jobs waiting for a slot.");
  m.describe_gauge("rbee_running_sequences", "Jobs in the running batch.");
  m.describe_gauge("rbee_parallel_slots", "Running jobs at most (--parallel).");
  m.describe_gauge("rbee_kv_cache_blocks_free", "KV cache blocks a job can get: free plus parked prefix-cache blocks.");
  m.describe_gauge("rbee_kv_cache_blocks_total", "KV cache blocks in total.");
  m.describe_gauge("rbee_kv_cache_usage_ratio", "KV cache blocks held by running jobs / all blocks (0..1).");
  m.describe_gauge("rbee_prefix_cache_blocks", "KV cache blocks in the prefix cache (held or parked).");
  m.describe_gauge("rbee_prefix_cache_hit_ratio", "Prompt tokens taken from the prefix cache / prompt tokens looked up, since start (0..1).");
  m.describe_counter("rbee_prefix_cache_queried_tokens_total", "Prompt tokens of admitted jobs looked up in the prefix cache.");
  m.describe_counter("rbee_prefix_cache_hit_tokens_total", "Prompt tokens whose keys and values came from the prefix cache.");
  m.describe_counter("rbee_spec_drafted_tokens_total", "Draft tokens verified by speculative decoding.");
  m.describe_counter("rbee_spec_accepted_tokens_total", "Draft tokens accepted by speculative decoding.");
  // vLLM's names, as the Gateway API Inference Extension's endpoint picker and vLLM dashboards read them.
  m.describe_gauge("vllm:num_requests_waiting", "Requests waiting to be processed (= rbee_queue_depth).");
  m.describe_gauge("vllm:num_requests_running", "Requests in the running batch (= rbee_running_sequences).");
  m.describe_gauge("vllm:gpu_cache_usage_perc", "KV-cache usage, 1 means 100% (= rbee_kv_cache_usage_ratio).");
  m.describe_gauge("vllm:kv_cache_usage_perc", "KV-cache usage, 1 means 100% (= rbee_kv_cache_usage_ratio).");
  m.describe_counter("vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.");
  m.describe_counter("vllm:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.");
  m.describe_gauge("vllm:cache_config_info", "KV cache configuration (labels block_size, num_gpu_blocks); value 1.");
  m.describe_gauge("vllm:lora_requests_info", "LoRA adapters (none: rbee serves one model); value: start time.");
}

void ServingMetrics::update_idle(int parallel) {
  m_.set("rbee_parallel_slots", parallel);
  m_.set("vllm:lora_requests_info", (double)started_unix_,
         {{"max_lora", "0"}, {"running_lora_adapters", ""}, {"waiting_lora_adapters", ""}});
}

void ServingMetrics::update(const ServingFigures& f) {
  update_idle(f.parallel);
  m_.set("rbee_queue_depth", f.queued);
  m_.set("rbee_running_sequences", f.running);
  m_.set("rbee_kv_cache_blocks_total", f.kv_blocks_total);
  m_.set("rbee_kv_cache_blocks_free", f.kv_blocks_free);
  m_.set("rbee_kv_cache_usage_ratio", f.kv_cache_usage);
  m_.set("rbee_prefix_cache_blocks", f.cached_blocks);
  m_.set("rbee_prefix_cache_hit_ratio", f.prefix_cache_hit_ratio);
  m_.set("vllm:num_requests_waiting", f.queued);
  m_.set("vllm:num_requests_running", f.running);
  m_.set("vllm:gpu_cache_usage_perc", f.kv_cache_usage);
  m_.set("vllm:kv_cache_usage_perc", f.kv_cache_usage);
  m_.set("vllm:cache_config_info", 1.0,
         {{"block_size", std::to_string(f.block_size)}, {"num_gpu_blocks", std::to_string(f.kv_blocks_total)}});
  std::lock_guard lock(mutex_);
  // Counters advance to the scheduler's totals (render() may run on several threads at once).
  auto advance = [&](uint64_t total, uint64_t& done, std::initializer_list<const char*> names) {
    if (total <= done) return;
    for (const char* n : names) m_.add(n, (double)(total - done));
    done = total;
  };
  advance(f.prefix_queried_tokens, queried_, {"rbee_prefix_cache_queried_tokens_total", "vllm:prefix_cache_queries_total"});
  advance(f.prefix_hit_tokens, hits_, {"rbee_prefix_cache_hit_tokens_total", "vllm:prefix_cache_hits_total"});
  advance(f.spec_drafted_tokens, drafted_, {"rbee_spec_drafted_tokens_total"});
  advance(f.spec_accepted_tokens, accepted_, {"rbee_spec_accepted_tokens_total"});
}

}  // namespace rbee::server::llm_api
