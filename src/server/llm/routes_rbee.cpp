// The rbee worker contract: /info, POST /v1/jobs (alias /v1/inference), the job's SSE stream, DELETE.
#include <fmt/format.h>

#include "rbee/backend/device.h"
#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/llm/job_stream.h"
#include "server/llm/logprobs_json.h"
#include "server/llm/routes.h"
#include "server/llm/serving_metrics.h"
#include "server/peer_watch.h"
#include "server/sse.h"
#include "server/util.h"

namespace rbee::server::llm_api {

LlmService& LlmWorkerContext::need_service() {
  LlmService* s = service.load();
  if (!s) throw_not_ready(lifecycle);
  return *s;
}

std::string worker_status(LlmWorkerContext& ctx) {
  const auto state = ctx.lifecycle.state();
  if (state != Lifecycle::State::Ready) return ctx.lifecycle.state_name();
  LlmService* s = ctx.service.load();
  if (s) {
    const auto st = s->scheduler().stats();
    if (st.running >= ctx.parallel) return "busy";
  }
  return "ready";
}

nlohmann::json LlmWorkerContext::info() {
  const DeviceReport devices = device.report();  // the sums and the list from one reading
  nlohmann::json out = worker_info_common(identity, model_name, model_path, model_ref, devices.total);
  out["devices"] = DeviceStats::devices_json(devices.devices);
  out["status"] = worker_status(*this);
  out["ctx_size"] = ctx_size;
  out["parallel"] = parallel;
  if (LlmService* s = service.load()) {
    const auto& c = s->model().config();
    const auto st = s->scheduler().stats();
    out["model_info"] = {{"arch", c.arch}, {"name", c.name}, {"vocab_size", c.vocab_size},
                         {"n_layers", c.n_layers}, {"max_positions", c.max_positions},
                         {"weight_bytes", s->model().weight_bytes()}};
    const auto& placement = s->model().placement();
    nlohmann::json parts = nlohmann::json::array();
    for (int r = 0; r < placement.ranks(); ++r) {
      const Device& dev = *placement.devices[(size_t)r];
      nlohmann::json part = {{"device", dev.id()}, {"weight_bytes", s->model().weight_bytes_on(dev)}};
      if (placement.split == rbee::llm::SplitMode::Layer) {
        part["layers"] = {placement.layer_begin[(size_t)r], placement.layer_begin[(size_t)r + 1]};
      } else {
        part["q_heads"] = placement.q_heads[(size_t)r];
        part["ffn_columns"] = placement.ffn[(size_t)r];
      }
      parts.push_back(std::move(part));
    }
    out["placement"] = {{"split", std::string(rbee::llm::split_mode_name(placement.split))},
                        {"describe", placement.describe()},
                        {"parts", std::move(parts)}};
    if (!memory_plan.is_null()) out["memory_plan"] = memory_plan;
    out["slots"] = {{"running", st.running}, {"queued", st.queued}, {"kv_blocks_free", st.free_blocks},
                    {"kv_blocks_total", st.total_blocks}, {"steps", st.steps}, {"max_batch_rows", st.max_batch_rows}};
    out["load"] = serving_json(serving_figures(st, parallel));
  }
  return out;
}

namespace {

nlohmann::json logprobs_list(const llm::Tokenizer& tok, const std::vector<llm::TokenLogprob>& lps) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& lp : lps) out.push_back(token_logprob_json(tok, lp));
  return out;
}

// One scheduler event as the rbee SSE contract frames it. With logprobs on, token events carry "logprobs" (one
// entry per generated token the text completes) and the end event those of tokens that released no text.
std::string rbee_frames(const LlmJob& job, const std::string& model, DeviceStats& device, const llm::Tokenizer& tok,
                        bool logprobs, const JobEvent& ev) {
  switch (ev.type) {
    case JobEvent::Type::Started:
      return sse_data({{"type", "started"}, {"job_id", job.id}, {"model", model}, {"started_at", iso8601_utc(ev.at)}});
    case JobEvent::Type::Text: {
      nlohmann::json t = {{"type", "token"}, {"t", ev.text}, {"i", ev.index}};
      if (logprobs) t["logprobs"] = logprobs_list(tok, ev.logprobs);
      return sse_data(t);
    }
    case JobEvent::Type::PromptLogprobs:
    case JobEvent::Type::Embedding: return "";
    case JobEvent::Type::Finished: {
      const auto& s = ev.summary;
      std::string out;
      if (s.reason == llm::StopReason::Error) {
        out += sse_data({{"type", "error"}, {"code", s.error_code.empty() ? "internal" : s.error_code},
                         {"message", s.error_message}});
      }
      const double tps = s.tokens_out > 1 && s.decode_seconds > 0 ? (s.tokens_out - 1) / s.decode_seconds : 0.0;
      out += sse_data({{"type", "metrics"}, {"tokens_per_sec", tps}, {"vram_bytes", device.snapshot().vram_used},
                       {"prompt_tokens", s.prompt_tokens}, {"cached_prompt_tokens", s.cached_prompt_tokens},
                       {"spec_drafted", s.spec_drafted}, {"spec_accepted", s.spec_accepted},
                       {"time_to_first_token_ms", (s.queue_seconds + s.prompt_seconds) * 1e3}});
      nlohmann::json end = {{"type", "end"}, {"tokens_out", s.tokens_out}, {"decode_time_ms", s.decode_seconds * 1e3},
                            {"stop_reason", llm::stop_reason_name(s.reason)}};
      if (logprobs && !ev.logprobs.empty()) end["logprobs"] = logprobs_list(tok, ev.logprobs);
      out += sse_data(end);
      return out;
    }
  }
  return "";
}

void post_job(LlmWorkerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const nlohmann::json body = parse_json_object(req.body);
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(req.body);
  const InferRequest r = parse_job_request(body, &ordered);
  LlmService& service = ctx.need_service();
  auto job = service.start(r);
  job->logprobs = r.top_logprobs >= 0;
  if (!r.stream) {
    const PeerWatch peer(req);
    const JobResult result = wait_for_job(service, job, [&peer] { return peer.peer_closed(); });
    const ChoiceResult& c = result.choices.at(0);
    nlohmann::json out = {{"job_id", job->id},
                          {"text", c.text},
                          {"tokens_out", c.summary.tokens_out},
                          {"prompt_tokens", c.summary.prompt_tokens},
                          {"decode_time_ms", c.summary.decode_seconds * 1e3},
                          {"stop_reason", llm::stop_reason_name(c.summary.reason)}};
    if (job->logprobs) out["logprobs"] = logprobs_list(service.model().tokenizer(), c.logprobs);
    send_json(res, 200, out);
    return;
  }
  send_json(res, 200, {{"job_id", job->id}, {"sse_url", "/v1/jobs/" + job->id + "/stream"}});
}

std::shared_ptr<LlmJob> find_job(LlmWorkerContext& ctx, const httplib::Request& req) {
  const std::string id = req.matches[1];
  auto job = ctx.need_service().find(id);
  if (!job) throw job_not_found(id);
  return job;
}

}  // namespace

void add_rbee_routes(HttpServer& http, LlmWorkerContext& ctx) {
  http.get("/info", "/info", [&ctx](const httplib::Request&, httplib::Response& res) { send_json(res, 200, ctx.info()); });
  http.post("/v1/jobs", "/v1/jobs", [&ctx](const httplib::Request& req, httplib::Response& res) { post_job(ctx, req, res); });
  http.post("/v1/inference", "/v1/inference",
            [&ctx](const httplib::Request& req, httplib::Response& res) { post_job(ctx, req, res); });
  auto stream = [&ctx](const httplib::Request& req, httplib::Response& res) {
    auto job = find_job(ctx, req);
    LlmService& service = ctx.need_service();
    const std::string model = ctx.model_name;
    DeviceStats& device = ctx.device;
    LlmJob* raw = job.get();
    const llm::Tokenizer* tok = &service.model().tokenizer();
    stream_job(res, service, job, [raw, model, &device, tok](const JobEvent& ev) {
      return rbee_frames(*raw, model, device, *tok, raw->logprobs, ev);
    });
  };
  http.get(R"(/v1/jobs/([A-Za-z0-9_-]{1,64})/stream)", "/v1/jobs/{id}/stream", stream);
  http.get(R"(/v1/inference/([A-Za-z0-9_-]{1,64})/stream)", "/v1/inference/{id}/stream", stream);
  auto cancel = [&ctx](const httplib::Request& req, httplib::Response& res) {
    auto job = find_job(ctx, req);
    const bool was_finished = job->finished;
    job->cancel();
    send_json(res, 200, {{"job_id", job->id}, {"status", was_finished ? "finished" : "cancelled"}});
  };
  http.del(R"(/v1/jobs/([A-Za-z0-9_-]{1,64}))", "/v1/jobs/{id}", cancel);
  http.del(R"(/v1/inference/([A-Za-z0-9_-]{1,64}))", "/v1/inference/{id}", cancel);
}

void add_page_route(HttpServer& http, std::string_view html) {
  std::string page(html);
  http.get("/", "/", [page](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("Content-Security-Policy",
                   "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'");
    res.set_content(page, "text/html; charset=utf-8");
  });
}

}  // namespace rbee::server::llm_api
