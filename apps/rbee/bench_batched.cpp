#include "bench_batched.h"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>

#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/core/step_times.h"
#include "rbee/llm/kv_cache.h"
#include "rbee/llm/scheduler.h"

namespace rbee::cli {

namespace {

using Clock = std::chrono::steady_clock;

// What the jobs' sinks report to the benchmark thread.
struct Shared {
  std::mutex mutex;
  std::condition_variable cv;
  int finished = 0;
  std::vector<llm::JobSummary> summaries;
};

// Collects each job's summary.
class Collector final : public llm::JobSink {
 public:
  explicit Collector(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
  void on_started() override {}
  void on_text(int, const std::string&) override {}
  void on_finished(const llm::JobSummary& summary) override;

 private:
  std::shared_ptr<Shared> shared_;
};

void Collector::on_finished(const llm::JobSummary& summary) {
  std::lock_guard lock(shared_->mutex);
  shared_->summaries.push_back(summary);
  ++shared_->finished;
  shared_->cv.notify_all();
}

struct RunTimes {
  double t_pp = 0, t_tg = 0;
};

// One run of `batch` jobs through a fresh scheduler; returns T_PP and T_TG.
RunTimes run_once(llm::Model& model, llm::KvCache& cache, int batch, int n_prompt, int n_gen, bool host_sampling,
                  std::mt19937_64& rng) {
  llm::SchedulerOptions options;
  options.host_sampling = host_sampling;
  options.parallel = batch;
  options.max_queue = batch;
  options.prefill_budget = batch * n_prompt;
  llm::Scheduler scheduler(model, cache, options);
  auto shared = std::make_shared<Shared>();
  std::uniform_int_distribution<int> token(0, model.config().vocab_size - 1);
  std::vector<llm::JobRequest> requests((size_t)batch);
  for (int i = 0; i < batch; ++i) {
    llm::JobRequest& r = requests[(size_t)i];
    r.id = "bench-" + std::to_string(i);
    r.prompt.resize((size_t)n_prompt);
    for (auto& t : r.prompt) t = token(rng);
    r.sampling.temperature = 0.f;
    r.max_tokens = n_gen + 1;  // the first token comes from the prompt pass; then n_gen decode steps
    r.ignore_eos = true;
  }
  std::vector<std::shared_ptr<llm::JobHandle>> handles((size_t)batch);
  const auto t0 = Clock::now();
  for (int i = 0; i < batch; ++i) {
    const auto accepted =
        scheduler.submit(std::move(requests[(size_t)i]), std::make_shared<Collector>(shared), &handles[(size_t)i]);
    RBEE_CHECK(accepted == llm::Scheduler::Submit::Accepted, "bench: the scheduler refused job {} of {}", i, batch);
  }
  {
    std::unique_lock lock(shared->mutex);
    shared->cv.wait(lock, [&] { return shared->finished == batch; });
  }
  const double total = std::chrono::duration<double>(Clock::now() - t0).count();
  RunTimes rt;
  for (const auto& s : shared->summaries) {
    RBEE_CHECK(s.reason == llm::StopReason::MaxTokens && s.tokens_out == n_gen + 1,
               "bench: a job ended early ({} of {} tokens, error '{}': {})", s.tokens_out, n_gen + 1, s.error_code,
               s.error_message);
    rt.t_pp = std::max(rt.t_pp, s.queue_seconds + s.prompt_seconds);
  }
  rt.t_tg = total - rt.t_pp;
  return rt;
}

}  // namespace

std::vector<BatchedResult> bench_batched(llm::Model& model, DType kv_dtype, const std::vector<int>& batches,
                                         int n_prompt, int n_gen, int repetitions, uint64_t seed,
                                         bool host_sampling) {
  RBEE_CHECK(n_prompt >= 1 && n_gen >= 1, "bench --batch: needs --n-prompt >= 1 and --n-gen >= 1 (got {} and {})",
             n_prompt, n_gen);
  for (int b : batches) RBEE_CHECK(b >= 1 && b <= 4096, "bench: --batch values must be in [1, 4096], got {}", b);
  std::vector<BatchedResult> results;
  std::mt19937_64 rng(seed);
  const int block = 16;
  for (int b : batches) {
    const int per_seq = (n_prompt + n_gen + 1 + block - 1) / block;
    llm::KvCache cache(model.kv_layout(), b * per_seq, block, kv_dtype);
    run_once(model, cache, b, n_prompt, std::min(n_gen, 8), host_sampling, rng);  // warm-up
    step_times::reset();  // RBEE_STEP_TIMES: the timed runs of this batch size only
    BatchedResult r;
    r.batch = b;
    r.n_prompt = n_prompt;
    r.n_gen = n_gen;
    const uint64_t replays0 = model.decode_graph_replays();
    for (int i = 0; i < repetitions; ++i) {
      const RunTimes rt = run_once(model, cache, b, n_prompt, n_gen, host_sampling, rng);
      r.t_pp += rt.t_pp / repetitions;
      r.t_tg += rt.t_tg / repetitions;
    }
    r.graph_replays = model.decode_graph_replays() - replays0;
    r.s_pp = (double)b * n_prompt / r.t_pp;
    r.s_tg = (double)b * n_gen / r.t_tg;
    r.s_total = (double)b * (n_prompt + n_gen) / (r.t_pp + r.t_tg);
    results.push_back(r);
  }
  return results;
}

}  // namespace rbee::cli
