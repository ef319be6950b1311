// Sampler: turns one row of logits into the next token id.
//
// Order of operations (the order llama.cpp and vLLM apply them in): logit bias -> repetition, presence and
// frequency penalties over the tokens generated so far (and the prompt, for the repetition penalty) ->
// greedy pick if temperature == 0 -> temperature -> top-k -> softmax -> top-p -> min-p -> renormalize ->
// draw with the seeded generator. The same seed and the same logits give the same tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

#include "rbee/llm/tokenizer.h"

namespace rbee::llm {

struct SamplingParams {
  float temperature = 0.8f;       // 0 = greedy
  int top_k = 0;                  // 0 = off
  float top_p = 1.0f;             // 1 = off
  float min_p = 0.0f;             // 0 = off; keep tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f;  // 1 = off; > 1 discourages tokens already seen (prompt + output)
  float presence_penalty = 0.0f;    // subtracted once from tokens present in the output
  float frequency_penalty = 0.0f;   // subtracted per occurrence in the output
  std::unordered_map<TokenId, float> logit_bias;  // added to the logits (-inf bans a token)
  uint64_t seed = 0;
  bool has_seed = false;          // false: seeded from the clock
};

// Checks ranges (temperature >= 0, top_p in (0, 1], min_p in [0, 1], top_k >= 0, repetition_penalty > 0,
// penalties in [-2, 2], bias ids in [0, vocab)) and throws InvalidArgument naming the field.
void validate(const SamplingParams& params, int32_t vocab_size);

class Sampler {
 public:
  explicit Sampler(SamplingParams params);

  // Picks the next token from logits [vocab]. `prompt` and `generated` feed the penalties.
  TokenId sample(std::span<const float> logits, std::span<const TokenId> prompt,
                 std::span<const TokenId> generated);

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<float> work_;               // scratch: adjusted logits
  std::vector<std::pair<float, TokenId>> candidates_;
};

// Incremental stop-sequence matching on generated text. Text that could still turn into a stop sequence is
// held back; feed() returns the text that is safe to emit.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Appends `text`. Returns the emit-safe text; sets stopped() when a stop sequence completed (the stop
  // sequence itself and anything after it are never emitted).
  std::string feed(const std::string& text);
  // The held-back text, at the end of generation without a stop.
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace rbee::llm
