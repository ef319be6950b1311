// The LLM worker's request bodies, parsed and range-checked without a model: POST /v1/jobs (rbee contract),
// POST /v1/completions and POST /v1/chat/completions (OpenAI). Every mistake is ApiError(400) naming the field;
// values the worker cannot honour are 400 "unsupported" naming the field. Unknown fields are ignored, as OpenAI's
// API does with fields it does not know. What needs the model (tokenizing, context length, vocabulary range of
// token ids, the chat template) is checked at submit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "rbee/llm/grammar.h"

namespace rbee::server::llm_api {

enum class Api { Jobs, Completions, Chat };

// tool_choice: none (tools hidden from the model), auto (the model decides; its output is parsed), required (at
// least one call: the output is constrained to a JSON array of {"name", "parameters"}), named (one call of that
// function: the output is constrained to its parameters).
enum class ToolChoice { None, Auto, Required, Named };

// One prompt: text, or token ids as sent.
struct PromptInput {
  std::string text;
  std::vector<int64_t> ids;
  bool is_ids = false;
};

struct InferRequest {
  Api api = Api::Jobs;
  std::string model;                       // "" when absent
  std::string hive_id;                     // jobs only
  // The prompts (completions may send several: one group of n choices each), or chat messages: an array of
  // objects {role, content (string or null), tool_calls?, tool_call_id?, name?} ready for the chat template
  // ("developer" is already "system"; content parts are joined into a string).
  std::vector<PromptInput> prompts;
  nlohmann::ordered_json messages;         // null unless the prompt is a conversation
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();  // extra template variables
  std::optional<bool> add_generation_prompt;   // default: true unless the last message is the assistant's
  std::optional<bool> continue_final_message;  // default: true when the last message is the assistant's
  bool parse_special = true;               // special-token text in a text prompt becomes the special token
  bool add_special_tokens = true;          // the model's BOS (text prompts; the chat template writes its own)
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
  std::vector<int64_t> stop_token_ids;
  bool ignore_eos = false;
  int64_t min_tokens = 0;
  int64_t n = 1;                           // choices per prompt
  int64_t top_logprobs = -1;               // -1: no logprobs; else per token this many alternatives (<= 20)
  bool echo = false;                       // completions: the prompt (and its logprobs) starts each choice's text
  // Constrained output: response_format json_object / json_schema, or GBNF ("grammar"), compiled at parse time.
  std::shared_ptr<const llm::grammar::Grammar> grammar;
  std::string grammar_field;               // the field it came from (for errors)
  // Tools (chat and jobs with messages): the definitions as sent, for the chat template.
  nlohmann::ordered_json tools;            // null or a non-empty array of {"type": "function", "function": {...}}
  ToolChoice tool_choice = ToolChoice::None;
  std::string tool_name;                   // Named
  bool parallel_tool_calls = true;
  bool stream = false;
  bool include_usage = false;              // OpenAI stream_options.include_usage
};

// Limits on what a request may ask for (beyond them: 400).
inline constexpr int64_t kMaxTokensLimit = 1 << 20;
inline constexpr size_t kMaxStops = 16;
inline constexpr size_t kMaxStopBytes = 256;
inline constexpr size_t kMaxMessages = 4096;
inline constexpr size_t kMaxPrompts = 128;
inline constexpr int64_t kMaxChoices = 128;
inline constexpr int64_t kMaxTopLogprobs = 20;

// POST /tokenize: a text prompt or messages (the fields of a job / chat request that shape the prompt).
struct TokenizeRequest {
  InferRequest prompt;             // prompts[0] or messages
  bool return_token_strs = false;  // also each token's text
};
// POST /detokenize.
struct DetokenizeRequest {
  std::vector<int64_t> tokens;
  bool skip_special_tokens = false;
};

// POST /v1/embeddings.
struct EmbeddingRequest {
  std::string model;
  std::vector<PromptInput> inputs;     // one embedding each
  bool base64 = false;                 // encoding_format "base64": little-endian float32 bytes
  std::optional<int64_t> dimensions;   // checked against the model at submit
};

// `ordered`, when given, is the same body parsed with its key order kept (nlohmann::json sorts keys): parts whose
// order reaches the model (tool definitions, schemas, template variables) are taken from it.
InferRequest parse_job_request(const nlohmann::json& body, const nlohmann::ordered_json* ordered = nullptr);
InferRequest parse_completion_request(const nlohmann::json& body, const nlohmann::ordered_json* ordered = nullptr);
InferRequest parse_chat_request(const nlohmann::json& body, const nlohmann::ordered_json* ordered = nullptr);
TokenizeRequest parse_tokenize_request(const nlohmann::json& body, const nlohmann::ordered_json* ordered = nullptr);
DetokenizeRequest parse_detokenize_request(const nlohmann::json& body);
EmbeddingRequest parse_embedding_request(const nlohmann::json& body);

}  // namespace rbee::server::llm_api
