// Speculative decoding: cheap guesses of the next k tokens (drafts), checked by the model in one forward pass of
// k + 1 tokens per sequence, so that a decode step can emit up to k + 1 tokens.
//
// Drafts come from prompt lookup (n-gram matching against the sequence's own tokens: no second model) or from a
// draft model that shares the target's tokenizer (draft_model.h). Verification keeps the output exactly what
// plain decoding gives:
//  - greedy (temperature 0): a draft token is accepted while it equals the target's greedy pick at its position;
//    the first mismatch is replaced by that pick, so the tokens are those of non-speculative greedy decoding
//    (given the same logits: the verify pass computes each row as a decode step would on row-invariant kernels);
//  - sampling with a deterministic draft (prompt lookup: q puts all mass on the drafted token): the target's own
//    draw x ~ p at each position, accepted while x equals the draft. This is the standard rule below for a
//    one-hot q (accept with p(d) = min(1, p(d)/q(d)), on rejection draw from norm(max(0, p - q)) = p without d).
//  - sampling with a draft model: the standard rule (Leviathan et al. 2023, Chen et al. 2023), verify_sampled().
// Every emitted token is then distributed as the target's sampler would draw it given the tokens before it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "rbee/llm/tokenizer.h"

namespace rbee::llm {

struct SpeculativeOptions {
  enum class Method { Off, PromptLookup, DraftModel };
  Method method = Method::Off;
  int tokens = 4;      // k: draft tokens per step at most (1..16)
  int ngram_min = 2;   // prompt lookup: the shortest suffix that may match
  int ngram_max = 4;   // prompt lookup: the longest suffix tried first
};
const char* speculative_method_name(SpeculativeOptions::Method m);  // "off", "prompt-lookup", "draft-model"
// Throws InvalidArgument naming the field when tokens or the n-gram range is out of range.
void validate(const SpeculativeOptions& options);

// Prompt lookup: for n from ngram_max down to ngram_min, finds the most recent earlier occurrence of the last n
// tokens of `context` (prompt + generated so far, the last sampled token included) and returns up to k tokens
// that followed it. Empty when no suffix of at least ngram_min tokens occurred before.
std::vector<TokenId> prompt_lookup_draft(std::span<const TokenId> context, int k, int ngram_min, int ngram_max);

// The standard acceptance rule over full distributions (each a probability vector over the vocabulary, summing
// to 1): p has drafts.size() + 1 rows (row i: the target's distribution after the context and drafts[0, i)),
// q has drafts.size() rows (row i: the draft's distribution that drafts[i] was drawn from). For i = 0, 1, ...:
// accept drafts[i] with probability min(1, p_i(d) / q_i(d)); on the first rejection draw the token from
// norm(max(0, p_i - q_i)) and stop; when every draft is accepted draw one more from p_k. uniform() returns
// independent numbers in [0, 1). Result: `accepted` drafts, then `token` (the correction or the bonus token).
struct Verification {
  int accepted = 0;
  TokenId token = -1;
};
Verification verify_sampled(std::span<const std::vector<float>> p, std::span<const std::vector<float>> q,
                            std::span<const TokenId> drafts, const std::function<double()>& uniform);

// Draws from a probability vector by inverse CDF with u in [0, 1) (the last token with mass when rounding
// leaves u beyond the total).
TokenId draw_from(std::span<const float> probs, double u);

// Per-request speculation figures (reported in the job's metrics).
struct SpeculationStats {
  int drafted = 0;   // draft tokens proposed and verified
  int accepted = 0;  // of those, accepted
  int steps = 0;     // verify steps (forward passes with drafts)
};

}  // namespace rbee::llm
