// libFuzzer target for the LLM worker's request parsing: any bytes as a POST body of /v1/jobs,
// /v1/completions or /v1/chat/completions (the first byte picks which). The only acceptable failure is
// ApiError (a 4xx the server sends back); any other exception, crash, leak or UB is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/llm/requests.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t which = data[0] % 3;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  using namespace rbee::server;
  try {
    const nlohmann::json j = parse_json_object(body);
    llm_api::InferRequest r;
    if (which == 0) r = llm_api::parse_job_request(j);
    else if (which == 1) r = llm_api::parse_completion_request(j);
    else r = llm_api::parse_chat_request(j);
    // What the worker does next with a parsed request must hold: ranges it promised.
    if (r.max_tokens && (*r.max_tokens < 0 || *r.max_tokens > llm_api::kMaxTokensLimit)) __builtin_trap();
    if (r.max_tokens && *r.max_tokens == 0 && !r.echo) __builtin_trap();
    if (r.n < 1 || r.n > llm_api::kMaxChoices || r.top_logprobs < -1 || r.top_logprobs > llm_api::kMaxTopLogprobs) {
      __builtin_trap();
    }
    if (r.prompts.size() > llm_api::kMaxPrompts || (r.prompts.empty() && !r.messages.is_array())) __builtin_trap();
    if (!(r.top_p > 0 && r.top_p <= 1) || !(r.temperature >= 0 && r.temperature <= 2)) __builtin_trap();
    if (r.stop.size() > llm_api::kMaxStops) __builtin_trap();
    for (const auto& s : r.stop) {
      if (s.empty() || s.size() > llm_api::kMaxStopBytes) __builtin_trap();
    }
    for (const auto& p : r.prompts) (void)dump_json(nlohmann::json{{"prompt", p.text}, {"stop", r.stop}});
    (void)r.messages.dump();
  } catch (const ApiError& e) {
    if (e.status() < 400 || e.status() > 499) __builtin_trap();
    (void)dump_json(e.body());
  }
  return 0;
}
