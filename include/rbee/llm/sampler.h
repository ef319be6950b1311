// Sampler: turns one row of logits into the next token id.
//
// Order of operations (the order llama.cpp and vLLM apply them in): logit bias -> repetition, presence and
// frequency penalties over the tokens generated so far (and the prompt, for the repetition penalty) ->
// greedy pick if temperature == 0 -> temperature -> top-k -> softmax -> top-p -> min-p -> renormalize ->
// draw with the seeded generator. The same seed and the same logits give the same tokens.
// A step may also restrict the tokens (a grammar's mask, tokens banned for now) before the logit bias, and ask
// for log-probabilities (see SampleStep).
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

// The log-probability of one token and, when asked for, the most likely alternatives at that step.
struct TokenLogprob {
  TokenId id = -1;
  float logprob = 0.0f;
  std::vector<std::pair<TokenId, float>> top;  // most likely first (ties: lower id first)
};

// What one sample() call may add to the plain draw.
struct SampleStep {
  // Allowed tokens as a bitset over the vocabulary (bit i of word i / 64 set: token i may be drawn); null: all.
  const std::vector<uint64_t>* allowed = nullptr;
  // Tokens that may not be drawn at this step (min_tokens keeps EOS out this way).
  std::span<const TokenId> banned;
  // >= 0: fill `logprobs` with the drawn token's log-probability and this many alternatives (at most 20).
  // The distribution is log-softmax of the logits after the mask, the bans, logit_bias and the penalties, at
  // temperature 1 and before top-k/top-p/min-p: what the model gives the token in this request's context,
  // independent of temperature and truncation (as OpenAI reports logprobs).
  int top_logprobs = -1;
  TokenLogprob* logprobs = nullptr;
};

// log-softmax of `logits` for `token`, with the `top_n` most likely tokens (double-precision sums; -inf entries
// count as banned). Used for prompt log-probabilities, where no sampling happens.
TokenLogprob token_logprob(std::span<const float> logits, TokenId token, int top_n);

// Checks ranges (temperature >= 0, top_p in (0, 1], min_p in [0, 1], top_k >= 0, repetition_penalty > 0,
// penalties in [-2, 2], bias ids in [0, vocab)) and throws InvalidArgument naming the field.
void validate(const SamplingParams& params, int32_t vocab_size);

class Sampler {
 public:
  explicit Sampler(SamplingParams params);

  // Picks the next token from logits [vocab]. `prompt` and `generated` feed the penalties.
  TokenId sample(std::span<const float> logits, std::span<const TokenId> prompt,
                 std::span<const TokenId> generated);
  // The same with a step's mask, bans and log-probabilities. Throws InvalidArgument when no token is left.
  TokenId sample(std::span<const float> logits, std::span<const TokenId> prompt, std::span<const TokenId> generated,
                 const SampleStep& step);

  const SamplingParams& params() const { return params_; }

 private:
  TokenId draw(std::span<const float> logits, std::span<const TokenId> prompt, std::span<const TokenId> generated,
               const SampleStep& step);
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
