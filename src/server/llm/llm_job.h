// LlmJob: one generation job as the HTTP side sees it. It is the scheduler's JobSink: events arrive on the
// scheduler thread and wait in a Channel for the one HTTP thread that writes them out (an SSE stream or a
// blocking JSON response). It also records the job's latency metrics and logs its life with its id.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "rbee/llm/scheduler.h"
#include "server/channel.h"
#include "server/metrics.h"
#include "server/llm/requests.h"

namespace rbee::server::llm_api {

struct JobEvent {
  enum class Type { Started, Text, Finished };
  Type type = Type::Started;
  int index = 0;                  // Text: the generated token that released the text
  std::string text;               // Text
  llm::JobSummary summary;        // Finished
  std::chrono::system_clock::time_point at;
};

class LlmJob final : public llm::JobSink {
 public:
  LlmJob(std::string id, Api api, Metrics& metrics);

  void on_started() override;
  void on_text(int index, const std::string& text) override;
  void on_finished(const llm::JobSummary& summary) override;

  const std::string id;
  const Api api;
  const std::chrono::system_clock::time_point created;
  int prompt_tokens = 0;
  // The scheduler's handle arrives after submit; a cancel() that comes first is applied then.
  void set_handle(std::shared_ptr<llm::JobHandle> handle);
  void cancel();
  Channel<JobEvent> events;
  std::atomic<bool> consumer_attached{false};  // only one reader: the first stream request wins
  std::atomic<bool> finished{false};
  std::atomic<int64_t> finished_at_ms{0};      // steady-clock ms, for the registry's time-to-live

 private:
  Metrics& metrics_;
  std::mutex handle_mutex_;
  std::shared_ptr<llm::JobHandle> handle_;
  bool cancel_requested_ = false;
  std::chrono::steady_clock::time_point submitted_, last_text_;
  bool first_text_ = true;
};

// Registers the metric families the jobs report into.
void describe_job_metrics(Metrics& metrics);
// "MAX_TOKENS" -> "length", "EOS"/"STOP_SEQUENCE" -> "stop" (OpenAI finish_reason).
const char* openai_finish_reason(llm::StopReason reason);

}  // namespace rbee::server::llm_api
