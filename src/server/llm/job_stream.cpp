#include "server/llm/job_stream.h"

#include "rbee/core/log.h"
#include "server/api_error.h"
#include "server/event_stream.h"

namespace rbee::server::llm_api {

void stream_job(httplib::Response& res, LlmService& service, std::shared_ptr<LlmJob> job, EventFormatter format) {
  if (job->consumer_attached.exchange(true)) {
    if (job->stream_drained) {  // its stream ended; the registry forgets it when that response is over
      throw ApiError(404, "job_not_found", "no job with id \"" + job->id + "\" (unknown, or already streamed)", "id");
    }
    throw ApiError(409, "stream_taken", "job " + job->id + " is already being streamed to another client");
  }
  stream_events<JobEvent>(res, job, job->events, std::move(format), [job, &service](bool completed) {
    if (!completed) {
      if (!job->finished) log::info("job={} event=client_disconnected (cancelling)", job->id);
      job->cancel();
    }
    service.forget(job->id);
  }, [job] { job->stream_drained = true; });
}

JobResult wait_for_job(LlmService& service, const std::shared_ptr<LlmJob>& job,
                       const std::function<bool()>& client_gone) {
  job->consumer_attached = true;
  struct Forget {
    LlmService& s;
    const std::string& id;
    ~Forget() { s.forget(id); }
  } forget{service, job->id};
  JobResult out;
  out.choices.resize((size_t)job->choices);
  JobEvent ev;
  bool cancelled_for_client = false;
  while (true) {
    const auto got = job->events.pop(ev, std::chrono::milliseconds(200));
    if (got == Channel<JobEvent>::Pop::Closed) break;
    if (!cancelled_for_client && client_gone && client_gone()) {
      cancelled_for_client = true;
      if (!job->finished) log::info("job={} event=client_disconnected (cancelling)", job->id);
      job->cancel();
    }
    if (got != Channel<JobEvent>::Pop::Item) continue;
    ChoiceResult& c = out.choices[(size_t)ev.choice];
    switch (ev.type) {
      case JobEvent::Type::Started: break;
      case JobEvent::Type::Text:
        c.text += ev.text;
        c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
        break;
      case JobEvent::Type::PromptLogprobs: c.prompt_logprobs = ev.logprobs; break;
      case JobEvent::Type::Embedding: c.embedding = ev.embedding; break;
      case JobEvent::Type::Finished:
        c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
        c.summary = ev.summary;
        out.tokens_out += ev.summary.tokens_out;
        break;
    }
  }
  for (const ChoiceResult& c : out.choices) {
    const auto& s = c.summary;
    if (s.reason == llm::StopReason::Error) {
      if (s.error_code == "timeout") throw ApiError(504, "timeout", "the request ran past the worker's time limit");
      if (s.error_code == "out_of_memory") {
        throw ApiError(503, "out_of_memory", "the device ran out of memory for this request: " + s.error_message, "", 1);
      }
      throw ApiError(500, "generation_failed", "generation failed: " + s.error_message);
    }
  }
  for (const ChoiceResult& c : out.choices) {
    if (c.summary.reason == llm::StopReason::Cancelled) {
      throw ApiError(503, "cancelled", "the job was cancelled (DELETE or worker shutdown)", "", 1);
    }
  }
  return out;
}

}  // namespace rbee::server::llm_api
