// Model-level batch invariance (docs/DESIGN.md, "Batch invariance"): greedy generation of tiny random-weight models
// through the scheduler on each backend. The reference runs every prompt alone (one running sequence, no prefix
// cache, no speculation); against it:
//   - batch of 4: all prompts at once (decode rows of several sequences in one step, prompt chunks beside them),
//     no prefix cache;
//   - prefix cache: the same, with the prefix cache (the prompts share a long prefix: later jobs take its blocks
//     from the cache and compute only their tails, in chunks over the cached prefix);
//   - speculative k = 4 and k = 8: prompt-lookup drafts verified in one forward (verify rows of one sequence in a
//     launch, beside the other sequences' rows).
// Each generated token's id and log-probability (a function of all the logits' bits: any difference of a logit
// shows) are compared. With RBEE_BATCH_INVARIANT=1 they must be identical on every backend; the CPU backend is
// invariant by construction, so it must match with the switch off too. A GPU with the switch off may differ (its
// kernels change with the number of rows of a launch): the differences are printed, not asserted.
// Models: tiny-llama (head size 32: the scalar paged attention kernel on GPUs) in Q4_0 and F16 weights (MMQ / the
// 16-bit GEMM for larger launches), tiny-gemma3 (head size 64: the tensor-core attention kernels; sliding windows
// of 16 on its local layers) in Q8_0.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/harness.h"
#include "common/random_models.h"
#include "common/scoped_env.h"
#include "common/text_sink.h"
#include "rbee/llm/kv_cache.h"
#include "rbee/llm/model.h"
#include "rbee/llm/scheduler.h"

namespace rbee::test {
namespace {

using llm::TokenId;

struct ModelSpec {
  std::string preset;
  DType type;
};
const ModelSpec kModels[] = {{"tiny-llama", DType::Q4_0}, {"tiny-llama", DType::F16}, {"tiny-gemma3", DType::Q8_0}};

const std::string& model_path(const ModelSpec& m) { return random_model_file(m.preset, m.type, 4321); }

// Collects the generated tokens' ids and log-probabilities.
class TokenSink : public llm::TextSink {
 public:
  void on_logprobs(int, const llm::TokenLogprob& lp) override {
    ids.push_back(lp.id);
    logprobs.push_back(lp.logprob);
  }
  std::vector<TokenId> ids;
  std::vector<float> logprobs;
};

constexpr int kJobs = 4, kMaxTokens = 12, kBlock = 4;

// Prompts that share a 25-token prefix (repetitive, so prompt lookup finds drafts) and end in tails of their own.
std::vector<std::vector<TokenId>> prompts(int vocab) {
  std::vector<TokenId> prefix;
  for (int i = 0; i < 25; ++i) prefix.push_back((TokenId)(3 + (i % 7) * 37 % (vocab - 3)));
  std::vector<std::vector<TokenId>> out;
  for (int j = 0; j < kJobs; ++j) {
    auto p = prefix;
    for (int t = 0; t < 3 + j; ++t) p.push_back((TokenId)(3 + (101 * j + 17 * t) % (vocab - 3)));
    out.push_back(p);
  }
  return out;
}

struct RunResult {
  std::vector<std::shared_ptr<TokenSink>> sinks;
  llm::SchedulerStats stats;
};

// Runs the prompts through a scheduler; parallel 1 runs them one after another (each alone in its steps).
RunResult run(llm::Model& model, int parallel, bool prefix_cache, int spec_tokens) {
  const auto ps = prompts(model.config().vocab_size);
  llm::KvCache cache(model.kv_layout(), 128, kBlock);
  llm::SchedulerOptions so;
  so.parallel = parallel;
  // Prompts in chunks of 16 (later chunks run over cached positions, beside decode rows); launches of 16 rows and
  // more take MMQ / the GEMM on GPUs with the switch off.
  so.prefill_budget = 16;
  so.prefix_cache = prefix_cache;
  if (spec_tokens > 0) {
    so.speculative.method = llm::SpeculativeOptions::Method::PromptLookup;
    so.speculative.tokens = spec_tokens;
    so.speculative.ngram_min = 1;
  }
  RunResult r;
  {
    llm::Scheduler scheduler(model, cache, so);
    for (int j = 0; j < kJobs; ++j) {
      llm::JobRequest req;
      req.id = std::to_string(j);
      req.prompt = ps[(size_t)j];
      req.max_tokens = kMaxTokens;
      req.sampling.temperature = 0;
      req.ignore_eos = true;
      req.top_logprobs = 0;
      r.sinks.push_back(std::make_shared<TokenSink>());
      EXPECT_EQ(scheduler.submit(std::move(req), r.sinks.back(), nullptr), llm::Scheduler::Submit::Accepted);
    }
    for (auto& s : r.sinks) s->wait();
    r.stats = scheduler.stats();
  }
  return r;
}

// Compares `got` with the reference; returns (differing tokens, differing log-probabilities) over all jobs.
std::pair<int, int> differences(const RunResult& want, const RunResult& got) {
  int tokens = 0, logprobs = 0;
  for (int j = 0; j < kJobs; ++j) {
    const auto& a = *want.sinks[(size_t)j];
    const auto& b = *got.sinks[(size_t)j];
    EXPECT_EQ(b.summary.tokens_out, kMaxTokens) << "job " << j;
    const size_t n = std::min(a.ids.size(), b.ids.size());
    tokens += (int)(std::max(a.ids.size(), b.ids.size()) - n);
    for (size_t i = 0; i < n; ++i) {
      if (a.ids[i] != b.ids[i]) {
        tokens += (int)(n - i);  // the continuations differ from here on
        break;
      }
      if (std::memcmp(&a.logprobs[i], &b.logprobs[i], sizeof(float)) != 0) ++logprobs;
    }
  }
  return {tokens, logprobs};
}

using ModelParam = std::tuple<std::string, int>;
class BatchInvariantModel : public ::testing::TestWithParam<ModelParam> {};

void check_model(Device& device, const ModelSpec& spec, bool on) {
  const ScopedInvariant mode(on);
  llm::LoadOptions lo;
  lo.device = &device;
  auto model = llm::Model::load(model_path(spec), lo);
  const RunResult alone = run(*model, 1, false, 0);
  struct Variant {
    const char* name;
    int parallel;
    bool prefix_cache;
    int spec;
  };
  const Variant variants[] = {{"batch of 4", kJobs, false, 0},
                              {"batch of 4 with the prefix cache", kJobs, true, 0},
                              {"speculative k=4 (prompt lookup), prefix cache", kJobs, true, 4},
                              {"speculative k=8 (prompt lookup), one sequence at a time", 1, false, 8}};
  const bool must_match = on || device.host_accessible();  // the CPU is invariant by construction
  for (const auto& v : variants) {
    const RunResult got = run(*model, v.parallel, v.prefix_cache, v.spec);
    const auto [tokens, logprobs] = differences(alone, got);
    fmt::print("[batch-invariance] {} {} on {} (mode {}): {} vs alone: {} of {} tokens and {} log-probabilities "
               "differ (batch rows up to {}, prefix-cache hits {} tokens, drafts {} accepted {})\n",
               spec.preset, dtype_name(spec.type), device.id(), on ? "on" : "off", v.name, tokens, kJobs * kMaxTokens,
               logprobs, got.stats.max_batch_rows, got.stats.prefix_hit_tokens, got.stats.spec_drafted_tokens,
               got.stats.spec_accepted_tokens);
    // The variants really exercise what they name.
    if (v.parallel > 1) {
      EXPECT_GE(got.stats.max_batch_rows, 2) << v.name;
    }
    if (v.prefix_cache) {
      EXPECT_GT(got.stats.prefix_hit_tokens, 0u) << v.name;
    }
    if (v.spec > 0) {
      EXPECT_GT(got.stats.spec_drafted_tokens, 0u) << v.name;
    }
    if (must_match) {
      EXPECT_EQ(tokens, 0) << v.name << ": greedy tokens differ from each prompt run alone";
      EXPECT_EQ(logprobs, 0) << v.name << ": log-probabilities differ from each prompt run alone";
    }
  }
}

TEST_P(BatchInvariantModel, GreedyOutputsEqualAloneWithModeOn) {
  const auto& [backend, index] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  check_model(*device, kModels[index], true);
}

TEST_P(BatchInvariantModel, GreedyOutputsWithModeOffAreReported) {
  const auto& [backend, index] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  check_model(*device, kModels[index], false);
}

INSTANTIATE_TEST_SUITE_P(Llm, BatchInvariantModel,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::Range(0, (int)(sizeof(kModels) / sizeof(kModels[0])))),
                         [](const auto& info) {
                           const ModelSpec& m = kModels[std::get<1>(info.param)];
                           std::string name = std::get<0>(info.param) + "_" + m.preset + "_" +
                                              std::string(dtype_name(m.type));
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace rbee::test
