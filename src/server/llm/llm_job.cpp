#include "server/llm/llm_job.h"

#include "rbee/core/log.h"

namespace rbee::server::llm_api {

namespace {
double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// One choice's events, forwarded to its job.
class ChoiceSink final : public llm::JobSink {
 public:
  ChoiceSink(std::shared_ptr<LlmJob> job, int choice) : job_(std::move(job)), choice_(choice) {}
  void on_started() override { job_->started(choice_); }
  void on_text(int index, const std::string& text) override { job_->text(choice_, index, text); }
  void on_logprobs(int, const llm::TokenLogprob& lp) override { job_->logprob(choice_, lp); }
  void on_prompt_logprobs(const std::vector<llm::TokenLogprob>& lps) override { job_->prompt_logprobs(choice_, lps); }
  void on_embedding(const std::vector<float>& v) override { job_->embedding(choice_, v); }
  void on_finished(const llm::JobSummary& s) override { job_->choice_finished(choice_, s); }

 private:
  std::shared_ptr<LlmJob> job_;
  int choice_;
};
}  // namespace

void describe_job_metrics(Metrics& m) {
  m.describe_counter("rbee_prompt_tokens_total", "Prompt tokens of accepted jobs (tokens in).");
  m.describe_counter("rbee_prompt_tokens_evaluated_total",
                     "Prompt tokens run through the model (a prompt shared by n choices counts once).");
  m.describe_counter("rbee_generated_tokens_total", "Generated tokens (tokens out).");
  m.describe_counter("rbee_embeddings_total", "Embeddings returned by /v1/embeddings.");
  m.describe_counter("rbee_jobs_total", "Finished jobs (choices) by stop reason.");
  m.describe_histogram("rbee_time_to_first_token_seconds", "Submit to first text of a job (queueing included).",
                       {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60});
  m.describe_histogram("rbee_inter_token_latency_seconds", "Time between consecutive text events of a job.",
                       {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5});
  m.describe_gauge("rbee_decode_tokens_per_second", "Decode speed of the last finished job.");
}

const char* openai_finish_reason(llm::StopReason reason) {
  return reason == llm::StopReason::MaxTokens ? "length" : "stop";
}

LlmJob::LlmJob(std::string id_, Api api_, Metrics& metrics, int choices_)
    : id(std::move(id_)),
      api(api_),
      choices(choices_),
      created(std::chrono::system_clock::now()),
      metrics_(metrics),
      pending_((size_t)choices_),
      unfinished_(choices_),
      submitted_(std::chrono::steady_clock::now()) {}

std::vector<std::shared_ptr<llm::JobSink>> LlmJob::sinks(int first, int n) {
  std::vector<std::shared_ptr<llm::JobSink>> out;
  for (int i = 0; i < n; ++i) out.push_back(std::make_shared<ChoiceSink>(shared_from_this(), first + i));
  return out;
}

void LlmJob::add_handle(std::shared_ptr<llm::JobHandle> handle) {
  std::lock_guard lock(mutex_);
  if (cancel_requested_ && handle) handle->cancel();
  handles_.push_back(std::move(handle));
}

void LlmJob::cancel() {
  std::lock_guard lock(mutex_);
  cancel_requested_ = true;
  for (auto& h : handles_)
    if (h) h->cancel();
}

void LlmJob::started(int choice) {
  log::debug("job={} choice={} event=started", id, choice);
  JobEvent ev;
  ev.type = JobEvent::Type::Started;
  ev.choice = choice;
  ev.at = std::chrono::system_clock::now();
  events.push(std::move(ev));
}

void LlmJob::text(int choice, int index, const std::string& t) {
  JobEvent ev;
  {
    std::lock_guard lock(mutex_);
    if (first_text_) {
      metrics_.observe("rbee_time_to_first_token_seconds", since(submitted_));
      first_text_ = false;
    } else {
      metrics_.observe("rbee_inter_token_latency_seconds", since(last_text_));
    }
    last_text_ = std::chrono::steady_clock::now();
    ev.logprobs.swap(pending_[(size_t)choice]);
  }
  ev.type = JobEvent::Type::Text;
  ev.choice = choice;
  ev.index = index;
  ev.text = t;
  ev.at = std::chrono::system_clock::now();
  events.push(std::move(ev));
}

void LlmJob::logprob(int choice, const llm::TokenLogprob& lp) {
  std::lock_guard lock(mutex_);
  pending_[(size_t)choice].push_back(lp);
}

void LlmJob::prompt_logprobs(int choice, const std::vector<llm::TokenLogprob>& lps) {
  JobEvent ev;
  ev.type = JobEvent::Type::PromptLogprobs;
  ev.choice = choice;
  ev.logprobs = lps;
  ev.at = std::chrono::system_clock::now();
  events.push(std::move(ev));
}

void LlmJob::embedding(int choice, const std::vector<float>& v) {
  JobEvent ev;
  ev.type = JobEvent::Type::Embedding;
  ev.choice = choice;
  ev.embedding = v;
  ev.at = std::chrono::system_clock::now();
  events.push(std::move(ev));
}

void LlmJob::choice_finished(int choice, const llm::JobSummary& s) {
  metrics_.add("rbee_generated_tokens_total", s.tokens_out);
  metrics_.add("rbee_prompt_tokens_evaluated_total", s.prompt_tokens_evaluated);
  metrics_.add("rbee_jobs_total", 1, {{"stop_reason", llm::stop_reason_name(s.reason)}});
  if (s.tokens_out > 1 && s.decode_seconds > 0) {
    metrics_.set("rbee_decode_tokens_per_second", (s.tokens_out - 1) / s.decode_seconds);
  }
  log::info("job={}{} event=finished stop_reason={} prompt_tokens={} tokens_out={} queue_ms={:.1f} prompt_ms={:.1f} "
            "decode_ms={:.1f}{}",
            id, choices > 1 ? " choice=" + std::to_string(choice) : "", llm::stop_reason_name(s.reason),
            s.prompt_tokens, s.tokens_out, s.queue_seconds * 1e3, s.prompt_seconds * 1e3, s.decode_seconds * 1e3,
            s.error_code.empty() ? "" : " error=" + s.error_code + " message=\"" + s.error_message + "\"");
  JobEvent ev;
  bool last = false;
  {
    std::lock_guard lock(mutex_);
    // Tokens whose text never came (it was empty, or part of a stop sequence): kept unless a stop cut them.
    if (s.reason != llm::StopReason::StopSequence) ev.logprobs.swap(pending_[(size_t)choice]);
    pending_[(size_t)choice].clear();
    last = --unfinished_ == 0;
  }
  ev.type = JobEvent::Type::Finished;
  ev.choice = choice;
  ev.summary = s;
  ev.at = std::chrono::system_clock::now();
  events.push(std::move(ev));
  if (!last) return;
  events.close();
  finished_at_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now().time_since_epoch())
                       .count();
  finished = true;
}

}  // namespace rbee::server::llm_api
