// Single-sequence generation: prompt processing in chunks, then token-by-token decoding with sampling, stop
// sequences and EOS handling, streaming text through a callback. The CLI uses this directly; the worker's
// scheduler runs the same steps for many sequences at once.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "rbee/llm/model.h"
#include "rbee/llm/sampler.h"

namespace rbee::llm {

enum class StopReason { MaxTokens, Eos, StopSequence, Cancelled, Error };
const char* stop_reason_name(StopReason reason);  // "MAX_TOKENS", "EOS", "STOP_SEQUENCE", "CANCELLED", "ERROR"

struct GenerateRequest {
  std::vector<TokenId> prompt;
  SamplingParams sampling;
  int max_tokens = 128;
  std::vector<std::string> stop;  // stop sequences, matched on the text
  bool ignore_eos = false;
  int prefill_chunk = 512;        // prompt tokens per forward pass
};

struct GenerateResult {
  std::vector<TokenId> tokens;    // generated ids (the stop sequence's tokens included)
  std::string text;               // emitted text (the stop sequence excluded)
  StopReason reason = StopReason::MaxTokens;
  int prompt_tokens = 0;
  double prompt_seconds = 0;      // prompt processing (all prefill forwards)
  double decode_seconds = 0;      // everything after the first generated token
  double time_to_first_token = 0; // seconds from start to the first token's text
};

// Streams text pieces (never half a UTF-8 character) to on_text; on_text returning false cancels.
// The KV cache must have room for prompt + max_tokens positions (throws InvalidArgument otherwise).
GenerateResult generate(Model& model, KvCache& cache, const GenerateRequest& request,
                        const std::function<bool(const std::string& piece)>& on_text);

// Greedy decoding as `rbee bench` times it (tgN): `steps` forward passes of one token each on `seq` (which must
// have room for seq.length + steps positions), the first fed `first`, each later one the argmax of the previous
// step's logits. The argmax runs on the logits' device and only the token id crosses to the host, which waits
// for it before the next step is issued: every step depends on the previous step's output, on every device of
// the placement, as in real decoding (consecutive steps can never overlap, e.g. two layer-split stages working
// on two tokens at once). Returns the `steps` tokens picked (ties: the first index), leaves seq.length advanced.
std::vector<TokenId> greedy_decode_steps(Model& model, KvCache& cache, SequenceKv& seq, TokenId first, int steps);

}  // namespace rbee::llm
