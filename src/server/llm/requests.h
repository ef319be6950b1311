// The LLM worker's request bodies, parsed and range-checked without a model: POST /v1/jobs (rbee contract),
// POST /v1/completions and POST /v1/chat/completions (OpenAI). Every mistake is ApiError(400) naming the field;
// values the worker cannot honour (n > 1, echo, logprobs, tools, a non-text response_format) are 400
// "unsupported" naming the field. Unknown fields are ignored, as OpenAI's API does with fields it does not know.
// What needs the model (tokenizing, context length, vocabulary range of logit_bias) is checked at submit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace rbee::server::llm_api {

enum class Api { Jobs, Completions, Chat };

struct Message {
  std::string role;  // "system", "user", "assistant", "tool" ("developer" becomes "system")
  std::string content;
};

struct InferRequest {
  Api api = Api::Jobs;
  std::string model;                       // "" when absent
  std::string hive_id;                     // jobs only
  // The prompt: text, token ids (completions may send ids) or chat messages.
  std::string prompt;
  std::vector<int64_t> prompt_ids;
  bool has_prompt_ids = false;
  std::vector<Message> messages;
  std::optional<int64_t> max_tokens;       // absent: the API's default
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;
  double min_p = 0.0;
  double repetition_penalty = 1.0;
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  std::optional<int64_t> seed;
  std::vector<std::pair<int64_t, double>> logit_bias;  // token id -> bias
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;              // OpenAI stream_options.include_usage
};

// Limits on what a request may ask for (beyond them: 400).
inline constexpr int64_t kMaxTokensLimit = 1 << 20;
inline constexpr size_t kMaxStops = 16;
inline constexpr size_t kMaxStopBytes = 256;
inline constexpr size_t kMaxMessages = 4096;

InferRequest parse_job_request(const nlohmann::json& body);         // operation must be "infer"
InferRequest parse_completion_request(const nlohmann::json& body);
InferRequest parse_chat_request(const nlohmann::json& body);

}  // namespace rbee::server::llm_api
