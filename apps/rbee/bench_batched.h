// `rbee bench --batch B1,B2,...`: aggregate throughput of B concurrent sequences through the continuous-batching
// Scheduler (rbee/llm/scheduler.h), the path llm-worker-rbee serves requests with. Measured the way
// llama-batched-bench measures its "prompt not shared" mode, so the numbers can stand next to each other:
//   B jobs, each with its own random prompt of PP tokens, are submitted at once (greedy, EOS ignored). The
//   scheduler's prefill budget is B x PP, so every prompt goes through in the first step, whose sampled token
//   is each job's first; then TG decode steps of all B sequences follow (max_tokens = TG + 1).
//   T_PP  submission -> every job has its first token      S_PP = B x PP / T_PP
//   T_TG  first token -> every job finished                S_TG = B x TG / T_TG   (aggregate decode tokens/s)
//   T     T_PP + T_TG                                      S    = B x (PP + TG) / T
// Each B runs once unmeasured (short: warms the caching allocator and records the decode graphs), then
// `repetitions` times; means are reported.
#pragma once

#include <cstdint>
#include <vector>

#include "rbee/llm/model.h"

namespace rbee::cli {

struct BatchedResult {
  int batch = 0, n_prompt = 0, n_gen = 0;
  double t_pp = 0, t_tg = 0;  // seconds, mean over repetitions
  double s_pp = 0, s_tg = 0, s_total = 0;
  uint64_t graph_replays = 0;  // decode steps replayed from a graph during the timed runs
};

// Runs the measurement for each batch size; the KV cache is made per batch size (B x (PP + TG + 1) positions).
// host_sampling: the scheduler samples from host logits (SchedulerOptions::host_sampling), for A/B runs.
std::vector<BatchedResult> bench_batched(llm::Model& model, DType kv_dtype, const std::vector<int>& batches,
                                         int n_prompt, int n_gen, int repetitions, uint64_t seed,
                                         bool host_sampling = false);

}  // namespace rbee::cli
