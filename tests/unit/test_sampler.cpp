// Sampler and stop-sequence matching, checked against hand-computed distributions and a naive reference.
#include <cmath>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "rbee/core/error.h"
#include "rbee/llm/sampler.h"

namespace rbee::llm {
namespace {

std::vector<float> logits_from_probs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back((float)std::log(x));
  return l;
}

// Empirical frequencies of `draws` samples.
std::map<TokenId, double> frequencies(Sampler& s, const std::vector<float>& logits, int draws) {
  std::map<TokenId, double> f;
  for (int i = 0; i < draws; ++i) f[s.sample(logits, {}, {})] += 1.0 / draws;
  return f;
}

TEST(Sampler, GreedyPicksTheLargestLogitLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  EXPECT_EQ(s.sample(std::vector<float>{0.1f, 2.0f, -1.0f, 2.0f}, {}, {}), 1);
}

TEST(Sampler, LogitBiasCanBanAndPromote) {
  SamplingParams p;
  p.temperature = 0;
  p.logit_bias[1] = -INFINITY;
  p.logit_bias[2] = 10.0f;
  Sampler s(p);
  EXPECT_EQ(s.sample(std::vector<float>{0.0f, 5.0f, 0.0f}, {}, {}), 2);
}

TEST(Sampler, PenaltiesFollowTheirDefinitions) {
  const std::vector<float> logits{2.0f, 1.9f, -1.0f};
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 1.1f;  // 2.0 / 1.1 = 1.818 < 1.9
  EXPECT_EQ(Sampler(p).sample(logits, std::vector<TokenId>{0}, {}), 1);
  p.repetition_penalty = 1.0f;
  p.frequency_penalty = 0.06f;  // token 0 seen twice: 2.0 - 0.12 = 1.88 < 1.9
  EXPECT_EQ(Sampler(p).sample(logits, {}, std::vector<TokenId>{0, 0}), 1);
  p.frequency_penalty = 0.0f;
  p.presence_penalty = 0.05f;  // once regardless of count: 1.95 > 1.9
  EXPECT_EQ(Sampler(p).sample(logits, {}, std::vector<TokenId>{0, 0}), 0);
}

TEST(Sampler, TopPKeepsTheSmallestPrefixAndRenormalizes) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.75f;  // 0.5 + 0.3 >= 0.75: keep tokens 0 and 1
  p.seed = 7;
  p.has_seed = true;
  Sampler s(p);
  const auto f = frequencies(s, logits_from_probs({0.5, 0.3, 0.15, 0.05}), 20000);
  EXPECT_EQ(f.count(2) + f.count(3), 0u);
  EXPECT_NEAR(f.at(0), 0.5 / 0.8, 0.015);
  EXPECT_NEAR(f.at(1), 0.3 / 0.8, 0.015);
}

TEST(Sampler, TemperatureAndTopKAndMinP) {
  SamplingParams p;
  p.seed = 3;
  p.has_seed = true;
  p.temperature = 0.5f;  // probabilities squared then renormalized
  {
    Sampler s(p);
    const auto f = frequencies(s, logits_from_probs({0.6, 0.3, 0.1}), 20000);
    const double z = 0.36 + 0.09 + 0.01;
    EXPECT_NEAR(f.at(0), 0.36 / z, 0.015);
    EXPECT_NEAR(f.at(1), 0.09 / z, 0.015);
  }
  p.temperature = 1.0f;
  p.top_k = 2;
  {
    Sampler s(p);
    const auto f = frequencies(s, logits_from_probs({0.1, 0.6, 0.3}), 5000);
    EXPECT_EQ(f.count(0), 0u);
  }
  p.top_k = 0;
  p.min_p = 0.4f;  // keep p >= 0.4 * 0.6 = 0.24
  {
    Sampler s(p);
    const auto f = frequencies(s, logits_from_probs({0.6, 0.3, 0.1}), 5000);
    EXPECT_EQ(f.count(2), 0u);
    EXPECT_NEAR(f.at(0), 0.6 / 0.9, 0.03);
  }
}

TEST(Sampler, SameSeedSameTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 1234;
  p.has_seed = true;
  const auto logits = logits_from_probs({0.2, 0.2, 0.2, 0.2, 0.2});
  Sampler a(p), b(p);
  std::vector<TokenId> ta, tb;
  for (int i = 0; i < 50; ++i) {
    ta.push_back(a.sample(logits, {}, {}));
    tb.push_back(b.sample(logits, {}, {}));
  }
  EXPECT_EQ(ta, tb);
  p.seed = 1235;
  Sampler c(p);
  std::vector<TokenId> tc;
  for (int i = 0; i < 50; ++i) tc.push_back(c.sample(logits, {}, {}));
  EXPECT_NE(ta, tc);
}

TEST(Sampler, MaskKeepsExactlyTheAllowedTokens) {
  // 300 tokens = 4 full mask words and a partial one: an all-allowed word (skipped as a whole), an all-refused
  // one, random ones, one with a single refused bit, and a last word whose bits past the vocabulary are set.
  const int32_t n = 300;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<float> logits((size_t)n);
  for (auto& l : logits) l = normal(rng);
  std::vector<uint64_t> mask = {~0ull, 0ull, ((uint64_t)rng() << 32) | rng(), ~0ull & ~(1ull << 17), ~0ull};
  auto allowed = [&](int32_t i) { return ((mask[(size_t)i >> 6] >> (i & 63)) & 1) != 0; };
  logits[64 + 3] = 50.f;       // refused: must never win
  logits[3 * 64 + 17] = 49.f;  // refused (the single cleared bit)
  // Reference: log-softmax over the allowed tokens in double precision, and its argmax.
  double mx = -INFINITY;
  for (int32_t i = 0; i < n; ++i) if (allowed(i)) mx = std::max(mx, (double)logits[(size_t)i]);
  double z = 0;
  for (int32_t i = 0; i < n; ++i) if (allowed(i)) z += std::exp((double)logits[(size_t)i] - mx);
  TokenId best = -1;
  for (int32_t i = 0; i < n; ++i) {
    if (allowed(i) && (best < 0 || logits[(size_t)i] > logits[(size_t)best])) best = i;
  }
  SamplingParams p;
  p.temperature = 0;
  TokenLogprob lp;
  SampleStep st;
  st.allowed = &mask;
  st.top_logprobs = 20;
  st.logprobs = &lp;
  EXPECT_EQ(Sampler(p).sample(logits, {}, {}, st), best);
  ASSERT_EQ(lp.top.size(), 20u);
  for (const auto& [id, logprob] : lp.top) {
    EXPECT_TRUE(allowed(id)) << "token " << id << " is masked but listed";
    EXPECT_NEAR(logprob, (double)logits[(size_t)id] - mx - std::log(z), 1e-4) << "token " << id;
  }
  p.temperature = 1.5f;
  p.has_seed = true;
  p.seed = 9;
  Sampler s(p);
  st = {};
  st.allowed = &mask;
  for (int i = 0; i < 2000; ++i) {
    const TokenId t = s.sample(logits, {}, {}, st);
    ASSERT_TRUE(t >= 0 && t < n && allowed(t)) << "drew masked token " << t;
  }
}

TEST(Sampler, ValidationNamesTheField) {
  SamplingParams p;
  p.top_p = 0;
  try {
    validate(p, 10);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("top_p"), std::string::npos);
  }
  p = {};
  p.temperature = -1;
  EXPECT_THROW(validate(p, 10), Error);
  p = {};
  p.logit_bias[10] = 1;
  EXPECT_THROW(validate(p, 10), Error);
}

TEST(StopMatcher, MatchesAcrossTokenBoundariesAndHoldsBackPrefixes) {
  StopMatcher m({"</s>", "\n\nUser:"});
  std::string out;
  out += m.feed("Hello <");
  EXPECT_EQ(out, "Hello ");  // "<" might start "</s>"
  out += m.feed("b>");       // not a stop after all
  EXPECT_EQ(out, "Hello <b>");
  out += m.feed(" done\n");
  out += m.feed("\nUse");
  EXPECT_FALSE(m.stopped());
  out += m.feed("r: more");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "\n\nUser:");
  EXPECT_EQ(out, "Hello <b> done");
  EXPECT_EQ(m.feed("ignored"), "");
}

TEST(StopMatcher, FlushReturnsHeldText) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.feed("abcST"), "abc");
  EXPECT_EQ(m.flush(), "ST");
}

}  // namespace
}  // namespace rbee::llm
