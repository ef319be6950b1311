// LlmService: what the LLM routes share once the model is loaded: the model, its scheduler, the table of jobs by
// id, and the step from a parsed request to a submitted job (prompt tokens through the tokenizer or the model's
// chat template, sampling parameters, default and maximum token counts, the request's time limit).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "rbee/llm/model.h"
#include "rbee/llm/scheduler.h"
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
};

class LlmService {
 public:
  LlmService(llm::Model& model, llm::Scheduler& scheduler, Metrics& metrics, ServiceOptions options);

  // Builds and submits the job; throws ApiError (400 naming the field, 404 unknown model, 429 queue full with
  // Retry-After, 503 when shutting down).
  std::shared_ptr<LlmJob> start(const InferRequest& request);
  std::shared_ptr<LlmJob> find(const std::string& id);
  void forget(const std::string& id);

  llm::Model& model() { return model_; }
  llm::Scheduler& scheduler() { return scheduler_; }
  const ServiceOptions& options() const { return options_; }
  size_t jobs() const;
  // Jobs an HTTP thread is still writing out (streams not yet closed).
  size_t streaming() const;

 private:
  std::vector<llm::TokenId> prompt_tokens(const InferRequest& r);
  void collect_garbage();

  llm::Model& model_;
  llm::Scheduler& scheduler_;
  Metrics& metrics_;
  ServiceOptions options_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<LlmJob>> jobs_;
};

}  // namespace rbee::server::llm_api
