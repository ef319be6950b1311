// Sampler: turns one row of logits into the next token id, through the `sample` op (rbee/ops.h; its definition
// is in rbee/backend/op_table.def), so a row of logits on a GPU is sampled there and only the token id comes back.
//
// Order of operations (the order llama.cpp and vLLM apply them in): logit bias -> repetition, presence and
// frequency penalties over the tokens generated so far (and the prompt, for the repetition penalty) ->
// greedy pick if temperature == 0 -> temperature -> top-k -> softmax -> top-p -> min-p -> renormalize ->
// draw. Probabilities are 40-bit fixed-point weights (exp(c - c_max) * 2^40, tokens below 2^-40 of the top
// one are never drawn); draw number i of a sampler uses the i-th word of a counter-based random stream of its
// seed (backends/common/sampling.h). The same seed and the same logits give the same tokens on every backend.
// A step may also restrict the tokens (a grammar's mask, tokens banned for now) before the logit bias, and ask
// for log-probabilities (see SampleStep).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "rbee/backend/op_kinds.h"
#include "rbee/core/tensor.h"
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

  // Picks the next token from host logits [vocab] (the CPU's sample op). `prompt` and `generated` feed the
  // penalties. Throws InvalidArgument when no token is left (every one banned by logit_bias).
  TokenId sample(std::span<const float> logits, std::span<const TokenId> prompt,
                 std::span<const TokenId> generated);
  // The same with a step's mask, bans and log-probabilities. Throws InvalidArgument when no token is left.
  TokenId sample(std::span<const float> logits, std::span<const TokenId> prompt, std::span<const TokenId> generated,
                 const SampleStep& step);

  const SamplingParams& params() const { return params_; }
  uint64_t seed() const { return seed_; }
  // Tokens drawn so far (the next draw uses this index of the random stream).
  uint64_t draws() const { return draws_; }

 private:
  friend class SampleBatch;
  std::vector<float> work_;  // scratch: logits after the mask, the bans and the adjustments (host steps)
  SamplingParams params_;
  uint64_t seed_ = 0;
  uint64_t draws_ = 0;
};

// The rows of one run of the sample op: row i takes the next draw of the i-th sampler added, with the penalties
// of its prompt and output. Runs on the device the logits live on; only the ids cross to the host.
class SampleBatch {
 public:
  // A row drawn by `sampler` (advances its draw count); `banned` tokens may not be drawn at this step.
  void add(Sampler& sampler, std::span<const TokenId> prompt, std::span<const TokenId> generated,
           std::span<const TokenId> banned = {});
  // A row whose token is not used (a prompt chunk that is not the last): greedy, no penalties.
  void add_unused();
  size_t size() const { return rows_.size(); }

  // logits [size(), vocab] F32 on any device. Returns one id per row, -1 where no token is left.
  std::vector<TokenId> run(const Tensor& logits) const;

 private:
  friend class Sampler;
  // Applies row i's bias, bans and penalties to host `logits` [vocab] with the op's arithmetic and drops them
  // from the row (the op then adjusts nothing): for a step whose adjusted logits the host needs.
  void fold_adjustments(size_t i, std::span<float> logits);

  struct Row {
    float params[kSampleParams] = {};
    int64_t control[kSampleControls] = {};
    std::vector<std::pair<TokenId, int32_t>> tokens;  // (id, count), as the op's tokens rows
    std::vector<float> bias;
  };
  std::vector<Row> rows_;
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
