// LlmJob: one request as the HTTP side sees it: one or more choices (a completion's several prompts times n),
// each a scheduler sequence whose events arrive, through a ChoiceSink, on the scheduler thread and wait in one
// Channel for the one HTTP thread that writes them out (an SSE stream or a blocking JSON response). It also
// records the job's latency metrics and logs its life with its id.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rbee/llm/scheduler.h"
#include "rbee/llm/tool_calls.h"
#include "server/channel.h"
#include "server/metrics.h"
#include "server/llm/requests.h"

namespace rbee::server::llm_api {

struct JobEvent {
  enum class Type { Started, Text, PromptLogprobs, Embedding, Finished };
  Type type = Type::Started;
  int choice = 0;                 // which choice of the request
  int index = 0;                  // Text: the generated token that released the text
  std::string text;               // Text
  // Text: the generated tokens whose text this event completes (with logprobs on); Finished: tokens left over
  // (their text was empty); PromptLogprobs: one per prompt token.
  std::vector<llm::TokenLogprob> logprobs;
  std::vector<float> embedding;   // Embedding
  llm::JobSummary summary;        // Finished
  std::chrono::system_clock::time_point at;
};

class LlmJob final : public std::enable_shared_from_this<LlmJob> {
 public:
  LlmJob(std::string id, Api api, Metrics& metrics, int choices);

  // Sinks for choices [first, first + n) of one scheduler submission.
  std::vector<std::shared_ptr<llm::JobSink>> sinks(int first, int n);

  const std::string id;
  const Api api;
  const int choices;
  const std::chrono::system_clock::time_point created;
  int prompt_tokens = 0;          // over all prompts (each counted once, whatever n)
  int n = 1;                      // choices per prompt: choice c belongs to prompt c / n
  std::vector<std::string> echo_texts;  // with echo: each prompt's text, which starts its choices' text
  bool logprobs = false;          // the rbee stream shows token log-probabilities (set before it is streamed)
  ToolChoice tool_choice = ToolChoice::None;  // how the chat routes read the output (tool calls or not)
  std::string tool_name;          // Named: the function
  llm::ToolFormat tool_format = llm::ToolFormat::Json;
  // The scheduler's handles arrive after each submit; a cancel() that comes first is applied then.
  void add_handle(std::shared_ptr<llm::JobHandle> handle);
  void cancel();
  Channel<JobEvent> events;
  std::atomic<bool> consumer_attached{false};  // only one reader: the first stream request wins
  std::atomic<bool> stream_drained{false};     // its reader has taken every event: the job is as good as gone
  std::atomic<bool> finished{false};           // every choice has finished
  std::atomic<int64_t> finished_at_ms{0};      // steady-clock ms, for the registry's time-to-live

  // Called by the choice sinks (scheduler thread).
  void started(int choice);
  void text(int choice, int index, const std::string& text);
  void logprob(int choice, const llm::TokenLogprob& lp);
  void prompt_logprobs(int choice, const std::vector<llm::TokenLogprob>& lps);
  void embedding(int choice, const std::vector<float>& v);
  void choice_finished(int choice, const llm::JobSummary& summary);

 private:
  Metrics& metrics_;
  std::mutex mutex_;
  std::vector<std::shared_ptr<llm::JobHandle>> handles_;
  bool cancel_requested_ = false;
  std::vector<std::vector<llm::TokenLogprob>> pending_;  // per choice: logprobs waiting for their text
  int unfinished_;
  std::chrono::steady_clock::time_point submitted_, last_text_;
  bool first_text_ = true;
};

// Registers the metric families the jobs report into.
void describe_job_metrics(Metrics& metrics);
// "MAX_TOKENS" -> "length", "EOS"/"STOP_SEQUENCE" -> "stop" (OpenAI finish_reason).
const char* openai_finish_reason(llm::StopReason reason);

}  // namespace rbee::server::llm_api
