// OpenAI-compatible routes: /v1/models, /v1/completions, /v1/chat/completions (streaming and not, with usage).
#include <chrono>

#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/llm/job_stream.h"
#include "server/llm/routes.h"
#include "server/peer_watch.h"
#include "server/sse.h"

namespace rbee::server::llm_api {

namespace {

int64_t unix_seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

nlohmann::json usage(const llm::JobSummary& s) {
  return {{"prompt_tokens", s.prompt_tokens},
          {"completion_tokens", s.tokens_out},
          {"total_tokens", s.prompt_tokens + s.tokens_out}};
}

// The skeleton every response and chunk shares.
nlohmann::json envelope(const LlmJob& job, const std::string& model, const char* object) {
  return {{"id", job.id}, {"object", object}, {"created", unix_seconds(job.created)}, {"model", model}};
}

// A streamed chunk carrying `choice` (text or delta, finish_reason).
std::string chunk(const LlmJob& job, const std::string& model, nlohmann::json choice) {
  nlohmann::json c = envelope(job, model, job.api == Api::Chat ? "chat.completion.chunk" : "text_completion");
  choice["index"] = 0;
  if (!choice.contains("logprobs")) choice["logprobs"] = nullptr;
  c["choices"] = nlohmann::json::array({std::move(choice)});
  return sse_data(c);
}

std::string openai_frames(const LlmJob& job, const std::string& model, bool include_usage, const JobEvent& ev) {
  const bool chat = job.api == Api::Chat;
  switch (ev.type) {
    case JobEvent::Type::Started:
      if (!chat) return "";
      return chunk(job, model, {{"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}});
    case JobEvent::Type::Text:
      if (chat) return chunk(job, model, {{"delta", {{"content", ev.text}}}, {"finish_reason", nullptr}});
      return chunk(job, model, {{"text", ev.text}, {"finish_reason", nullptr}});
    case JobEvent::Type::Finished: {
      const auto& s = ev.summary;
      if (s.reason == llm::StopReason::Error || s.reason == llm::StopReason::Cancelled) {
        const bool timeout = s.error_code == "timeout", oom = s.error_code == "out_of_memory";
        const ApiError e = s.reason == llm::StopReason::Cancelled ? ApiError(503, "cancelled", "the job was cancelled")
                           : oom ? ApiError(503, "out_of_memory", "the device ran out of memory: " + s.error_message)
                                 : ApiError(timeout ? 504 : 500, timeout ? "timeout" : "generation_failed",
                                            "generation failed: " + s.error_message);
        return sse_data(e.body());
      }
      const char* reason = openai_finish_reason(s.reason);
      std::string out = chat ? chunk(job, model, {{"delta", nlohmann::json::object()}, {"finish_reason", reason}})
                             : chunk(job, model, {{"text", ""}, {"finish_reason", reason}});
      if (include_usage) {
        nlohmann::json u = envelope(job, model, chat ? "chat.completion.chunk" : "text_completion");
        u["choices"] = nlohmann::json::array();
        u["usage"] = usage(s);
        out += sse_data(u);
      }
      return out;
    }
  }
  return "";
}

void completion(LlmWorkerContext& ctx, const httplib::Request& req, httplib::Response& res, bool chat) {
  const nlohmann::json body = parse_json_object(req.body);
  const InferRequest r = chat ? parse_chat_request(body) : parse_completion_request(body);
  LlmService& service = ctx.need_service();
  auto job = service.start(r);
  const std::string model = ctx.model_name;
  if (r.stream) {
    LlmJob* raw = job.get();
    const bool include_usage = r.include_usage;
    stream_job(res, service, job,
               [raw, model, include_usage](const JobEvent& ev) { return openai_frames(*raw, model, include_usage, ev); });
    return;
  }
  const PeerWatch peer(req);
  const JobResult result = wait_for_job(service, job, [&peer] { return peer.peer_closed(); });
  nlohmann::json out = envelope(*job, model, chat ? "chat.completion" : "text_completion");
  nlohmann::json choice = {{"index", 0}, {"logprobs", nullptr},
                           {"finish_reason", openai_finish_reason(result.summary.reason)}};
  if (chat) choice["message"] = {{"role", "assistant"}, {"content", result.text}};
  else choice["text"] = result.text;
  out["choices"] = nlohmann::json::array({choice});
  out["usage"] = usage(result.summary);
  send_json(res, 200, out);
}

}  // namespace

void add_openai_routes(HttpServer& http, LlmWorkerContext& ctx) {
  http.get("/v1/models", "/v1/models", [&ctx](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200,
              {{"object", "list"},
               {"data", nlohmann::json::array({{{"id", ctx.model_name},
                                                {"object", "model"},
                                                {"created", ctx.started_unix},
                                                {"owned_by", "rbee"}}})}});
  });
  http.post("/v1/completions", "/v1/completions",
            [&ctx](const httplib::Request& req, httplib::Response& res) { completion(ctx, req, res, false); });
  http.post("/v1/chat/completions", "/v1/chat/completions",
            [&ctx](const httplib::Request& req, httplib::Response& res) { completion(ctx, req, res, true); });
}

}  // namespace rbee::server::llm_api
