// Sampler and stop-sequence matching, checked against hand-computed distributions and a naive reference; the
// shared sampling arithmetic (backends/common/sampling.h) against the math library and its own contracts.
#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "backends/common/sampling.h"
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

TEST(Sampler, DrawIndexAdvancesPerToken) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 5;
  p.has_seed = true;
  Sampler s(p);
  EXPECT_EQ(s.seed(), 5u);
  const auto logits = logits_from_probs({0.25, 0.25, 0.25, 0.25});
  for (int i = 0; i < 3; ++i) s.sample(logits, {}, {});
  EXPECT_EQ(s.draws(), 3u);
  // Four equal weights of 2^40: draw i picks floor(4 * word_i / 2^64).
  const TokenId next = s.sample(logits, {}, {});
  EXPECT_EQ(next, (TokenId)(sampling::random_word(5, 3) >> 62));
}

TEST(Sampler, EveryTokenBannedIsAnError) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.logit_bias[0] = -INFINITY;
  p.logit_bias[1] = -INFINITY;
  Sampler s(p);
  EXPECT_THROW(s.sample(std::vector<float>{1.0f, 2.0f}, {}, {}), Error);
}

// A step's mask, bans and log-probabilities go through the host path (adjusted logits on the host, then the
// op with nothing left to adjust); the plain path lets the op adjust. Both must draw the same tokens from the
// same seed, and the reported log-probabilities must be those of an independent double-precision reference.
TEST(Sampler, StepsWithMaskOrLogprobsDrawWhatThePlainPathDraws) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.repetition_penalty = 1.3f;
  p.presence_penalty = 0.4f;
  p.frequency_penalty = 0.2f;
  p.logit_bias[3] = 2.5f;
  p.logit_bias[9] = -INFINITY;
  p.has_seed = true;
  p.seed = 2024;
  Sampler plain(p), stepped(p);
  const int vocab = 97;
  const std::vector<TokenId> prompt{1, 2, 3, 5, 8, 13};
  std::vector<TokenId> out_plain, out_stepped;
  std::vector<uint64_t> all_allowed((vocab + 63) / 64, ~0ull);
  uint64_t state = 7;
  for (int step = 0; step < 60; ++step) {
    std::vector<float> logits(vocab);
    for (auto& l : logits) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      l = (float)((double)(state >> 11) / 9007199254740992.0 * 8.0 - 4.0);
    }
    const TokenId banned = (TokenId)(step % vocab);
    SampleStep plain_step;
    plain_step.banned = std::span<const TokenId>(&banned, 1);
    const TokenId a = plain.sample(logits, prompt, out_plain, plain_step);
    TokenLogprob lp;
    SampleStep host_step;
    host_step.banned = plain_step.banned;
    host_step.allowed = &all_allowed;
    host_step.top_logprobs = 3;
    host_step.logprobs = &lp;
    const TokenId b = stepped.sample(logits, prompt, out_stepped, host_step);
    ASSERT_EQ(a, b) << "step " << step;
    EXPECT_NE(a, banned);
    EXPECT_NE(a, 9);
    // Reference: the adjusted logits in double precision (bias, repetition over prompt + output, presence and
    // frequency over the output, the ban), then log-softmax.
    std::vector<double> adj(logits.begin(), logits.end());
    for (const auto& [id, bias] : p.logit_bias) adj[(size_t)id] += bias;
    std::map<TokenId, int> count;
    for (TokenId t : out_plain) count[t]++;
    for (int id = 0; id < vocab; ++id) {
      const bool seen = count.count(id) || std::find(prompt.begin(), prompt.end(), id) != prompt.end();
      if (seen) adj[(size_t)id] = adj[(size_t)id] > 0 ? adj[(size_t)id] / 1.3 : adj[(size_t)id] * 1.3;
      if (count.count(id)) adj[(size_t)id] -= 0.4 + 0.2 * count[id];
    }
    adj[(size_t)banned] = -INFINITY;
    double top = -INFINITY, total = 0;
    for (double v : adj) top = std::max(top, v);
    for (double v : adj) total += std::exp(v - top);
    const double want = adj[(size_t)b] - top - std::log(total);
    EXPECT_EQ(lp.id, b);
    EXPECT_NEAR(lp.logprob, want, 1e-4) << "step " << step;
    ASSERT_EQ(lp.top.size(), 3u);
    EXPECT_GE(lp.top[0].second, lp.top[1].second);
    out_plain.push_back(a);
    out_stepped.push_back(b);
  }
  EXPECT_EQ(plain.draws(), stepped.draws());
}

TEST(Sampler, MaskKeepsOnlyAllowedTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.has_seed = true;
  p.seed = 3;
  Sampler s(p);
  const std::vector<float> logits{5.0f, 4.0f, 0.0f, -1.0f, 3.0f};
  std::vector<uint64_t> allowed{(1ull << 2) | (1ull << 3)};
  SampleStep step;
  step.allowed = &allowed;
  for (int i = 0; i < 50; ++i) {
    const TokenId t = s.sample(logits, {}, {}, step);
    EXPECT_TRUE(t == 2 || t == 3) << t;
  }
  allowed[0] = 0;
  EXPECT_THROW(s.sample(logits, {}, {}, step), Error);
}

// exp_nonpositive: within 2 ulps of the math library's expf over [-32, 0], exactly 1 at 0, 0 below -32.
TEST(SamplingArithmetic, ExpIsAccurate) {
  EXPECT_EQ(sampling::exp_nonpositive(0.0f), 1.0f);
  EXPECT_EQ(sampling::exp_nonpositive(-0.0f), 1.0f);
  EXPECT_EQ(sampling::exp_nonpositive(-32.5f), 0.0f);
  EXPECT_EQ(sampling::exp_nonpositive(-INFINITY), 0.0f);
  EXPECT_EQ(sampling::exp_nonpositive(NAN), 0.0f);
  double worst = 0;
  for (int i = 0; i <= 1000000; ++i) {
    const float x = -32.0f * (float)i / 1000000.0f;
    const double want = std::exp((double)x);
    const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
    worst = std::max(worst, std::fabs((double)sampling::exp_nonpositive(x) - want) / ulp);
  }
  EXPECT_LE(worst, 2.0);
}

TEST(SamplingArithmetic, WeightsKeysAndStream) {
  EXPECT_EQ(sampling::weight(3.5f, 3.5f), sampling::kWeightOne);
  EXPECT_EQ(sampling::weight(INFINITY, INFINITY), sampling::kWeightOne);
  EXPECT_EQ(sampling::weight(1.0f, INFINITY), 0u);
  EXPECT_NEAR((double)sampling::weight(2.0f, 3.0f) / (double)sampling::kWeightOne, std::exp(-1.0), 1e-7);
  EXPECT_EQ(sampling::weight(-40.0f, 0.0f), 0u);
  // Keys: value first (larger first), then the smaller id; -0 and +0 are one value.
  EXPECT_GT(sampling::order_key(1.0f, 7), sampling::order_key(0.5f, 1));
  EXPECT_GT(sampling::order_key(-1.0f, 7), sampling::order_key(-2.0f, 1));
  EXPECT_GT(sampling::order_key(0.0f, 1), sampling::order_key(-0.0f, 2));
  EXPECT_GT(sampling::order_key(-INFINITY, 0), 0u);
  EXPECT_EQ(sampling::key_id(sampling::order_key(-3.0f, 12345)), 12345);
  // The stream: different draws and seeds give different words; scale_to stays below its total.
  std::set<uint64_t> words;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    for (uint64_t d = 0; d < 256; ++d) words.insert(sampling::random_word(seed, d));
  }
  EXPECT_EQ(words.size(), 1024u);
  EXPECT_EQ(sampling::scale_to(~0ull, 10), 9u);
  EXPECT_EQ(sampling::scale_to(0, 10), 0u);
  // Uniform enough: the top bit of 10000 consecutive draws is set about half the time.
  int ones = 0;
  for (uint64_t d = 0; d < 10000; ++d) ones += (int)(sampling::random_word(77, d) >> 63);
  EXPECT_NEAR(ones / 10000.0, 0.5, 0.02);
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
