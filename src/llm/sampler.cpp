#include "rbee/llm/sampler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "backends/common/sampling.h"
#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/ops.h"

namespace rbee::llm {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
}  // namespace

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
  seed_ = params_.has_seed ? params_.seed : (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count();
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
  const int64_t n = (int64_t)logits.size();
  RBEE_CHECK(n > 0, "sample: empty logits");
  RBEE_CHECK(step.top_logprobs <= 20, "sample: top_logprobs must be <= 20, got {}", step.top_logprobs);
  const bool want_logprobs = step.top_logprobs >= 0 && step.logprobs != nullptr;
  SampleBatch batch;
  batch.add(*this, prompt, generated, step.banned);
  std::span<const float> row = logits;
  if (step.allowed || want_logprobs) {
    // The logits as the op would adjust them, on the host: the mask, then the bans, bias and penalties
    // (sampling::adjust, the op's own arithmetic); the op then sees them with nothing left to adjust.
    work_.assign(logits.begin(), logits.end());
    if (step.allowed) {
      const std::vector<uint64_t>& mask = *step.allowed;
      RBEE_CHECK(mask.size() * 64 >= (size_t)n, "sample: the token mask covers {} tokens, the logits {}",
                 mask.size() * 64, n);
      // Word by word: all-allowed words (most of them inside a string) cost one compare, all-refused ones (most
      // of them between JSON values) one fill.
      for (int64_t w = 0; w * 64 < n; ++w) {
        const uint64_t bits = mask[(size_t)w];
        if (bits == ~0ull) continue;
        const int64_t end = std::min(n, (w + 1) * 64);
        if (bits == 0) {
          std::fill(work_.begin() + w * 64, work_.begin() + end, -kInf);
          continue;
        }
        for (int64_t i = w * 64; i < end; ++i) {
          if (!((bits >> (i & 63)) & 1)) work_[(size_t)i] = -kInf;
        }
      }
    }
    batch.fold_adjustments(0, work_);
    row = work_;
  }
  // The op reads the floats in place (a view; nothing is written to them).
  const Tensor view =
      Tensor::wrap(const_cast<float*>(row.data()), {1, n}, DType::F32, Registry::global().cpu(), nullptr);
  const TokenId id = batch.run(view)[0];
  RBEE_CHECK(id >= 0, "sample: every token is banned (logit_bias, the grammar or min_tokens)");
  if (want_logprobs) *step.logprobs = token_logprob(row, id, step.top_logprobs);
  return id;
}

void SampleBatch::add(Sampler& sampler, std::span<const TokenId> prompt, std::span<const TokenId> generated,
                      std::span<const TokenId> banned) {
  const SamplingParams& sp = sampler.params_;
  Row row;
  row.params[sample_col::kTemperature] = sp.temperature;
  row.params[sample_col::kTopP] = sp.top_p;
  row.params[sample_col::kMinP] = sp.min_p;
  row.params[sample_col::kRepetition] = sp.repetition_penalty;
  row.params[sample_col::kPresence] = sp.presence_penalty;
  row.params[sample_col::kFrequency] = sp.frequency_penalty;
  row.control[sample_col::kTopK] = sp.top_k;
  row.control[sample_col::kSeed] = (int64_t)sampler.seed_;
  row.control[sample_col::kDraw] = (int64_t)sampler.draws_++;
  // Tokens with a bias or a penalty: count = occurrences in the output, 0 for the prompt's, -1 for bias only.
  std::unordered_map<TokenId, std::pair<int32_t, float>> listed;
  for (const auto& [id, bias] : sp.logit_bias) listed[id] = {-1, bias};
  // A banned token's logit is -inf whatever else applies to it (-inf stays -inf through every adjustment).
  for (TokenId id : banned) listed.try_emplace(id, -1, 0.0f).first->second.second = -kInf;
  if (sp.repetition_penalty != 1.0f) {
    for (TokenId id : prompt) {
      auto& e = listed.try_emplace(id, -1, 0.0f).first->second;
      e.first = std::max(e.first, 0);
    }
  }
  if (sp.repetition_penalty != 1.0f || sp.presence_penalty != 0.0f || sp.frequency_penalty != 0.0f) {
    for (TokenId id : generated) {
      auto& e = listed.try_emplace(id, -1, 0.0f).first->second;
      e.first = std::max(e.first, 0) + 1;
    }
  }
  row.tokens.reserve(listed.size());
  for (const auto& [id, e] : listed) row.tokens.push_back({id, e.first});
  std::sort(row.tokens.begin(), row.tokens.end());
  row.bias.reserve(row.tokens.size());
  for (const auto& [id, count] : row.tokens) row.bias.push_back(listed.at(id).second);
  rows_.push_back(std::move(row));
}

void SampleBatch::add_unused() {
  Row row;
  row.params[sample_col::kTopP] = 1.0f;
  row.params[sample_col::kRepetition] = 1.0f;  // temperature 0: greedy, no random number used
  rows_.push_back(std::move(row));
}

void SampleBatch::fold_adjustments(size_t i, std::span<float> logits) {
  Row& r = rows_.at(i);
  const int64_t n = (int64_t)logits.size();
  for (size_t j = 0; j < r.tokens.size(); ++j) {
    const auto [id, count] = r.tokens[j];
    if (id < 0 || id >= n) continue;  // out of the vocabulary: no logit to adjust (as in run())
    float& l = logits[(size_t)id];
    l = sampling::adjust(l, r.bias[j], count, r.params[sample_col::kRepetition], r.params[sample_col::kPresence],
                         r.params[sample_col::kFrequency]);
  }
  r.tokens.clear();
  r.bias.clear();
}

std::vector<TokenId> SampleBatch::run(const Tensor& logits) const {
  const int64_t b = (int64_t)rows_.size(), vocab = logits.dim(1);
  RBEE_CHECK(logits.rank() == 2 && logits.dim(0) == b, "sample: {} rows of logits for {} samplers",
             logits.rank() == 2 ? logits.dim(0) : 0, b);
  if (b == 0) return {};
  size_t h = 0;
  for (const Row& r : rows_) h = std::max(h, r.tokens.size());
  // One host buffer, one upload: params F32 [b, 6] | control I64 [b, 3] | tokens I32 [b, h, 2] | bias F32 [b, h].
  const size_t params_bytes = (size_t)b * kSampleParams * 4, control_bytes = (size_t)b * kSampleControls * 8;
  const size_t tokens_bytes = (size_t)b * h * 8, bias_bytes = (size_t)b * h * 4;
  const size_t control_at = (params_bytes + 7) / 8 * 8, tokens_at = control_at + control_bytes,
               bias_at = tokens_at + tokens_bytes, total = bias_at + bias_bytes;
  std::vector<uint8_t> host(total, 0);
  auto* params = reinterpret_cast<float*>(host.data());
  auto* control = reinterpret_cast<int64_t*>(host.data() + control_at);
  auto* tokens = reinterpret_cast<int32_t*>(host.data() + tokens_at);
  auto* bias = reinterpret_cast<float*>(host.data() + bias_at);
  for (int64_t i = 0; i < b; ++i) {
    const Row& r = rows_[(size_t)i];
    std::copy(r.params, r.params + kSampleParams, params + i * kSampleParams);
    std::copy(r.control, r.control + kSampleControls, control + i * kSampleControls);
    size_t used = 0;
    for (size_t j = 0; j < r.tokens.size(); ++j) {
      const auto [id, count] = r.tokens[j];
      if (id < 0 || id >= vocab) continue;  // out of the vocabulary: no logit to adjust
      tokens[((size_t)i * h + used) * 2] = id;
      tokens[((size_t)i * h + used) * 2 + 1] = count;
      bias[(size_t)i * h + used] = r.bias[j];
      ++used;
    }
    for (size_t j = used; j < h; ++j) tokens[((size_t)i * h + j) * 2] = -1;
  }
  Device& device = logits.device();
  const Tensor all = Tensor::from_host(host.data(), total, {(int64_t)total}, DType::U8, device);
  auto* base = static_cast<uint8_t*>(all.data());
  auto view = [&](size_t at, const Shape& shape, DType dtype) {
    return Tensor::wrap(base + at, shape, dtype, device, all.buffer());
  };
  const Tensor ids =
      ops::sample(logits, view(0, {b, kSampleParams}, DType::F32), view(control_at, {b, kSampleControls}, DType::I64),
                  view(tokens_at, {b, (int64_t)h, 2}, DType::I32), view(bias_at, {b, (int64_t)h}, DType::F32));
  const std::vector<int32_t> out = ids.to_vector<int32_t>();
  return std::vector<TokenId>(out.begin(), out.end());
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
