// The continuous-batching scheduler against the single-sequence generate() loop on the default model:
// batched output must equal each prompt run alone (greedy and seeded sampling), cancellation must give every
// cache block back, a long prompt must not stall the other streams, and the queue must be bounded.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/default_model.h"
#include "common/text_sink.h"
#include "rbee/llm/generate.h"
#include "rbee/llm/prompt.h"
#include "rbee/llm/scheduler.h"

namespace rbee::llm {
namespace {

using Recorder = TextSink;  // tests/common/text_sink.h

class SchedulerTest : public DefaultModelTest {};

void expect_same_as_alone(Model& model, const SamplingParams& sp, int prefill_budget) {
  const auto texts = std::vector<std::string>{"The capital of France is", "Once upon a time, a small bee",
                                              "def fibonacci(n):", "The three primary colors are",
                                              "In 1969, the first humans", "A good recipe for pancakes needs"};
  const int max_tokens = 20;
  KvCache cache(model.device(), model.config(), 256, 16);
  SchedulerOptions opt;
  opt.parallel = 6;
  opt.prefill_budget = prefill_budget;
  Scheduler sched(model, cache, opt);
  std::vector<std::shared_ptr<Recorder>> recs;
  for (size_t i = 0; i < texts.size(); ++i) {
    JobRequest req;
    req.id = std::string("t").append(std::to_string(i));
    req.prompt = text_tokens(model, texts[i]);
    req.sampling = sp;
    req.sampling.seed = sp.seed + i;
    req.max_tokens = max_tokens;
    auto rec = std::make_shared<Recorder>();
    ASSERT_EQ(sched.submit(req, rec, nullptr), Scheduler::Submit::Accepted);
    recs.push_back(rec);
  }
  for (auto& r : recs) r->wait();
  EXPECT_GT(sched.stats().max_batch_rows, 1) << "the jobs never shared a batch";
  for (size_t i = 0; i < texts.size(); ++i) {
    KvCache alone_cache(model.device(), model.config(), 64, 16);
    GenerateRequest req;
    req.prompt = text_tokens(model, texts[i]);
    req.sampling = sp;
    req.sampling.seed = sp.seed + i;
    req.max_tokens = max_tokens;
    const GenerateResult ref = generate(model, alone_cache, req, [](const std::string&) { return true; });
    EXPECT_EQ(recs[i]->text, ref.text) << "prompt " << i << ": batched output differs from the prompt run alone";
    EXPECT_EQ(recs[i]->summary.tokens_out, (int)ref.tokens.size()) << "prompt " << i;
    EXPECT_STREQ(stop_reason_name(recs[i]->summary.reason), stop_reason_name(ref.reason)) << "prompt " << i;
    EXPECT_EQ(recs[i]->summary.prompt_tokens, (int)req.prompt.size());
  }
  EXPECT_EQ(sched.stats().free_blocks, 256) << "finished jobs must return their blocks";
}

TEST_F(SchedulerTest, GreedyBatchedEqualsAlone) {
  SamplingParams sp;
  sp.temperature = 0;
  expect_same_as_alone(*model_, sp, 256);
}

TEST_F(SchedulerTest, GreedyBatchedEqualsAloneWithSmallPrefillChunks) {
  SamplingParams sp;
  sp.temperature = 0;
  expect_same_as_alone(*model_, sp, 3);  // prompts split over several steps, mixed with decode rows
}

TEST_F(SchedulerTest, SeededSamplingBatchedEqualsAlone) {
  SamplingParams sp;
  sp.temperature = 0.9f;
  sp.top_k = 40;
  sp.top_p = 0.95f;
  sp.presence_penalty = 0.5f;
  sp.frequency_penalty = 0.3f;
  sp.has_seed = true;
  sp.seed = 1234;
  expect_same_as_alone(*model_, sp, 256);
}

TEST_F(SchedulerTest, CancelFreesBlocksAndReportsCancelled) {
  KvCache cache(model_->device(), model_->config(), 64, 16);
  Scheduler sched(*model_, cache, {});
  JobRequest req;
  req.prompt = text_tokens(*model_, "Count from one to one thousand: one, two,");
  req.sampling.temperature = 0;
  req.max_tokens = 500;
  req.ignore_eos = true;
  auto rec = std::make_shared<Recorder>();
  std::shared_ptr<JobHandle> handle;
  ASSERT_EQ(sched.submit(req, rec, &handle), Scheduler::Submit::Accepted);
  while (rec->texts() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  handle->cancel();
  rec->wait();
  EXPECT_EQ(rec->summary.reason, StopReason::Cancelled);
  EXPECT_LT(rec->summary.tokens_out, 500);
  EXPECT_EQ(sched.stats().free_blocks, 64);
  EXPECT_EQ(sched.stats().running, 0);
}

TEST_F(SchedulerTest, LongPromptDoesNotStallOtherStreams) {
  KvCache cache(model_->device(), model_->config(), 256, 16);
  SchedulerOptions opt;
  opt.parallel = 2;
  opt.prefill_budget = 32;
  Scheduler sched(*model_, cache, opt);
  JobRequest a;
  a.prompt = text_tokens(*model_, "List the numbers:");
  a.sampling.temperature = 0;
  a.max_tokens = 400;
  a.ignore_eos = true;
  auto ra = std::make_shared<Recorder>();
  ASSERT_EQ(sched.submit(a, ra, nullptr), Scheduler::Submit::Accepted);
  while (ra->texts() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  std::string long_text;
  for (int i = 0; i < 60; ++i) long_text += "The bees fly from flower to flower. ";
  JobRequest b;
  b.prompt = text_tokens(*model_, long_text);
  ASSERT_GT(b.prompt.size(), 320u);
  b.sampling.temperature = 0;
  b.max_tokens = 2;
  auto rb = std::make_shared<Recorder>();
  int a_tokens_at_b_start = -1, a_tokens_at_b_first = -1;
  rb->on_text_hook = [&] {
    if (a_tokens_at_b_first < 0) a_tokens_at_b_first = ra->texts();
  };
  a_tokens_at_b_start = ra->texts();
  ASSERT_EQ(sched.submit(b, rb, nullptr), Scheduler::Submit::Accepted);
  rb->wait();
  // B's prompt needs >= 10 steps of 32 tokens; A decodes one token in each of them.
  const int prefill_steps = (int)(b.prompt.size() / 32);
  EXPECT_GE(a_tokens_at_b_first - a_tokens_at_b_start, prefill_steps - 1)
      << "stream A got " << (a_tokens_at_b_first - a_tokens_at_b_start) << " tokens while B's " << b.prompt.size()
      << "-token prompt was processed";
  sched.drain(std::chrono::milliseconds(0));
  ra->wait();
  EXPECT_EQ(ra->summary.reason, StopReason::Cancelled);
}

TEST_F(SchedulerTest, BoundedQueueAndDrain) {
  KvCache cache(model_->device(), model_->config(), 64, 16);
  SchedulerOptions opt;
  opt.parallel = 1;
  opt.max_queue = 1;
  Scheduler sched(*model_, cache, opt);
  JobRequest req;
  req.prompt = text_tokens(*model_, "Hello");
  req.sampling.temperature = 0;
  req.max_tokens = 300;
  req.ignore_eos = true;
  auto r1 = std::make_shared<Recorder>(), r2 = std::make_shared<Recorder>(), r3 = std::make_shared<Recorder>();
  ASSERT_EQ(sched.submit(req, r1, nullptr), Scheduler::Submit::Accepted);
  while (!r1->started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::shared_ptr<JobHandle> h2;
  ASSERT_EQ(sched.submit(req, r2, &h2), Scheduler::Submit::Accepted);
  EXPECT_EQ(sched.submit(req, r3, nullptr), Scheduler::Submit::QueueFull);
  // A cancelled job still waiting in the queue no longer takes the place of a new one.
  h2->cancel();
  auto r4 = std::make_shared<Recorder>();
  std::shared_ptr<JobHandle> h4;
  ASSERT_EQ(sched.submit(req, r4, &h4), Scheduler::Submit::Accepted);
  sched.drain(std::chrono::milliseconds(0));
  r1->wait();
  r2->wait();
  EXPECT_EQ(r2->summary.reason, StopReason::Cancelled);
  EXPECT_FALSE(r2->started) << "a queued job is cancelled by drain, never started";
  r4->wait();
  EXPECT_EQ(r4->summary.reason, StopReason::Cancelled);
  EXPECT_FALSE(r3->done) << "a refused job never hears from the scheduler";
  EXPECT_EQ(sched.submit(req, r3, nullptr), Scheduler::Submit::Stopped);
}

// SIGTERM's drain: jobs still queued were accepted (their clients hold a 200), so they run while the grace period
// lasts instead of being cancelled (issue 13).
TEST_F(SchedulerTest, DrainRunsQueuedJobsWithinGrace) {
  KvCache cache(model_->device(), model_->config(), 64, 16);
  SchedulerOptions opt;
  opt.parallel = 1;
  opt.max_queue = 4;
  Scheduler sched(*model_, cache, opt);
  JobRequest req;
  req.prompt = text_tokens(*model_, "Hello");
  req.sampling.temperature = 0;
  req.max_tokens = 6;
  req.ignore_eos = true;
  std::vector<std::shared_ptr<Recorder>> recs;
  for (int i = 0; i < 3; ++i) {
    recs.push_back(std::make_shared<Recorder>());
    ASSERT_EQ(sched.submit(req, recs.back(), nullptr), Scheduler::Submit::Accepted);
  }
  sched.drain(std::chrono::seconds(300));
  for (auto& r : recs) {
    r->wait();
    EXPECT_TRUE(r->started);
    EXPECT_EQ(r->summary.reason, StopReason::MaxTokens);
    EXPECT_EQ(r->summary.tokens_out, 6);
  }
  EXPECT_EQ(sched.submit(req, std::make_shared<Recorder>(), nullptr), Scheduler::Submit::Stopped);
}

TEST_F(SchedulerTest, RefusesWhatCannotFit) {
  KvCache cache(model_->device(), model_->config(), 4, 16);  // 64 positions
  Scheduler sched(*model_, cache, {});
  JobRequest req;
  req.prompt = text_tokens(*model_, "Hello there");
  req.max_tokens = 64;
  auto rec = std::make_shared<Recorder>();
  try {
    sched.submit(req, rec, nullptr);
    FAIL() << "expected max_tokens to be refused";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("max_tokens"), std::string::npos) << e.message();
  }
  req.max_tokens = 4;
  req.prompt.push_back(1 << 30);
  EXPECT_THROW(sched.submit(req, rec, nullptr), Error);
  req.prompt.clear();
  EXPECT_THROW(sched.submit(req, rec, nullptr), Error);
}

}  // namespace
}  // namespace rbee::llm
