// OpenAI-compatible routes: /v1/models, /v1/completions, /v1/chat/completions (streaming and not, with usage,
// several prompts and n choices, logprobs and echo).
#include <chrono>
#include <cmath>
#include <cstring>

#include "server/api_error.h"
#include "server/base64.h"
#include "server/json_fields.h"
#include "server/llm/job_stream.h"
#include "server/llm/logprobs_json.h"
#include "server/llm/routes.h"
#include "server/llm/tool_stream.h"
#include "server/peer_watch.h"
#include "server/sse.h"

namespace rbee::server::llm_api {

namespace {

int64_t unix_seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

// What usage adds up over a job's choices beyond the token counts.
struct UsageDetails {
  int cached_tokens = 0;   // prompt tokens served from the prefix cache
  int drafted = 0, accepted = 0;  // speculative decoding's draft tokens
  void add(const llm::JobSummary& s) {
    cached_tokens += s.cached_prompt_tokens;
    drafted += s.spec_drafted;
    accepted += s.spec_accepted;
  }
};

// OpenAI's usage; cached prompt tokens as prompt_tokens_details.cached_tokens, speculative decoding's accepted and
// rejected draft tokens as completion_tokens_details.{accepted,rejected}_prediction_tokens (OpenAI's names for
// predicted outputs, the same idea).
nlohmann::json usage(int prompt_tokens, int completion_tokens, const UsageDetails& d = {}) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", d.cached_tokens}}},
          {"completion_tokens_details",
           {{"accepted_prediction_tokens", d.accepted}, {"rejected_prediction_tokens", d.drafted - d.accepted}}}};
}

// The skeleton every response and chunk shares.
nlohmann::json envelope(const LlmJob& job, const std::string& model, const char* object) {
  return {{"id", job.id}, {"object", object}, {"created", unix_seconds(job.created)}, {"model", model}};
}

// What a stream remembers between events: per choice, where its text stands (completions' text_offset).
struct StreamState {
  std::vector<size_t> offset;
  int finished = 0;
  int tokens_out = 0;
  UsageDetails details;
};

class OpenAiStream {
 public:
  OpenAiStream(const LlmJob& job, std::string model, bool include_usage, const llm::Tokenizer& tok, bool logprobs)
      : job_(job), model_(std::move(model)), include_usage_(include_usage), tok_(tok), logprobs_(logprobs) {
    state_.offset.assign((size_t)job.choices, 0);
    if (job.api == Api::Chat && job.tool_choice != ToolChoice::None) {
      for (int i = 0; i < job.choices; ++i) tools_.emplace_back(job.tool_choice, job.tool_format, job.tool_name);
    }
  }

  std::string frames(const JobEvent& ev) {
    const bool chat = job_.api == Api::Chat;
    switch (ev.type) {
      case JobEvent::Type::Started:
        if (chat) return chunk(ev.choice, {{"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}});
        // An echoed prompt without logprobs goes first; with logprobs it waits for them.
        if (!job_.echo_texts.empty() && !logprobs_) return text_chunk(ev.choice, echo_text(ev.choice), {});
        return "";
      case JobEvent::Type::PromptLogprobs:
        if (chat || job_.echo_texts.empty()) return "";
        return text_chunk(ev.choice, echo_text(ev.choice), ev.logprobs);
      case JobEvent::Type::Text:
        if (chat) {
          if (!tools_.empty()) return tool_chunks(ev.choice, tools_[(size_t)ev.choice].feed(ev.text), &ev.logprobs);
          nlohmann::json choice = {{"delta", {{"content", ev.text}}}, {"finish_reason", nullptr}};
          if (logprobs_) choice["logprobs"] = chat_logprobs(tok_, ev.logprobs);
          return chunk(ev.choice, std::move(choice));
        }
        return text_chunk(ev.choice, ev.text, ev.logprobs);
      case JobEvent::Type::Embedding: return "";
      case JobEvent::Type::Finished: return finished(ev);
    }
    return "";
  }

 private:
  const std::string& echo_text(int choice) const { return job_.echo_texts[(size_t)(choice / job_.n)]; }

  // Content and tool-call deltas of one piece (nothing when both are empty).
  std::string tool_chunks(int index, const ToolStream::Out& out, const std::vector<llm::TokenLogprob>* lps) const {
    if (out.content.empty() && out.tool_calls.empty()) return "";
    nlohmann::json delta = nlohmann::json::object();
    if (!out.content.empty()) delta["content"] = out.content;
    if (!out.tool_calls.empty()) delta["tool_calls"] = out.tool_calls;
    nlohmann::json choice = {{"delta", std::move(delta)}, {"finish_reason", nullptr}};
    if (logprobs_ && lps && !out.content.empty()) choice["logprobs"] = chat_logprobs(tok_, *lps);
    return chunk(index, std::move(choice));
  }

  // A streamed chunk carrying `choice` (text or delta, finish_reason).
  std::string chunk(int index, nlohmann::json choice) const {
    nlohmann::json c = envelope(job_, model_, job_.api == Api::Chat ? "chat.completion.chunk" : "text_completion");
    choice["index"] = index;
    if (!choice.contains("logprobs")) choice["logprobs"] = nullptr;
    c["choices"] = nlohmann::json::array({std::move(choice)});
    return sse_data(c);
  }

  std::string text_chunk(int index, const std::string& text, const std::vector<llm::TokenLogprob>& lps) {
    nlohmann::json choice = {{"text", text}, {"finish_reason", nullptr}};
    size_t& offset = state_.offset[(size_t)index];
    if (logprobs_) choice["logprobs"] = completion_logprobs(tok_, lps, offset);
    offset += text.size();
    return chunk(index, std::move(choice));
  }

  std::string finished(const JobEvent& ev) {
    const bool chat = job_.api == Api::Chat;
    const auto& s = ev.summary;
    state_.tokens_out += s.tokens_out;
    state_.details.add(s);
    ++state_.finished;
    if (s.reason == llm::StopReason::Error || s.reason == llm::StopReason::Cancelled) {
      const bool timeout = s.error_code == "timeout", oom = s.error_code == "out_of_memory";
      const ApiError e = s.reason == llm::StopReason::Cancelled ? ApiError(503, "cancelled", "the job was cancelled")
                         : oom ? ApiError(503, "out_of_memory", "the device ran out of memory: " + s.error_message)
                               : ApiError(timeout ? 504 : 500, timeout ? "timeout" : "generation_failed",
                                          "generation failed: " + s.error_message);
      return sse_data(e.body());
    }
    const char* reason = openai_finish_reason(s.reason);
    std::string out;
    if (chat && !tools_.empty()) {
      ToolStream& ts = tools_[(size_t)ev.choice];
      out += tool_chunks(ev.choice, ts.finish(), nullptr);
      if (ts.called() && s.reason != llm::StopReason::MaxTokens) reason = "tool_calls";
    }
    if (chat) {
      nlohmann::json choice = {{"delta", nlohmann::json::object()}, {"finish_reason", reason}};
      if (logprobs_ && !ev.logprobs.empty()) choice["logprobs"] = chat_logprobs(tok_, ev.logprobs);
      out += chunk(ev.choice, std::move(choice));
    } else {
      nlohmann::json choice = {{"text", ""}, {"finish_reason", reason}};
      if (logprobs_ && !ev.logprobs.empty()) {
        choice["logprobs"] = completion_logprobs(tok_, ev.logprobs, state_.offset[(size_t)ev.choice]);
      }
      out = chunk(ev.choice, std::move(choice));
    }
    if (include_usage_ && state_.finished == job_.choices) {
      nlohmann::json u = envelope(job_, model_, chat ? "chat.completion.chunk" : "text_completion");
      u["choices"] = nlohmann::json::array();
      u["usage"] = usage(job_.prompt_tokens, state_.tokens_out, state_.details);
      out += sse_data(u);
    }
    return out;
  }

  const LlmJob& job_;
  std::string model_;
  bool include_usage_;
  const llm::Tokenizer& tok_;
  bool logprobs_;
  StreamState state_;
  std::vector<ToolStream> tools_;  // per choice, when tools are in play
};

void completion(LlmWorkerContext& ctx, const httplib::Request& req, httplib::Response& res, bool chat) {
  const nlohmann::json body = parse_json_object(req.body);
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(req.body);
  const InferRequest r = chat ? parse_chat_request(body, &ordered) : parse_completion_request(body, &ordered);
  LlmService& service = ctx.need_service();
  auto job = service.start(r);
  const std::string model = ctx.model_name;
  const llm::Tokenizer& tok = service.model().tokenizer();
  const bool logprobs = r.top_logprobs >= 0;
  if (r.stream) {
    auto stream = std::make_shared<OpenAiStream>(*job, model, r.include_usage, tok, logprobs);
    stream_job(res, service, job, [stream](const JobEvent& ev) { return stream->frames(ev); });
    return;
  }
  const PeerWatch peer(req);
  const JobResult result = wait_for_job(service, job, [&peer] { return peer.peer_closed(); });
  nlohmann::json out = envelope(*job, model, chat ? "chat.completion" : "text_completion");
  nlohmann::json choices = nlohmann::json::array();
  for (size_t i = 0; i < result.choices.size(); ++i) {
    const ChoiceResult& c = result.choices[i];
    nlohmann::json choice = {{"index", i}, {"logprobs", nullptr},
                             {"finish_reason", openai_finish_reason(c.summary.reason)}};
    if (chat) {
      if (job->tool_choice != ToolChoice::None) {
        bool called = false;
        choice["message"] = tool_message(job->tool_choice, job->tool_format, job->tool_name, c.text, called);
        if (called && c.summary.reason != llm::StopReason::MaxTokens) choice["finish_reason"] = "tool_calls";
      } else {
        choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      }
      if (logprobs) choice["logprobs"] = chat_logprobs(tok, c.logprobs);
    } else {
      std::string text = c.text;
      if (r.echo) {
        const std::string& prompt = job->echo_texts[i / (size_t)job->n];
        text = prompt + text;
        if (logprobs) {
          nlohmann::json lp = completion_logprobs(tok, c.prompt_logprobs, 0);
          append_completion_logprobs(lp, completion_logprobs(tok, c.logprobs, prompt.size()));
          choice["logprobs"] = std::move(lp);
        }
      } else if (logprobs) {
        choice["logprobs"] = completion_logprobs(tok, c.logprobs, 0);
      }
      choice["text"] = std::move(text);
    }
    choices.push_back(std::move(choice));
  }
  out["choices"] = std::move(choices);
  UsageDetails details;
  for (const ChoiceResult& c : result.choices) details.add(c.summary);
  out["usage"] = usage(job->prompt_tokens, result.tokens_out, details);
  send_json(res, 200, out);
}

// POST /v1/embeddings: one vector per input, pooled as the model declares (ServiceOptions::pooling).
void embeddings(LlmWorkerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const EmbeddingRequest e = parse_embedding_request(parse_json_object(req.body));
  LlmService& service = ctx.need_service();
  const PeerWatch peer(req);
  const Embeddings out = service.embed(e, [&peer] { return peer.peer_closed(); });
  nlohmann::json data = nlohmann::json::array();
  for (size_t i = 0; i < out.vectors.size(); ++i) {
    const std::vector<float>& v = out.vectors[i];
    nlohmann::json vec;
    if (e.base64) {
      std::vector<uint8_t> bytes(v.size() * sizeof(float));
      std::memcpy(bytes.data(), v.data(), bytes.size());  // little-endian hosts only (x86-64, aarch64)
      vec = base64_encode(bytes);
    } else {
      vec = v;
    }
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", std::move(vec)}});
  }
  send_json(res, 200, {{"object", "list"}, {"data", std::move(data)}, {"model", ctx.model_name},
                       {"usage", {{"prompt_tokens", out.prompt_tokens}, {"total_tokens", out.prompt_tokens}}}});
}

}  // namespace

void add_openai_routes(HttpServer& http, LlmWorkerContext& ctx) {
  // Listed only once the model is loaded (503 "loading" before): routers and clients that probe /v1/models then
  // never see a model the worker cannot serve yet. /health stays a liveness check.
  http.get("/v1/models", "/v1/models", [&ctx](const httplib::Request&, httplib::Response& res) {
    ctx.need_service();
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
  http.post("/v1/embeddings", "/v1/embeddings",
            [&ctx](const httplib::Request& req, httplib::Response& res) { embeddings(ctx, req, res); });
}

}  // namespace rbee::server::llm_api
