#include "server/llm/llm_service.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "rbee/core/error.h"
#include "rbee/core/log.h"
#include "rbee/llm/prompt.h"
#include "server/api_error.h"
#include "server/util.h"

namespace rbee::server::llm_api {

namespace {
// An rbee::Error from tokenizing or submitting, as a 400 naming the field its message starts with.
ApiError as_api_error(const Error& e, const std::string& default_field) {
  if (e.code() == ErrorCode::InvalidArgument || e.code() == ErrorCode::NotFound) {
    std::string field = default_field;
    const std::string& msg = e.message();
    const size_t colon = msg.find(':');
    static const char* known[] = {"prompt", "max_tokens", "messages", "temperature", "top_p", "top_k", "min_p",
                                  "repetition_penalty", "presence_penalty", "frequency_penalty", "logit_bias"};
    for (const char* k : known) {
      if (msg.rfind(k, 0) == 0 && (colon == std::string::npos || colon >= std::string(k).size())) field = k;
    }
    return ApiError(400, "invalid_request", msg, field);
  }
  return ApiError(500, "internal_error", e.message());
}
}  // namespace

LlmService::LlmService(llm::Model& model, llm::Scheduler& scheduler, Metrics& metrics, ServiceOptions options)
    : model_(model), scheduler_(scheduler), metrics_(metrics), options_(std::move(options)) {}

std::vector<llm::TokenId> LlmService::prompt_tokens(const InferRequest& r) {
  if (r.api == Api::Chat) {
    std::vector<llm::ChatMessage> messages;
    messages.reserve(r.messages.size());
    for (const auto& m : r.messages) messages.push_back({m.role, m.content});
    try {
      return llm::chat_tokens(model_, messages);
    } catch (const Error& e) {
      throw ApiError(400, "invalid_request", "field 'messages': the chat template refused them: " + e.message(),
                     "messages");
    }
  }
  if (r.has_prompt_ids) {
    std::vector<llm::TokenId> ids;
    const int64_t vocab = model_.config().vocab_size;
    for (size_t i = 0; i < r.prompt_ids.size(); ++i) {
      const int64_t id = r.prompt_ids[i];
      if (id < 0 || id >= vocab) {
        throw invalid_field(fmt::format("prompt[{}]", i), fmt::format("token id {} is outside [0, {})", id, vocab));
      }
      ids.push_back((llm::TokenId)id);
    }
    return ids;
  }
  try {
    return llm::text_tokens(model_, r.prompt);
  } catch (const Error& e) {
    throw as_api_error(e, "prompt");
  }
}

std::shared_ptr<LlmJob> LlmService::start(const InferRequest& r) {
  if (!r.model.empty()) {
    bool known = r.model == options_.model_name;
    for (const auto& a : options_.model_aliases) known = known || r.model == a;
    if (!known) {
      throw ApiError(404, "model_not_found",
                     "field 'model': this worker serves \"" + options_.model_name + "\", not \"" + r.model + "\"",
                     "model");
    }
  }
  llm::JobRequest job;
  job.prompt = prompt_tokens(r);
  if (job.prompt.empty()) throw invalid_field(r.api == Api::Chat ? "messages" : "prompt", "gives no tokens");
  const int capacity = scheduler_.max_positions();
  const int left = capacity - (int)job.prompt.size();
  if (left < 1) {
    throw invalid_field(r.api == Api::Chat ? "messages" : "prompt",
                        fmt::format("is {} tokens; the context holds {} positions", job.prompt.size(), capacity));
  }
  if (r.max_tokens) {
    if (*r.max_tokens > left) {
      throw invalid_field("max_tokens", fmt::format("the prompt ({} tokens) + max_tokens ({}) exceeds the context of "
                                                    "{} positions",
                                                    job.prompt.size(), *r.max_tokens, capacity));
    }
    job.max_tokens = (int)*r.max_tokens;
  } else {
    job.max_tokens = std::min(options_.default_max_tokens, left);
  }
  job.sampling.temperature = (float)r.temperature;
  job.sampling.top_p = (float)r.top_p;
  job.sampling.top_k = (int)r.top_k;
  job.sampling.min_p = (float)r.min_p;
  job.sampling.repetition_penalty = (float)r.repetition_penalty;
  job.sampling.presence_penalty = (float)r.presence_penalty;
  job.sampling.frequency_penalty = (float)r.frequency_penalty;
  for (const auto& [id, bias] : r.logit_bias) {
    if (id < 0 || id >= model_.config().vocab_size) {
      throw invalid_field("logit_bias", fmt::format("token id {} is outside [0, {})", id, model_.config().vocab_size));
    }
    // OpenAI's -100 means "never": a ban, not a nudge.
    job.sampling.logit_bias[(llm::TokenId)id] = bias <= -100.0 ? -INFINITY : (float)bias;
  }
  if (r.seed) {
    job.sampling.has_seed = true;
    job.sampling.seed = (uint64_t)*r.seed;
  }
  job.stop = r.stop;
  job.deadline = std::chrono::steady_clock::now() +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                     std::chrono::duration<double>(options_.request_timeout_s));

  const char* prefix = r.api == Api::Chat ? "chatcmpl" : r.api == Api::Completions ? "cmpl" : "job";
  auto out = std::make_shared<LlmJob>(random_id(prefix), r.api, metrics_);
  out->prompt_tokens = (int)job.prompt.size();
  job.id = out->id;
  const int max_tokens = job.max_tokens;
  collect_garbage();
  std::shared_ptr<llm::JobHandle> handle;
  llm::Scheduler::Submit status;
  {
    // Registered before submitting so that the scheduler's first event finds it; removed again on refusal.
    std::lock_guard lock(mutex_);
    jobs_[out->id] = out;
  }
  try {
    status = scheduler_.submit(std::move(job), out, &handle);
  } catch (const Error& e) {
    forget(out->id);
    throw as_api_error(e, "prompt");
  }
  if (status != llm::Scheduler::Submit::Accepted) {
    forget(out->id);
    if (status == llm::Scheduler::Submit::QueueFull) {
      throw ApiError(429, "queue_full",
                     fmt::format("the queue is full ({} jobs waiting); retry later", scheduler_.options().max_queue),
                     "", options_.retry_after_s);
    }
    throw ApiError(503, "shutting_down", "the worker is shutting down", "", 5);
  }
  out->set_handle(handle);
  metrics_.add("rbee_prompt_tokens_total", out->prompt_tokens);
  log::info("job={} event=submitted api={} prompt_tokens={} max_tokens={} temperature={} seed={}", out->id,
            r.api == Api::Chat ? "chat" : r.api == Api::Completions ? "completions" : "jobs", out->prompt_tokens,
            max_tokens, r.temperature, r.seed ? std::to_string(*r.seed) : "none");
  return out;
}

std::shared_ptr<LlmJob> LlmService::find(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second;
}

void LlmService::forget(const std::string& id) {
  std::lock_guard lock(mutex_);
  jobs_.erase(id);
}

size_t LlmService::jobs() const {
  std::lock_guard lock(mutex_);
  return jobs_.size();
}

size_t LlmService::streaming() const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& [id, job] : jobs_) n += job->consumer_attached ? 1 : 0;
  return n;
}

void LlmService::collect_garbage() {
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
  const int64_t ttl_ms = (int64_t)(options_.job_ttl_s * 1000);
  std::lock_guard lock(mutex_);
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const LlmJob& j = *it->second;
    if (j.finished && !j.consumer_attached && now_ms - j.finished_at_ms > ttl_ms) it = jobs_.erase(it);
    else ++it;
  }
}

}  // namespace rbee::server::llm_api
