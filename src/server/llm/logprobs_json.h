// Token log-probabilities as the APIs show them: OpenAI chat ({"content": [{token, logprob, bytes,
// top_logprobs}]}), OpenAI completions ({tokens, token_logprobs, top_logprobs, text_offset}) and the rbee job
// stream (one chat-style entry per token event). A token's string is its bytes (possibly part of a UTF-8
// character, then shown with U+FFFD in JSON; `bytes` keeps them exact); a log-probability of -inf (a token the
// grammar or a ban excluded) is written as -9999.0, as OpenAI does; NaN (the first prompt token) as null.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "rbee/llm/sampler.h"
#include "rbee/llm/tokenizer.h"

namespace rbee::server::llm_api {

// {"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}
nlohmann::json token_logprob_json(const llm::Tokenizer& tok, const llm::TokenLogprob& lp);
// {"content": [token_logprob_json...], "refusal": null}
nlohmann::json chat_logprobs(const llm::Tokenizer& tok, const std::vector<llm::TokenLogprob>& lps);
// {"tokens", "token_logprobs", "top_logprobs" ({token: logprob} per token), "text_offset"}: offsets count bytes
// from `offset`, the first token's position in the choice's text.
nlohmann::json completion_logprobs(const llm::Tokenizer& tok, const std::vector<llm::TokenLogprob>& lps, size_t offset);
// Appends b's four arrays to a's.
void append_completion_logprobs(nlohmann::json& a, const nlohmann::json& b);

}  // namespace rbee::server::llm_api
