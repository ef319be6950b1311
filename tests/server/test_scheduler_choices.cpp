// What the scheduler adds for the OpenAI API, on the default model: token log-probabilities against an
// independent double-precision log-softmax of the same logits, n choices sharing one prompt evaluation (and its
// KV blocks), min_tokens and stop_token_ids, prompt-only jobs, and pooled embeddings.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "common/default_model.h"
#include "common/text_sink.h"
#include "rbee/llm/prompt.h"
#include "rbee/llm/scheduler.h"

namespace rbee::llm {
namespace {

using Recorder = TextSink;  // tests/common/text_sink.h

class SchedulerChoices : public DefaultModelTest {};

std::vector<std::shared_ptr<Recorder>> run(Model& model, const JobRequest& req, int blocks = 128) {
  KvCache cache(model.device(), model.config(), blocks, 16);
  SchedulerOptions opt;
  opt.parallel = 8;
  Scheduler sched(model, cache, opt);
  std::vector<std::shared_ptr<Recorder>> recs;
  std::vector<std::shared_ptr<JobSink>> sinks;
  for (int i = 0; i < req.n; ++i) {
    recs.push_back(std::make_shared<Recorder>());
    sinks.push_back(recs.back());
  }
  EXPECT_EQ(sched.submit(req, sinks, nullptr), Scheduler::Submit::Accepted);
  for (auto& r : recs) r->wait();
  EXPECT_EQ(sched.stats().free_blocks, blocks) << "every block (shared ones included) must come back";
  return recs;
}

// log-softmax in double, straight from the definition.
std::vector<double> log_softmax(const std::vector<float>& row) {
  double m = -INFINITY;
  for (float v : row) m = std::max(m, (double)v);
  double s = 0;
  for (float v : row) s += std::exp((double)v - m);
  std::vector<double> out(row.size());
  for (size_t i = 0; i < row.size(); ++i) out[i] = (double)row[i] - m - std::log(s);
  return out;
}

std::vector<float> row_of(const Tensor& logits, int64_t r) { return logits.narrow(0, r, 1).to_vector<float>(); }

TEST_F(SchedulerChoices, LogprobsEqualLogSoftmaxOfTheLogits) {
  JobRequest req;
  req.prompt = text_tokens(*model_, "The three primary colors are");
  req.sampling.temperature = 0;
  req.max_tokens = 12;
  req.ignore_eos = true;
  req.top_logprobs = 5;
  req.prompt_logprobs = true;
  auto rec = run(*model_, req).at(0);
  ASSERT_EQ(rec->summary.tokens_out, 12);
  ASSERT_EQ(rec->logprobs.size(), 12u);
  ASSERT_EQ(rec->prompt_logprobs.size(), req.prompt.size());

  // The reference: the same forward passes (prompt with every row's logits, then one token at a time).
  KvCache cache(model_->device(), model_->config(), 32, 16);
  SequenceKv seq;
  ASSERT_TRUE(seq.reserve(cache, (int)req.prompt.size() + 12));
  ForwardBatch b;
  b.tokens = req.prompt;
  b.seqs.push_back({&seq, (int)req.prompt.size(), (int)req.prompt.size(), true});
  Tensor logits = model_->forward(b, cache);
  seq.length = (int)req.prompt.size();
  EXPECT_TRUE(std::isnan(rec->prompt_logprobs[0].logprob)) << "nothing predicts the first prompt token";
  for (size_t p = 1; p < req.prompt.size(); ++p) {
    const auto ref = log_softmax(row_of(logits, (int64_t)p - 1));
    EXPECT_EQ(rec->prompt_logprobs[p].id, req.prompt[p]);
    EXPECT_NEAR(rec->prompt_logprobs[p].logprob, ref[(size_t)req.prompt[p]], 1e-4) << "prompt token " << p;
  }
  std::vector<float> row = row_of(logits, (int64_t)req.prompt.size() - 1);
  for (int i = 0; i < 12; ++i) {
    const auto ref = log_softmax(row);
    const TokenLogprob& got = rec->logprobs[(size_t)i];
    const TokenId greedy = (TokenId)(std::max_element(ref.begin(), ref.end()) - ref.begin());
    EXPECT_EQ(got.id, greedy) << "token " << i;
    EXPECT_NEAR(got.logprob, ref[(size_t)got.id], 1e-4) << "token " << i;
    ASSERT_EQ(got.top.size(), 5u);
    std::vector<int> order(ref.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = (int)k;
    std::partial_sort(order.begin(), order.begin() + 5, order.end(), [&](int a, int c) { return ref[a] > ref[c]; });
    for (int k = 0; k < 5; ++k) {
      EXPECT_NEAR(got.top[(size_t)k].second, ref[(size_t)order[(size_t)k]], 1e-4) << "token " << i << " rank " << k;
      EXPECT_NEAR(got.top[(size_t)k].second, ref[(size_t)got.top[(size_t)k].first], 1e-4);
    }
    ForwardBatch d;
    d.tokens = {got.id};
    d.seqs.push_back({&seq, 1, seq.length + 1, false});
    row = row_of(model_->forward(d, cache), 0);
    seq.length += 1;
  }
  seq.release(cache);
}

TEST_F(SchedulerChoices, LogprobsFollowTheBiasedDistribution) {
  // logit_bias and penalties shape the distribution the logprobs report; temperature does not.
  JobRequest req;
  req.prompt = text_tokens(*model_, "The capital of France is");
  req.max_tokens = 1;
  req.top_logprobs = 3;
  req.sampling.temperature = 0;
  const auto plain = run(*model_, req).at(0)->logprobs.at(0);
  req.sampling.temperature = 1.7f;
  req.sampling.has_seed = true;
  const auto hot = run(*model_, req).at(0)->logprobs.at(0);
  ASSERT_EQ(hot.top.size(), 3u);
  EXPECT_EQ(hot.top[0].first, plain.top[0].first);
  EXPECT_FLOAT_EQ(hot.top[0].second, plain.top[0].second) << "temperature must not change the reported logprobs";
  req.sampling.temperature = 0;
  req.sampling.logit_bias[plain.top[0].first] = -INFINITY;
  const auto banned = run(*model_, req).at(0)->logprobs.at(0);
  EXPECT_EQ(banned.id, plain.top[1].first) << "the ban moves the greedy pick to the runner-up";
  EXPECT_GT(banned.logprob, plain.top[1].second) << "with the favourite banned the runner-up gains mass";
}

TEST_F(SchedulerChoices, LogprobsAndPenaltiesDoNotChangeSeededTokens) {
  // Rows without log-probabilities are sampled on the model's device (only ids come back), rows with them from
  // their logits on the host: the same seed must give the same tokens either way, with n choices, penalties
  // and min_tokens bans too.
  JobRequest req;
  req.prompt = text_tokens(*model_, "Bees make honey because");
  req.sampling.temperature = 1.1f;
  req.sampling.top_k = 50;
  req.sampling.top_p = 0.9f;
  req.sampling.presence_penalty = 0.5f;
  req.sampling.repetition_penalty = 1.2f;
  req.sampling.has_seed = true;
  req.sampling.seed = 4242;
  req.max_tokens = 20;
  req.min_tokens = 20;
  req.n = 3;
  const auto device_rows = run(*model_, req);
  req.top_logprobs = 1;
  const auto host_rows = run(*model_, req);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(device_rows[(size_t)i]->summary.tokens_out, 20);
    EXPECT_EQ(device_rows[(size_t)i]->text, host_rows[(size_t)i]->text) << "choice " << i;
    EXPECT_EQ(host_rows[(size_t)i]->logprobs.size(), 20u);
  }
}

TEST_F(SchedulerChoices, GreedyChoicesShareOnePromptEvaluation) {
  for (const char* text : {"Once upon a time, a small bee", "abc abc abc abc abc abc abc abc abc abc abc abc ab"}) {
    JobRequest req;
    req.prompt = text_tokens(*model_, text);
    req.sampling.temperature = 0;
    req.max_tokens = 16;
    req.ignore_eos = true;
    const auto one = run(*model_, req).at(0);
    req.n = 4;
    const auto four = run(*model_, req);
    int evaluated = 0;
    for (const auto& r : four) {
      EXPECT_EQ(r->text, one->text) << "prompt of " << req.prompt.size() << " tokens";
      EXPECT_EQ(r->summary.tokens_out, 16);
      evaluated += r->summary.prompt_tokens_evaluated;
    }
    EXPECT_EQ(evaluated, (int)req.prompt.size()) << "the prompt must be evaluated once for all four choices";
  }
}

TEST_F(SchedulerChoices, SeededChoicesDifferAndTheFirstMatchesNEqualsOne) {
  JobRequest req;
  req.prompt = text_tokens(*model_, "My favourite animal is");
  req.sampling.temperature = 1.0f;
  req.sampling.has_seed = true;
  req.sampling.seed = 77;
  req.max_tokens = 12;
  req.ignore_eos = true;
  const auto one = run(*model_, req).at(0);
  req.n = 3;
  const auto three = run(*model_, req);
  EXPECT_EQ(three[0]->text, one->text) << "choice 0 samples with the request's seed";
  EXPECT_TRUE(three[0]->text != three[1]->text || three[1]->text != three[2]->text) << "choices never differed";
  req.sampling.seed = 78;  // choice 1 of seed 77 samples with 78: the same as n = 1 with seed 78
  EXPECT_EQ(three[1]->text, run(*model_, [&] { auto r = req; r.n = 1; return r; }()).at(0)->text);
}

TEST_F(SchedulerChoices, RefusesMoreChoicesThanSlotsOrBlocks) {
  KvCache cache(model_->device(), model_->config(), 8, 16);
  SchedulerOptions opt;
  opt.parallel = 4;
  Scheduler sched(*model_, cache, opt);
  JobRequest req;
  req.prompt = text_tokens(*model_, "Hello");
  req.max_tokens = 40;
  req.n = 5;
  std::vector<std::shared_ptr<JobSink>> sinks;
  for (int i = 0; i < 5; ++i) sinks.push_back(std::make_shared<Recorder>());
  try {
    sched.submit(req, sinks, nullptr);
    FAIL() << "n beyond the slots must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.message().rfind("n:", 0), 0u) << e.message();
  }
  req.n = 4;  // 4 x (1 + 40) positions: 3 blocks each at least, 8 in the cache
  sinks.resize(4);
  try {
    sched.submit(req, sinks, nullptr);
    FAIL() << "n beyond the cache must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.message().rfind("n:", 0), 0u) << e.message();
  }
}

TEST_F(SchedulerChoices, StopTokenIdsAndMinTokens) {
  JobRequest req;
  req.prompt = text_tokens(*model_, "Count: one, two, three,");
  req.sampling.temperature = 0;
  req.max_tokens = 10;
  req.ignore_eos = true;
  req.top_logprobs = 0;
  const auto free_run = run(*model_, req).at(0);
  ASSERT_EQ(free_run->logprobs.size(), 10u);
  const TokenId third = free_run->logprobs[2].id;
  size_t first_at = 0;
  while (free_run->logprobs[first_at].id != third) ++first_at;
  req.stop_token_ids = {third};
  const auto stopped = run(*model_, req).at(0);
  EXPECT_EQ(stopped->summary.reason, StopReason::Eos);
  EXPECT_EQ(stopped->summary.tokens_out, (int)first_at + 1);
  EXPECT_EQ(stopped->logprobs.size(), first_at) << "the stop token itself is not reported";
  req.min_tokens = 6;
  const auto held = run(*model_, req).at(0);
  EXPECT_GE(held->summary.tokens_out, 6);
  for (size_t i = 0; i < held->logprobs.size() && i < 5; ++i) EXPECT_NE(held->logprobs[i].id, third);
}

TEST_F(SchedulerChoices, PromptOnlyJob) {
  JobRequest req;
  req.prompt = text_tokens(*model_, "Paris is the capital of France.");
  req.max_tokens = 0;
  req.prompt_logprobs = true;
  req.top_logprobs = 2;
  const auto rec = run(*model_, req).at(0);
  EXPECT_EQ(rec->summary.tokens_out, 0);
  EXPECT_EQ(rec->summary.reason, StopReason::MaxTokens);
  ASSERT_EQ(rec->prompt_logprobs.size(), req.prompt.size());
  EXPECT_EQ(rec->prompt_logprobs.back().top.size(), 2u);
  EXPECT_TRUE(rec->text.empty());
}

TEST_F(SchedulerChoices, EmbeddingsPoolTheHiddenStates) {
  const std::vector<TokenId> prompt = text_tokens(*model_, "Bees make honey from the nectar of flowers.");
  KvCache cache(model_->device(), model_->config(), 16, 16);
  SequenceKv seq;
  ASSERT_TRUE(seq.reserve(cache, (int)prompt.size()));
  ForwardBatch b;
  b.tokens = prompt;
  b.hidden_states = true;
  b.seqs.push_back({&seq, (int)prompt.size(), (int)prompt.size(), true});
  const Tensor hidden = model_->forward(b, cache);
  seq.release(cache);
  const int64_t h = hidden.dim(1);
  ASSERT_EQ(h, model_->config().hidden_size);
  const std::vector<float> all = hidden.to_vector<float>();
  for (Pooling pooling : {Pooling::Mean, Pooling::Last, Pooling::Cls}) {
    std::vector<double> ref((size_t)h, 0.0);
    for (size_t t = 0; t < prompt.size(); ++t) {
      const bool take = pooling == Pooling::Mean || (pooling == Pooling::Last && t + 1 == prompt.size()) ||
                        (pooling == Pooling::Cls && t == 0);
      if (!take) continue;
      for (int64_t d = 0; d < h; ++d) ref[(size_t)d] += all[t * (size_t)h + (size_t)d];
    }
    double norm = 0;
    for (double v : ref) norm += v * v;
    norm = std::sqrt(norm);
    JobRequest req;
    req.prompt = prompt;
    req.embed = true;
    req.pooling = pooling;
    KvCache c2(model_->device(), model_->config(), 16, 16);
    SchedulerOptions opt;
    opt.prefill_budget = 5;  // the prompt in several chunks
    Scheduler sched(*model_, c2, opt);
    auto rec = std::make_shared<Recorder>();
    ASSERT_EQ(sched.submit(req, rec, nullptr), Scheduler::Submit::Accepted);
    rec->wait();
    ASSERT_EQ((int64_t)rec->embedding.size(), h) << pooling_name(pooling);
    double got_norm = 0;
    for (int64_t d = 0; d < h; ++d) {
      EXPECT_NEAR(rec->embedding[(size_t)d], ref[(size_t)d] / norm, 2e-3) << pooling_name(pooling) << " dim " << d;
      got_norm += (double)rec->embedding[(size_t)d] * rec->embedding[(size_t)d];
    }
    EXPECT_NEAR(got_norm, 1.0, 1e-5);
    EXPECT_EQ(rec->summary.prompt_tokens_evaluated, (int)prompt.size());
    EXPECT_EQ(sched.stats().free_blocks, 16);
  }
}

}  // namespace
}  // namespace rbee::llm
