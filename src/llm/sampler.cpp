#include "rbee/llm/sampler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "rbee/core/error.h"

namespace rbee::llm {

void validate(const SamplingParams& p, int32_t vocab_size) {
  RBEE_CHECK(std::isfinite(p.temperature) && p.temperature >= 0, "temperature must be >= 0, got {}", p.temperature);
  RBEE_CHECK(p.top_k >= 0, "top_k must be >= 0, got {}", p.top_k);
  RBEE_CHECK(p.top_p > 0 && p.top_p <= 1, "top_p must be in (0, 1], got {}", p.top_p);
  RBEE_CHECK(p.min_p >= 0 && p.min_p <= 1, "min_p must be in [0, 1], got {}", p.min_p);
  RBEE_CHECK(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0,
             "repetition_penalty must be > 0, got {}", p.repetition_penalty);
  RBEE_CHECK(p.presence_penalty >= -2 && p.presence_penalty <= 2, "presence_penalty must be in [-2, 2], got {}",
             p.presence_penalty);
  RBEE_CHECK(p.frequency_penalty >= -2 && p.frequency_penalty <= 2, "frequency_penalty must be in [-2, 2], got {}",
             p.frequency_penalty);
  for (const auto& [id, bias] : p.logit_bias) {
    RBEE_CHECK(id >= 0 && id < vocab_size, "logit_bias names token {} outside the vocabulary [0, {})", id,
               vocab_size);
    RBEE_CHECK(!std::isnan(bias), "logit_bias for token {} is NaN", id);
  }
}

Sampler::Sampler(SamplingParams params) : params_(std::move(params)) {
  const uint64_t seed =
      params_.has_seed ? params_.seed : (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count();
  rng_.seed(seed);
}

TokenLogprob token_logprob(std::span<const float> logits, TokenId token, int top_n) {
  const int32_t n = (int32_t)logits.size();
  RBEE_CHECK(token >= 0 && token < n, "token_logprob: token {} outside [0, {})", token, n);
  RBEE_CHECK(top_n >= 0 && top_n <= 1000, "token_logprob: top_n must be in [0, 1000], got {}", top_n);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float max_logit = kNegInf;
  for (float l : logits) {
    if (!std::isnan(l)) max_logit = std::max(max_logit, l);
  }
  TokenLogprob out;
  out.id = token;
  if (max_logit == kNegInf) {  // nothing left: every log-probability is -inf
    out.logprob = kNegInf;
    return out;
  }
  double total = 0;
  for (float l : logits) {
    if (l != kNegInf && !std::isnan(l)) total += std::exp((double)l - (double)max_logit);
  }
  const double log_total = std::log(total) + (double)max_logit;
  auto logprob = [&](float l) { return l == kNegInf || std::isnan(l) ? kNegInf : (float)((double)l - log_total); };
  out.logprob = logprob(logits[(size_t)token]);
  if (top_n > 0) {
    // The top_n largest logits, ties to the lower id: a bounded selection over one pass.
    std::vector<std::pair<float, TokenId>> best;
    best.reserve((size_t)top_n + 1);
    auto before = [](const std::pair<float, TokenId>& a, const std::pair<float, TokenId>& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    for (int32_t i = 0; i < n; ++i) {
      const float l = logits[(size_t)i];
      if (l == kNegInf || std::isnan(l)) continue;
      if ((int)best.size() == top_n && !before({l, i}, best.back())) continue;
      best.insert(std::upper_bound(best.begin(), best.end(), std::make_pair(l, i), before), {l, i});
      if ((int)best.size() > top_n) best.pop_back();
    }
    for (const auto& [l, id] : best) out.top.emplace_back(id, logprob(l));
  }
  return out;
}

TokenId Sampler::sample(std::span<const float> logits, std::span<const TokenId> prompt,
                        std::span<const TokenId> generated) {
  return sample(logits, prompt, generated, SampleStep{});
}

TokenId Sampler::sample(std::span<const float> logits, std::span<const TokenId> prompt,
                        std::span<const TokenId> generated, const SampleStep& step) {
  const int32_t n = (int32_t)logits.size();
  RBEE_CHECK(n > 0, "sample: empty logits");
  RBEE_CHECK(step.top_logprobs <= 20, "sample: top_logprobs must be <= 20, got {}", step.top_logprobs);
  const TokenId t = draw(logits, prompt, generated, step);
  if (step.top_logprobs >= 0 && step.logprobs) *step.logprobs = token_logprob(work_, t, step.top_logprobs);
  return t;
}

TokenId Sampler::draw(std::span<const float> logits, std::span<const TokenId> prompt,
                      std::span<const TokenId> generated, const SampleStep& step) {
  const int32_t n = (int32_t)logits.size();
  work_.assign(logits.begin(), logits.end());
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (step.allowed) {
    const std::vector<uint64_t>& mask = *step.allowed;
    RBEE_CHECK(mask.size() * 64 >= (size_t)n, "sample: the token mask covers {} tokens, the logits {}",
               mask.size() * 64, n);
    // Word by word: all-allowed words (most of them inside a string) cost one compare, all-refused ones (most of
    // them between JSON values) one fill.
    for (int32_t w = 0; w * 64 < n; ++w) {
      const uint64_t bits = mask[(size_t)w];
      if (bits == ~0ull) continue;
      const int32_t end = std::min(n, (w + 1) * 64);
      if (bits == 0) {
        std::fill(work_.begin() + w * 64, work_.begin() + end, kNegInf);
        continue;
      }
      for (int32_t i = w * 64; i < end; ++i) {
        if (!((bits >> (i & 63)) & 1)) work_[(size_t)i] = kNegInf;
      }
    }
  }
  for (TokenId id : step.banned) {
    if (id >= 0 && id < n) work_[(size_t)id] = kNegInf;
  }
  for (const auto& [id, bias] : params_.logit_bias) {
    if (id >= 0 && id < n) work_[id] += bias;
  }
  // Repetition penalty (CTRL-style, as llama.cpp and HF apply it): divide positive logits, multiply negative.
  if (params_.repetition_penalty != 1.0f) {
    std::unordered_set<TokenId> seen(prompt.begin(), prompt.end());
    seen.insert(generated.begin(), generated.end());
    for (TokenId id : seen) {
      if (id < 0 || id >= n) continue;
      float& l = work_[id];
      l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    }
  }
  if (params_.presence_penalty != 0 || params_.frequency_penalty != 0) {
    std::unordered_map<TokenId, int> counts;
    for (TokenId id : generated) counts[id]++;
    for (const auto& [id, c] : counts) {
      if (id < 0 || id >= n) continue;
      work_[id] -= params_.presence_penalty + params_.frequency_penalty * (float)c;
    }
  }
  // Greedy: highest adjusted logit, lowest id on ties.
  if (params_.temperature == 0.0f) {
    const auto best = std::max_element(work_.begin(), work_.end());
    RBEE_CHECK(*best != kNegInf, "sample: every token is banned (logit_bias, the grammar or min_tokens)");
    return (TokenId)(best - work_.begin());
  }
  candidates_.clear();
  candidates_.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    if (work_[i] != kNegInf && !std::isnan(work_[i])) {
      candidates_.emplace_back(work_[i] / params_.temperature, i);
    }
  }
  RBEE_CHECK(!candidates_.empty(), "sample: every token is banned (logit_bias, the grammar or min_tokens)");
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t keep = candidates_.size();
  if (params_.top_k > 0 && (size_t)params_.top_k < keep) {
    keep = (size_t)params_.top_k;
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), by_logit);
    candidates_.resize(keep);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  // Softmax over the survivors (sorted descending).
  const float max_logit = candidates_.front().first;
  double total = 0;
  for (auto& c : candidates_) {
    c.first = std::exp(c.first - max_logit);
    total += c.first;
  }
  for (auto& c : candidates_) c.first = (float)(c.first / total);
  // Top-p: the smallest prefix whose mass reaches top_p.
  if (params_.top_p < 1.0f) {
    double cum = 0;
    size_t cut = candidates_.size();
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cum += candidates_[i].first;
      if (cum >= params_.top_p) {
        cut = i + 1;
        break;
      }
    }
    candidates_.resize(cut);
  }
  // Min-p: relative to the most likely token.
  if (params_.min_p > 0.0f) {
    const float threshold = params_.min_p * candidates_.front().first;
    size_t cut = 1;
    while (cut < candidates_.size() && candidates_[cut].first >= threshold) ++cut;
    candidates_.resize(cut);
  }
  double mass = 0;
  for (const auto& c : candidates_) mass += c.first;
  std::uniform_real_distribution<double> uniform(0.0, mass);
  const double r = uniform(rng_);
  double cum = 0;
  for (const auto& c : candidates_) {
    cum += c.first;
    if (r < cum) return c.second;
  }
  return candidates_.back().second;
}

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopMatcher::feed(const std::string& text) {
  if (stopped_) return {};
  pending_ += text;
  // A completed stop sequence: emit what precedes the earliest one.
  size_t first = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = pending_.find(s);
    if (at != std::string::npos && (first == std::string::npos || at < first)) {
      first = at;
      matched_ = s;
    }
  }
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix that is a prefix of some stop sequence.
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t len = std::min(s.size() - 1, pending_.size()); len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(pending_);
  return stopped_ ? std::string() : out;
}

}  // namespace rbee::llm
