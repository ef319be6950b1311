// Automatic prefix caching in the scheduler on the default model: greedy and seeded outputs are identical with
// and without the cache (jobs admitted together, one after another, multi-turn continuations, n > 1); the cache
// is really used (cached prompt tokens, hit counters); under pressure cached blocks are evicted and no request is
// lost; every block comes back at the end; multi-device placements (a layer split, a tensor split over CPU
// instances) share one block table over every device's part of the cache.
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "rbee/backend/device.h"
#include "rbee/llm/memory_plan.h"
#include "rbee/llm/placement.h"
#include "common/default_model.h"
#include "common/text_sink.h"
#include "rbee/llm/prompt.h"
#include "rbee/llm/scheduler.h"

namespace rbee::llm {
namespace {

class PrefixCacheScheduler : public DefaultModelTest {};

// A shared "system prompt" of a few hundred tokens and short different questions after it.
std::string system_prompt() {
  std::string s = "You are a careful assistant for a bee-keeping cooperative. Rules:\n";
  for (int i = 1; i <= 24; ++i) {
    s += std::to_string(i) + ". Answer questions about hive number " + std::to_string(i * 7) +
         " with the inspection notes of week " + std::to_string(i % 5 + 1) + ".\n";
  }
  return s;
}
const std::vector<std::string> kQuestions = {
    "Question: what do bees eat?\nAnswer:", "Question: how many queens live in one hive?\nAnswer:",
    "Question: when is honey harvested?\nAnswer:", "Question: why do bees swarm?\nAnswer:",
    "Question: what is royal jelly?\nAnswer:", "Question: how cold can a hive get?\nAnswer:"};

struct Outcome {
  std::string text;
  JobSummary summary;
};

// Runs the prompts through one scheduler: all submitted at once (wave) or each after the previous one ended.
std::vector<Outcome> run(Model& model, KvCache& cache, const std::vector<std::vector<TokenId>>& prompts,
                         const SchedulerOptions& opt, const SamplingParams& sp, bool wave, int max_tokens = 16,
                         SchedulerStats* stats = nullptr) {
  Scheduler sched(model, cache, opt);
  std::vector<std::shared_ptr<TextSink>> sinks;
  for (size_t i = 0; i < prompts.size(); ++i) {
    JobRequest req;
    req.id = "p";
    req.id += std::to_string(i);
    req.prompt = prompts[i];
    req.sampling = sp;
    req.sampling.seed = sp.seed + i;
    req.max_tokens = max_tokens;
    auto sink = std::make_shared<TextSink>();
    EXPECT_EQ(sched.submit(req, sink, nullptr), Scheduler::Submit::Accepted);
    if (!wave) sink->wait();
    sinks.push_back(sink);
  }
  std::vector<Outcome> out;
  for (auto& s : sinks) {
    s->wait();
    out.push_back({s->text, s->summary});
  }
  if (stats) *stats = sched.stats();
  return out;
}

std::vector<std::vector<TokenId>> prompts(Model& model) {
  std::vector<std::vector<TokenId>> p;
  for (const auto& q : kQuestions) p.push_back(text_tokens(model, system_prompt() + q));
  return p;
}

void expect_same(const std::vector<Outcome>& with, const std::vector<Outcome>& without, const char* what) {
  ASSERT_EQ(with.size(), without.size());
  for (size_t i = 0; i < with.size(); ++i) {
    EXPECT_EQ(with[i].text, without[i].text) << what << ": prompt " << i << " differs with the prefix cache";
    EXPECT_EQ(with[i].summary.tokens_out, without[i].summary.tokens_out) << what << ": prompt " << i;
    EXPECT_EQ(with[i].summary.reason, without[i].summary.reason) << what << ": prompt " << i;
    EXPECT_EQ(without[i].summary.cached_prompt_tokens, 0) << what << ": the cache was off";
  }
}

TEST_F(PrefixCacheScheduler, GreedyOutputsAreIdenticalWithAndWithoutTheCache) {
  const auto ps = prompts(*model_);
  const int shared = (int)text_tokens(*model_, system_prompt()).size();
  ASSERT_GT(shared, 300);
  SamplingParams sp;
  sp.temperature = 0;
  SchedulerOptions off;
  off.parallel = 6;
  off.prefix_cache = false;
  SchedulerOptions on = off;
  on.prefix_cache = true;
  KvCache c1(model_->device(), model_->config(), 256, 16);
  const auto without = run(*model_, c1, ps, off, sp, /*wave=*/true);

  // One after another: every later job finds the system prompt's full blocks at admission.
  KvCache c2(model_->device(), model_->config(), 256, 16);
  SchedulerStats st;
  const auto sequential = run(*model_, c2, ps, on, sp, /*wave=*/false, 16, &st);
  expect_same(sequential, without, "sequential");
  EXPECT_EQ(sequential[0].summary.cached_prompt_tokens, 0) << "nothing was cached yet";
  for (size_t i = 1; i < ps.size(); ++i) {
    EXPECT_GE(sequential[i].summary.cached_prompt_tokens, shared / 16 * 16 - 16) << "prompt " << i;
    EXPECT_EQ(sequential[i].summary.cached_prompt_tokens % 16, 0);
    EXPECT_EQ(sequential[i].summary.prompt_tokens_evaluated + sequential[i].summary.cached_prompt_tokens,
              (int)ps[i].size());
  }
  EXPECT_GT(st.prefix_hit_tokens, 0u);
  EXPECT_LT(st.prefix_hit_tokens, st.prefix_queried_tokens);
  EXPECT_GT(st.cached_blocks, 0);
  EXPECT_EQ(st.free_blocks, 256) << "parked blocks count as free; nothing leaked";

  // All at once with a small prefill budget: jobs admitted in the same step take the blocks the first one
  // publishes before their own prompt chunks run.
  KvCache c3(model_->device(), model_->config(), 256, 16);
  SchedulerOptions wave = on;
  wave.prefill_budget = 64;
  const auto together = run(*model_, c3, ps, wave, sp, /*wave=*/true, 16, &st);
  expect_same(together, without, "wave");
  int hits = 0;
  for (const auto& o : together) hits += o.summary.cached_prompt_tokens;
  EXPECT_GT(hits, shared * 3) << "later jobs of the wave should reuse the first one's blocks";

  // A warm cache from the previous run (same KvCache, new scheduler): hits from the first job on.
  const auto warm = run(*model_, c3, ps, on, sp, /*wave=*/true, 16, &st);
  expect_same(warm, without, "warm");
  for (const auto& o : warm) EXPECT_GT(o.summary.cached_prompt_tokens, 0);
}

TEST_F(PrefixCacheScheduler, SeededSamplingAndChoicesAreIdenticalWithAndWithoutTheCache) {
  const auto ps = prompts(*model_);
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_k = 40;
  sp.has_seed = true;
  sp.seed = 77;
  SchedulerOptions off;
  off.parallel = 6;
  off.prefix_cache = false;
  SchedulerOptions on = off;
  on.prefix_cache = true;
  KvCache c1(model_->device(), model_->config(), 256, 16);
  KvCache c2(model_->device(), model_->config(), 256, 16);
  expect_same(run(*model_, c2, ps, on, sp, false), run(*model_, c1, ps, off, sp, true), "seeded");

  // n = 3 choices of a prompt whose prefix is cached: the leader adopts, the others fork from it.
  std::vector<std::string> reference;  // the texts without the cache
  for (bool cache_on : {false, true}) {
    KvCache c(model_->device(), model_->config(), 256, 16);
    SchedulerOptions o = cache_on ? on : off;
    Scheduler sched(*model_, c, o);
    std::vector<std::string> texts;
    for (int round = 0; round < 2; ++round) {
      JobRequest req;
      req.prompt = ps[round];
      req.sampling = sp;
      req.max_tokens = 12;
      req.n = 3;
      std::vector<std::shared_ptr<TextSink>> sinks{std::make_shared<TextSink>(), std::make_shared<TextSink>(),
                                               std::make_shared<TextSink>()};
      std::vector<std::shared_ptr<JobSink>> as_sinks(sinks.begin(), sinks.end());
      ASSERT_EQ(sched.submit(req, as_sinks, nullptr), Scheduler::Submit::Accepted);
      for (auto& s : sinks) {
        s->wait();
        texts.push_back(s->text);
      }
      if (round == 1) {
        EXPECT_EQ(sinks[0]->summary.cached_prompt_tokens > 0, cache_on);
      }
    }
    if (!cache_on) {
      reference = texts;
    } else {
      EXPECT_EQ(texts, reference) << "n = 3 choices differ with the prefix cache";
    }
  }
}

TEST_F(PrefixCacheScheduler, MultiTurnContinuationReusesGeneratedBlocks) {
  // Turn 2's prompt is turn 1's prompt + its answer + more text: the blocks holding generated tokens are reused.
  SamplingParams sp;
  sp.temperature = 0;
  const auto first = text_tokens(*model_, system_prompt() + kQuestions[0]);
  SchedulerOptions on;
  on.parallel = 2;
  KvCache cache(model_->device(), model_->config(), 256, 16);
  Scheduler sched(*model_, cache, on);
  auto turn = [&](const std::vector<TokenId>& prompt, int max_tokens) {
    JobRequest req;
    req.prompt = prompt;
    req.sampling = sp;
    req.max_tokens = max_tokens;
    req.ignore_eos = true;
    auto sink = std::make_shared<TextSink>();
    EXPECT_EQ(sched.submit(req, sink, nullptr), Scheduler::Submit::Accepted);
    sink->wait();
    return sink;
  };
  const auto a = turn(first, 40);
  auto second = first;
  const auto answer = text_tokens(*model_, a->text, false, /*add_special=*/false);
  second.insert(second.end(), answer.begin(), answer.end());
  const auto more = text_tokens(*model_, "\nQuestion: and in winter?\nAnswer:", false, false);
  second.insert(second.end(), more.begin(), more.end());
  const auto b = turn(second, 8);
  // The answer re-tokenized may differ from the generated ids at its end; its first blocks are the same.
  EXPECT_GT(b->summary.cached_prompt_tokens, (int)first.size()) << "blocks of generated tokens were not reused";

  // Same answer as without the cache.
  SchedulerOptions off = on;
  off.prefix_cache = false;
  KvCache c2(model_->device(), model_->config(), 256, 16);
  Scheduler plain(*model_, c2, off);
  JobRequest req;
  req.prompt = second;
  req.sampling = sp;
  req.max_tokens = 8;
  req.ignore_eos = true;
  auto sink = std::make_shared<TextSink>();
  ASSERT_EQ(plain.submit(req, sink, nullptr), Scheduler::Submit::Accepted);
  sink->wait();
  EXPECT_EQ(b->text, sink->text);
}

// Multi-device placements (issue 14) on instances of the host CPU (cpu:1-7, rbee/backend/device.h): a layer split
// keeps each stage's layers' keys and values on the stage's device, a tensor split each rank's kv heads on its own.
// Block ids are shared by every layer and part (kv_cache.h), so one block table, published and adopted once,
// addresses every device's part: with the cache the outputs equal those without it on the same placement, and the
// layer split's equal one device's (the same kernels on the same bytes).
TEST_F(PrefixCacheScheduler, LayerAndTensorSplitsShareOneBlockTable) {
  Registry& reg = Registry::global();
  const int n = model_->config().n_layers;
  Placement layer;
  layer.devices = {&reg.select("cpu", 0), &reg.select("cpu", 1)};
  layer.layer_begin = {0, n / 2, n};
  PlanRequest req;
  req.devices = {&reg.select("cpu", 0), &reg.select("cpu", 3)};
  req.split = SplitMode::Tensor;
  req.ctx_size = 2048;
  const Placement tensor = plan_memory(describe_model(RBEE_DEFAULT_MODEL), req).placement;
  ASSERT_EQ(tensor.split, SplitMode::Tensor);

  const auto all = prompts(*model_);
  const std::vector<std::vector<TokenId>> ps(all.begin(), all.begin() + 3);
  const int shared = (int)text_tokens(*model_, system_prompt()).size();
  SamplingParams sp;
  sp.temperature = 0;
  SchedulerOptions off;
  off.parallel = 3;
  off.prefix_cache = false;
  SchedulerOptions on = off;
  on.prefix_cache = true;
  constexpr int kBlocks = 128;
  KvCache c0(model_->device(), model_->config(), kBlocks, 16);
  const auto one_device = run(*model_, c0, ps, off, sp, /*wave=*/true, 8);
  for (const Placement& p : {layer, tensor}) {
    SCOPED_TRACE(p.describe());
    LoadOptions o;
    o.placement = p;
    auto split = Model::load(RBEE_DEFAULT_MODEL, o);
    KvCache cache(split->kv_layout(), kBlocks, 16);
    for (Device* d : p.devices) EXPECT_GT(cache.bytes_on(*d), 0) << d->id() << " holds no part of the cache";
    SchedulerStats st;
    const auto with = run(*split, cache, ps, on, sp, /*wave=*/false, 8, &st);
    KvCache plain(split->kv_layout(), kBlocks, 16);
    const auto without = run(*split, plain, ps, off, sp, /*wave=*/true, 8);
    expect_same(with, without, p.describe().c_str());
    if (p.split == SplitMode::Layer) {
      for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(with[i].text, one_device[i].text) << "prompt " << i;
    }
    for (size_t i = 1; i < ps.size(); ++i) {
      EXPECT_GE(with[i].summary.cached_prompt_tokens, shared / 16 * 16 - 16) << "prompt " << i;
    }
    // A warm cache, all jobs at once: every one adopts from the first job on.
    const auto warm = run(*split, cache, ps, on, sp, /*wave=*/true, 8, &st);
    expect_same(warm, without, "warm");
    for (const auto& w : warm) EXPECT_GT(w.summary.cached_prompt_tokens, 0);
    EXPECT_EQ(st.free_blocks, kBlocks) << "every block is free or parked at the end";
  }
}

TEST_F(PrefixCacheScheduler, EvictionUnderPressureLosesNoRequest) {
  // 40 jobs in 5 phases of 8; each phase alternates between 2 long prefixes of its own (10 different prefixes, about
  // 110-130 tokens each: 6-7 full blocks shared, then "reader i asks:" and 12 generated tokens of the job's own).
  // A prefix comes round again 2 jobs later (often while a job of it still runs, else parked), so jobs hit the
  // cache; the next phase's prefixes and every job's own full blocks do not fit beside them in 64 blocks (3 running
  // jobs hold ~27-30, each phase computes ~13 prefix blocks plus ~8 blocks of the jobs' own), so cached blocks are
  // evicted all the time. (With one prefix per job modulo 8, a prefix came back only after 7 others had filled the
  // parked space: LRU evicted it every time and no job ever hit.)
  constexpr int kBlocks = 64;
  std::vector<std::vector<TokenId>> ps;
  for (int i = 0; i < 40; ++i) {
    const int doc = (i / 8) * 2 + i % 2;
    std::string text = "Document " + std::to_string(doc) + ": ";
    for (int w = 0; w < 12; ++w) text += "section " + std::to_string(doc * 100 + w) + " of the hive log, ";
    text += "reader " + std::to_string(i) + " asks:";
    ps.push_back(text_tokens(*model_, text));
  }
  ASSERT_GT(ps[0].size(), 64u);
  SamplingParams sp;
  sp.temperature = 0;
  SchedulerOptions on;
  on.parallel = 3;
  on.max_queue = 64;
  SchedulerOptions off = on;
  off.prefix_cache = false;
  KvCache c1(model_->device(), model_->config(), kBlocks, 16);
  KvCache c2(model_->device(), model_->config(), kBlocks, 16);
  SchedulerStats st;
  const auto with = run(*model_, c2, ps, on, sp, /*wave=*/true, 12, &st);
  const auto without = run(*model_, c1, ps, off, sp, /*wave=*/true, 12);
  expect_same(with, without, "under pressure");
  int jobs_with_hits = 0;
  for (size_t i = 0; i < with.size(); ++i) {
    EXPECT_TRUE(with[i].summary.reason == StopReason::MaxTokens || with[i].summary.reason == StopReason::Eos)
        << "job " << i << " ended " << stop_reason_name(with[i].summary.reason) << " " << with[i].summary.error_message;
    if (with[i].summary.cached_prompt_tokens > 0) ++jobs_with_hits;
  }
  EXPECT_GT(st.evicted_blocks, 10u) << "the test did not put the cache under pressure";
  EXPECT_GT(st.prefix_hit_tokens, 0u);
  // 30 jobs are not the first of their prefix in their phase; most of them must have found it.
  EXPECT_GE(jobs_with_hits, 10) << "the prefixes were evicted before they came round again";
  EXPECT_EQ(st.free_blocks, kBlocks) << "every block is free or parked at the end";
  EXPECT_LE(st.cached_blocks, kBlocks);
}

}  // namespace
}  // namespace rbee::llm
