// Writing a job's events to an HTTP response: as a Server-Sent Events stream (each event flushed as it comes,
// a comment every second while idle so that a client that hung up is noticed, the job cancelled when a write
// fails), or collected into one result for non-streaming requests.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <httplib.h>

#include "server/llm/llm_job.h"
#include "server/llm/llm_service.h"

namespace rbee::server::llm_api {

// Turns one event into SSE frames (possibly several, possibly none).
using EventFormatter = std::function<std::string(const JobEvent&)>;

// Claims the job's single reader slot (409 ApiError when taken) and streams it; [DONE] closes the stream.
void stream_job(httplib::Response& res, LlmService& service, std::shared_ptr<LlmJob> job, EventFormatter format);

struct ChoiceResult {
  std::string text;
  std::vector<llm::TokenLogprob> logprobs;         // generated tokens, with logprobs on
  std::vector<llm::TokenLogprob> prompt_logprobs;  // with prompt logprobs on
  std::vector<float> embedding;                    // embedding jobs
  llm::JobSummary summary;
};
struct JobResult {
  std::vector<ChoiceResult> choices;
  int tokens_out = 0;  // over all choices
};
// Blocks until the job finishes; throws ApiError when a choice ended with an error (504 timeout, 500 otherwise)
// or was cancelled (503). Forgets the job afterwards. `client_gone`, when given, is asked a few times a second; once it
// says true the job is cancelled (a non-streaming client that hung up frees its slot at the next decode step).
JobResult wait_for_job(LlmService& service, const std::shared_ptr<LlmJob>& job,
                       const std::function<bool()>& client_gone = {});

}  // namespace rbee::server::llm_api
