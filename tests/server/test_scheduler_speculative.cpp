// Speculative decoding in the scheduler on the default model (CPU): greedy outputs with prompt-lookup drafts and
// with a draft model (the model itself, and a re-quantized copy that disagrees now and then) are identical to
// plain decoding, token for token, in batches, with stop sequences and max_tokens honoured; drafts are really
// verified and accepted (per-job and scheduler counts); the prefix cache never publishes rejected drafts (a
// second, warm round still gives the same text); sampled jobs run to their end with drafts.
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>

#include <unistd.h>

#include "rbee/core/dtype.h"
#include "rbee/core/error.h"
#include "rbee/llm/model_files.h"
#include "common/default_model.h"
#include "common/text_sink.h"
#include "rbee/llm/prompt.h"
#include "rbee/llm/scheduler.h"

namespace rbee::llm {
namespace {

class SpeculativeScheduler : public DefaultModelTest {};

// Copy-heavy prompts: the answer repeats text of the prompt, so prompt lookup finds drafts.
const std::vector<std::string> kPrompts = {
    "Copy the list exactly.\nList: apples, pears, plums, cherries, grapes, lemons, limes, figs, dates.\n"
    "Copy: apples, pears,",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "The bee visits the flower. The bee visits the flower. The bee visits the",
    "Repeat after me: one two three four five six seven eight nine ten. Again: one two three",
};

struct SpecRun {
  std::vector<std::string> texts;
  std::vector<JobSummary> summaries;
  SchedulerStats stats;
};

SpecRun run(Model& model, const SchedulerOptions& opt, const SamplingParams& sp, int max_tokens,
        const std::vector<std::string>& stop = {}, KvCache* shared_cache = nullptr, int rounds = 1) {
  KvCache own(model.device(), model.config(), 256, 16);
  KvCache& cache = shared_cache ? *shared_cache : own;
  Scheduler sched(model, cache, opt);
  SpecRun out;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::shared_ptr<TextSink>> sinks;
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      JobRequest req;
      req.id = "s";
      req.id += std::to_string(i);
      req.prompt = text_tokens(model, kPrompts[i]);
      req.sampling = sp;
      req.sampling.seed = sp.seed + i;
      req.max_tokens = max_tokens;
      req.stop = stop;
      auto sink = std::make_shared<TextSink>();
      EXPECT_EQ(sched.submit(req, sink, nullptr), Scheduler::Submit::Accepted);
      sinks.push_back(sink);
    }
    for (auto& s : sinks) {
      s->wait();
      out.texts.push_back(s->text);
      out.summaries.push_back(s->summary);
    }
  }
  out.stats = sched.stats();
  return out;
}

SchedulerOptions options(SpeculativeOptions::Method m, int tokens = 4, DraftModel* draft = nullptr) {
  SchedulerOptions o;
  o.parallel = 4;
  o.speculative.method = m;
  o.speculative.tokens = tokens;
  o.speculative.ngram_min = 1;
  o.speculative.ngram_max = 3;
  o.draft = draft;
  return o;
}

void expect_identical(const SpecRun& spec, const SpecRun& plain, const std::string& what) {
  ASSERT_EQ(spec.texts.size(), plain.texts.size());
  for (size_t i = 0; i < spec.texts.size(); ++i) {
    EXPECT_EQ(spec.texts[i], plain.texts[i]) << what << ": prompt " << i % kPrompts.size();
    EXPECT_EQ(spec.summaries[i].tokens_out, plain.summaries[i].tokens_out) << what << ": prompt " << i;
    EXPECT_EQ(spec.summaries[i].reason, plain.summaries[i].reason) << what << ": prompt " << i;
  }
}

TEST_F(SpeculativeScheduler, GreedyPromptLookupIsIdenticalToPlainDecoding) {
  SamplingParams sp;
  sp.temperature = 0;
  const SpecRun plain = run(*model_, options(SpeculativeOptions::Method::Off), sp, 40);
  EXPECT_EQ(plain.stats.spec_drafted_tokens, 0u);
  for (int k : {1, 4, 8}) {
    const SpecRun spec = run(*model_, options(SpeculativeOptions::Method::PromptLookup, k), sp, 40);
    expect_identical(spec, plain, "prompt lookup k=" + std::to_string(k));
    EXPECT_GT(spec.stats.spec_drafted_tokens, 20u) << "k=" << k;
    EXPECT_GT(spec.stats.spec_accepted_tokens, 10u) << "k=" << k << ": copy-heavy prompts should accept drafts";
    EXPECT_LE(spec.stats.spec_accepted_tokens, spec.stats.spec_drafted_tokens);
    uint64_t drafted = 0, accepted = 0;
    for (const auto& s : spec.summaries) {
      drafted += (uint64_t)s.spec_drafted;
      accepted += (uint64_t)s.spec_accepted;
      EXPECT_LE(s.spec_accepted, s.spec_drafted);
    }
    EXPECT_EQ(drafted, spec.stats.spec_drafted_tokens) << "per-job counts add up to the scheduler's";
    EXPECT_EQ(accepted, spec.stats.spec_accepted_tokens);
    EXPECT_LT(spec.stats.steps, plain.stats.steps) << "k=" << k << ": accepted drafts should save decode steps";
    EXPECT_EQ(spec.stats.free_blocks, 256);
  }
}

TEST_F(SpeculativeScheduler, StopSequencesMaxTokensAndAWarmPrefixCacheStayExact) {
  SamplingParams sp;
  sp.temperature = 0;
  // A stop sequence inside a run of accepted drafts, and max_tokens that ends mid-draft.
  const SpecRun plain = run(*model_, options(SpeculativeOptions::Method::Off), sp, 23, {"cherries", "return a *"});
  const SpecRun spec = run(*model_, options(SpeculativeOptions::Method::PromptLookup, 6), sp, 23, {"cherries", "return a *"});
  expect_identical(spec, plain, "stops");
  for (const auto& s : spec.summaries) {
    EXPECT_LE(s.tokens_out, 23);
  }
  // Two rounds over one cache: round 2 takes round 1's published blocks; rejected drafts must never be among them.
  KvCache cache(model_->device(), model_->config(), 256, 16);
  const SpecRun warm = run(*model_, options(SpeculativeOptions::Method::PromptLookup, 6), sp, 40, {}, &cache, 2);
  const SpecRun cold = run(*model_, options(SpeculativeOptions::Method::Off), sp, 40);
  for (size_t i = 0; i < warm.texts.size(); ++i) {
    EXPECT_EQ(warm.texts[i], cold.texts[i % kPrompts.size()]) << "round " << i / kPrompts.size() << " prompt "
                                                              << i % kPrompts.size();
  }
  EXPECT_GT(warm.stats.prefix_hit_tokens, 0u);
}

TEST_F(SpeculativeScheduler, GreedyDraftModelIsIdenticalToPlainDecoding) {
  SamplingParams sp;
  sp.temperature = 0;
  const SpecRun plain = run(*model_, options(SpeculativeOptions::Method::Off), sp, 32);
  {
    // The model as its own draft (its own KV cache): every draft is the target's greedy pick. Catch-up passes of
    // at most 7 tokens: the four prompts (20-40 tokens, admitted together) are caught up over several passes, a
    // sequence's context split between passes.
    KvCache draft_cache(model_->device(), model_->config(), 256, 16);
    DraftModel draft(*model_, draft_cache, /*prefix_cache=*/true, /*max_step_tokens=*/7);
    const SpecRun spec = run(*model_, options(SpeculativeOptions::Method::DraftModel, 4, &draft), sp, 32);
    expect_identical(spec, plain, "self draft");
    EXPECT_GT(spec.stats.spec_drafted_tokens, 40u);
    EXPECT_GE(spec.stats.spec_accepted_tokens * 10, spec.stats.spec_drafted_tokens * 9)
        << "a draft equal to the model should be accepted (almost) always";
    EXPECT_EQ(draft_cache.free_blocks(), 256) << "the draft's blocks come back";
  }
  {
    // A re-quantized copy (Q4_0 from the Q4_1 weights): a different model with the same tokenizer.
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("rbee_test_draft_" + std::to_string(::getpid()) + ".gguf")).string();
    quantize_model(RBEE_DEFAULT_MODEL, path, DType::Q4_0);
    auto copy = Model::load(path);
    std::filesystem::remove(path);
    check_same_tokenizer(model_->tokenizer(), copy->tokenizer());
    KvCache draft_cache(copy->device(), copy->config(), 256, 16);
    DraftModel draft(*copy, draft_cache);
    const SpecRun spec = run(*model_, options(SpeculativeOptions::Method::DraftModel, 4, &draft), sp, 32);
    expect_identical(spec, plain, "re-quantized draft");
    EXPECT_GT(spec.stats.spec_accepted_tokens, 0u);
  }
}

TEST_F(SpeculativeScheduler, SampledJobsRunWithDraftsAndTokenizersAreChecked) {
  SamplingParams sp;
  sp.temperature = 0.7f;
  sp.top_p = 0.9f;
  sp.has_seed = true;
  sp.seed = 5;
  const SpecRun spec = run(*model_, options(SpeculativeOptions::Method::PromptLookup, 4), sp, 30);
  for (const auto& s : spec.summaries) {
    EXPECT_TRUE(s.reason == StopReason::MaxTokens || s.reason == StopReason::Eos) << s.error_message;
    EXPECT_LE(s.tokens_out, 30);
  }
  EXPECT_GT(spec.stats.spec_drafted_tokens, 0u);
  // A model with another vocabulary is refused as a draft, naming the difference.
  const std::string tiny = std::string(RBEE_SOURCE_DIR) + "/tests/data/tiny_models/llama";
  if (std::filesystem::exists(tiny)) {
    auto other = Model::load(tiny);
    try {
      check_same_tokenizer(model_->tokenizer(), other->tokenizer());
      ADD_FAILURE() << "a different tokenizer was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--draft"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace rbee::llm
