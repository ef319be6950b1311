// Embedding throughput of the default model (SmolLM2-135M, Q4_1) through the scheduler, as /v1/embeddings runs
// it: a batch of inputs of one length submitted together (prefill-only jobs, last-token pooling, unit length),
// `parallel` = the batch. Reports embeddings and prompt tokens per second.
#include <condition_variable>
#include <filesystem>
#include <mutex>

#include <benchmark/benchmark.h>

#include "rbee/llm/model.h"
#include "rbee/llm/scheduler.h"

namespace {

using namespace rbee::llm;

struct Done : JobSink {
  void on_started() override {}
  void on_text(int, const std::string&) override {}
  void on_finished(const JobSummary&) override {
    std::lock_guard lock(m);
    done = true;
    cv.notify_all();
  }
  void wait() {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return done; });
  }
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
};

Model* model() {
  static std::unique_ptr<Model> m = [] {
    const std::string path = std::string(RBEE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    return std::filesystem::exists(path) ? Model::load(path) : nullptr;
  }();
  return m.get();
}

void BM_Embeddings(benchmark::State& state) {
  Model* m = model();
  if (!m) {
    state.SkipWithError("models/SmolLM2-135M-Instruct.Q4_1.gguf is missing (scripts/setup.sh)");
    return;
  }
  const int tokens = (int)state.range(0), batch = (int)state.range(1);
  KvCache cache(m->device(), m->config(), 512, 16);
  SchedulerOptions opt;
  opt.parallel = batch;
  opt.prefill_budget = 2048;
  Scheduler sched(*m, cache, opt);
  std::vector<TokenId> prompt;
  for (int i = 0; i < tokens; ++i) prompt.push_back((TokenId)(1000 + (i * 37) % 20000));
  for (auto _ : state) {
    std::vector<std::shared_ptr<Done>> sinks;
    for (int b = 0; b < batch; ++b) {
      JobRequest r;
      r.prompt = prompt;
      r.prompt[0] = (TokenId)(500 + b);  // different inputs
      r.embed = true;
      sinks.push_back(std::make_shared<Done>());
      sched.submit(std::move(r), sinks.back(), nullptr);
    }
    for (auto& s : sinks) s->wait();
  }
  state.counters["embeddings_per_s"] = benchmark::Counter((double)batch, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens_per_s"] =
      benchmark::Counter((double)batch * tokens, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Embeddings)->Args({16, 1})->Args({64, 1})->Args({64, 16})->Args({256, 8})->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
