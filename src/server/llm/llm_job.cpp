#include "server/llm/llm_job.h"

#include "rbee/core/log.h"

namespace rbee::server::llm_api {

namespace {
double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

void describe_job_metrics(Metrics& m) {
  m.describe_counter("rbee_prompt_tokens_total", "Prompt tokens of accepted jobs (tokens in).");
  m.describe_counter("rbee_generated_tokens_total", "Generated tokens (tokens out).");
  m.describe_counter("rbee_jobs_total", "Finished jobs by stop reason.");
  m.describe_histogram("rbee_time_to_first_token_seconds", "Submit to first text of a job (queueing included).",
                       {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60});
  m.describe_histogram("rbee_inter_token_latency_seconds", "Time between consecutive text events of a job.",
                       {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5});
  m.describe_gauge("rbee_decode_tokens_per_second", "Decode speed of the last finished job.");
}

const char* openai_finish_reason(llm::StopReason reason) {
  return reason == llm::StopReason::MaxTokens ? "length" : "stop";
}

LlmJob::LlmJob(std::string id_, Api api_, Metrics& metrics)
    : id(std::move(id_)),
      api(api_),
      created(std::chrono::system_clock::now()),
      metrics_(metrics),
      submitted_(std::chrono::steady_clock::now()) {}

void LlmJob::set_handle(std::shared_ptr<llm::JobHandle> handle) {
  std::lock_guard lock(handle_mutex_);
  handle_ = std::move(handle);
  if (cancel_requested_ && handle_) handle_->cancel();
}

void LlmJob::cancel() {
  std::lock_guard lock(handle_mutex_);
  cancel_requested_ = true;
  if (handle_) handle_->cancel();
}

void LlmJob::on_started() {
  log::debug("job={} event=started", id);
  events.push({JobEvent::Type::Started, 0, {}, {}, std::chrono::system_clock::now()});
}

void LlmJob::on_text(int index, const std::string& text) {
  if (first_text_) {
    metrics_.observe("rbee_time_to_first_token_seconds", since(submitted_));
    first_text_ = false;
  } else {
    metrics_.observe("rbee_inter_token_latency_seconds", since(last_text_));
  }
  last_text_ = std::chrono::steady_clock::now();
  events.push({JobEvent::Type::Text, index, text, {}, std::chrono::system_clock::now()});
}

void LlmJob::on_finished(const llm::JobSummary& s) {
  metrics_.add("rbee_generated_tokens_total", s.tokens_out);
  metrics_.add("rbee_jobs_total", 1, {{"stop_reason", llm::stop_reason_name(s.reason)}});
  if (s.tokens_out > 1 && s.decode_seconds > 0) {
    metrics_.set("rbee_decode_tokens_per_second", (s.tokens_out - 1) / s.decode_seconds);
  }
  log::info("job={} event=finished stop_reason={} prompt_tokens={} tokens_out={} queue_ms={:.1f} prompt_ms={:.1f} "
            "decode_ms={:.1f}{}",
            id, llm::stop_reason_name(s.reason), s.prompt_tokens, s.tokens_out, s.queue_seconds * 1e3,
            s.prompt_seconds * 1e3, s.decode_seconds * 1e3,
            s.error_code.empty() ? "" : " error=" + s.error_code + " message=\"" + s.error_message + "\"");
  events.push({JobEvent::Type::Finished, 0, {}, s, std::chrono::system_clock::now()});
  events.close();
  finished_at_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now().time_since_epoch())
                       .count();
  finished = true;
}

}  // namespace rbee::server::llm_api
