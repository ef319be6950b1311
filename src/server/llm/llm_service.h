// LlmService: what the LLM routes share once the model is loaded: the model, its scheduler, the table of jobs by
// id, and the step from a parsed request to a submitted job (prompt tokens through the tokenizer or the model's
// chat template, sampling parameters, default and maximum token counts, the request's time limit).
#pragma once

#include <memory>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

#include "rbee/llm/grammar.h"
#include "rbee/llm/model.h"
#include "rbee/llm/scheduler.h"
#include "rbee/llm/tool_calls.h"
#include "server/llm/llm_job.h"
#include "server/llm/requests.h"
#include "server/metrics.h"

namespace rbee::server::llm_api {

struct ServiceOptions {
  std::string model_name;          // the id /v1/models lists
  std::vector<std::string> model_aliases;  // other names a request's "model" may use (path, --model-ref)
  int default_max_tokens = 512;    // jobs and chat without max_tokens (capped by the context left)
  double request_timeout_s = 600;  // a job still running then ends with an error "timeout"
  double job_ttl_s = 120;          // a finished job nobody streamed is forgotten after this
  int retry_after_s = 2;           // Retry-After of a 429 (queue full)
  std::string chat_template;       // a chat template to use instead of the model's (--chat-template); "" for its own
  llm::Pooling pooling = llm::Pooling::Last;  // how /v1/embeddings pools (the model's declaration or --pooling)
  bool matryoshka = false;         // embeddings may be cut to fewer dimensions (--matryoshka)
};

struct Embeddings {
  std::vector<std::vector<float>> vectors;  // one per input, unit length
  int prompt_tokens = 0;
};

class LlmService {
 public:
  LlmService(llm::Model& model, llm::Scheduler& scheduler, Metrics& metrics, ServiceOptions options);

  // Builds and submits the job; throws ApiError (400 naming the field, 404 unknown model, 429 queue full with
  // Retry-After, 503 when shutting down).
  std::shared_ptr<LlmJob> start(const InferRequest& request);
  // Embeds every input (in waves of the scheduler's parallel slots) and waits; ApiError as start() does, 400
  // naming "dimensions" where the model does not allow them. `client_gone` as in wait_for_job.
  Embeddings embed(const EmbeddingRequest& request, const std::function<bool()>& client_gone);

  // The prompt(s) of a request as tokens: each text through the tokenizer (parse_special, add_special_tokens),
  // ids checked against the vocabulary, messages through the chat template. Throws ApiError 400 naming the field.
  std::vector<std::vector<llm::TokenId>> prompt_tokens(const InferRequest& r);
  // The text a conversation renders to (what /tokenize shows and chat prompts are made of).
  std::string render_messages(const InferRequest& r);
  std::shared_ptr<LlmJob> find(const std::string& id);
  void forget(const std::string& id);

  llm::Model& model() { return model_; }
  // The chat template in use (the override, else the model's) and what it does with tools.
  const std::string& chat_template() const { return template_; }
  bool tool_support() const { return tool_support_; }
  llm::ToolFormat tool_format() const { return tool_format_; }
  // The vocabulary as grammars see it (built on first use).
  std::shared_ptr<const llm::grammar::Vocabulary> vocabulary();
  // Grammar automata kept across requests over that vocabulary (built on first use).
  llm::grammar::ConstraintCache& grammars();
  llm::Scheduler& scheduler() { return scheduler_; }
  const ServiceOptions& options() const { return options_; }
  size_t jobs() const;
  // Jobs an HTTP thread is still writing out (streams not yet closed).
  size_t streaming() const;

 private:
  void collect_garbage();

  llm::Model& model_;
  llm::Scheduler& scheduler_;
  Metrics& metrics_;
  ServiceOptions options_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<LlmJob>> jobs_;
  std::string template_;
  bool tool_support_ = false;
  llm::ToolFormat tool_format_ = llm::ToolFormat::Json;
  std::mutex vocab_mutex_;
  std::shared_ptr<const llm::grammar::Vocabulary> vocab_;
  std::unique_ptr<llm::grammar::ConstraintCache> grammars_;  // over vocab_
};

}  // namespace rbee::server::llm_api
