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

}  // namespace rbee::llm
