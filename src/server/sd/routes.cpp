#include "server/sd/routes.h"

#include <fmt/format.h>

#include "rbee/core/log.h"
#include "server/api_error.h"
#include "server/event_stream.h"
#include "server/json_fields.h"
#include "server/peer_watch.h"
#include "server/sse.h"

namespace rbee::server::sd_api {

SdService& SdWorkerContext::need_service() {
  SdService* s = service.load();
  if (!s) throw_not_ready(lifecycle);
  return *s;
}

std::string worker_status(SdWorkerContext& ctx) {
  if (ctx.lifecycle.state() != Lifecycle::State::Ready) return ctx.lifecycle.state_name();
  SdService* s = ctx.service.load();
  return s && s->stats().running ? "busy" : "ready";
}

nlohmann::json SdWorkerContext::info() {
  nlohmann::json out = worker_info_common(identity, model_name, model_path, model_ref, device.snapshot());
  out["sd_version"] = sd_version;
  out["sd_version_requested"] = sd_version_requested;
  out["status"] = worker_status(*this);
  out["operations"] = {"image_generation", "image_transform", "image_inpaint"};
  out["samplers"] = sampler_list();
  out["defaults"] = {{"steps", defaults.steps}, {"guidance_scale", defaults.guidance_scale},
                     {"width", defaults.width}, {"height", defaults.height},
                     {"sampler", sd::diffusion_scheduler_kind_name(defaults.sampler)},
                     {"noise", sd::noise_kind_name(defaults.noise)}, {"strength", defaults.strength},
                     {"inpaint_strength", defaults.inpaint_strength}, {"preview_every", defaults.preview_every}};
  if (SdService* s = service.load()) {
    const auto st = s->stats();
    out["queue"] = {{"running", st.running ? 1 : 0}, {"queued", st.queued}, {"max_queued", queue_size},
                    {"images", st.images}};
  }
  return out;
}

namespace {

// One event as the SD SSE contract frames it (named events, one JSON per data line).
std::string sd_frames(const SdEvent& ev) {
  switch (ev.type) {
    case SdEvent::Type::Progress:
      return sse_event("progress", {{"step", ev.step}, {"total", ev.total},
                                    {"percent", ev.total > 0 ? 100.0 * ev.step / ev.total : 0.0}});
    case SdEvent::Type::Preview:
      return sse_event("preview", {{"image", ev.png_base64}, {"format", "png"}, {"step", ev.step}, {"total", ev.total}});
    case SdEvent::Type::Complete:
      return sse_event("complete", {{"image", ev.png_base64}, {"format", "png"}, {"seed", ev.seed},
                                    {"width", ev.width}, {"height", ev.height}, {"seconds", ev.seconds}});
    case SdEvent::Type::Error:
      return sse_event("error", {{"message", ev.message}, {"code", ev.code}});
  }
  return "";
}

std::shared_ptr<SdJob> find_job(SdWorkerContext& ctx, const httplib::Request& req) {
  const std::string id = req.matches[1];
  auto job = ctx.need_service().find(id);
  if (!job) throw job_not_found(id);
  return job;
}

void post_job(SdWorkerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const ImageRequest r = parse_image_job(parse_json_object(req.body), ctx.defaults);
  SdService& service = ctx.need_service();
  check_with_model(r, service.limits());
  auto job = service.submit(r);
  send_json(res, 200, {{"job_id", job->id}, {"sse_url", "/v1/jobs/" + job->id + "/stream"}, {"seed", job->seed}});
}

// OpenAI's images API: blocks until the image is made. The client's connection is watched while it waits
// (PeerWatch): a client that hangs up cancels its job at the next step.
void post_openai_image(SdWorkerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  ImageRequest r = parse_openai_image(parse_json_object(req.body), ctx.defaults);
  r.preview_every = 0;
  SdService& service = ctx.need_service();
  check_with_model(r, service.limits(), /*openai=*/true);
  auto job = service.submit(std::move(r));
  job->consumer_attached = true;
  struct Forget {
    SdService& s;
    const std::string& id;
    ~Forget() { s.forget(id); }
  } forget{service, job->id};
  const PeerWatch peer(req);
  SdEvent ev, last;
  while (true) {
    const auto got = job->events.pop(ev, std::chrono::milliseconds(200));
    if (got == Channel<SdEvent>::Pop::Closed) break;
    if (!job->cancel_requested && peer.peer_closed()) {
      log::info("job={} event=client_disconnected (cancelling)", job->id);
      service.cancel(job);
    }
    if (got == Channel<SdEvent>::Pop::Item && (ev.type == SdEvent::Type::Complete || ev.type == SdEvent::Type::Error)) {
      last = ev;
    }
  }
  if (last.type != SdEvent::Type::Complete) {
    if (last.code == "timeout") throw ApiError(504, "timeout", last.message);
    if (last.code == "cancelled" || last.code == "shutting_down" || last.code == "out_of_memory") {
      throw ApiError(503, last.code, last.message, "", 1);
    }
    throw ApiError(500, "generation_failed", "generation failed: " + last.message);
  }
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  nlohmann::json data = nlohmann::json::array();
  data.push_back({{"b64_json", last.png_base64}, {"revised_prompt", job->request.prompt}, {"seed", last.seed}});
  for (size_t i = 0; i < last.more_png_base64.size(); ++i) {  // n > 1: image i + 1 from seed + i + 1
    data.push_back({{"b64_json", last.more_png_base64[i]}, {"revised_prompt", job->request.prompt},
                    {"seed", last.seed + i + 1}});
  }
  send_json(res, 200, {{"created", now}, {"data", std::move(data)}});
}

}  // namespace

void add_sd_routes(HttpServer& http, SdWorkerContext& ctx) {
  http.get("/info", "/info", [&ctx](const httplib::Request&, httplib::Response& res) { send_json(res, 200, ctx.info()); });
  auto post = [&ctx](const httplib::Request& req, httplib::Response& res) { post_job(ctx, req, res); };
  http.post("/v1/jobs", "/v1/jobs", post);
  http.post("/v1/inference", "/v1/inference", post);
  auto stream = [&ctx](const httplib::Request& req, httplib::Response& res) {
    auto job = find_job(ctx, req);
    SdService& service = ctx.need_service();
    claim_job_stream(*job);
    stream_events<SdEvent>(res, job, job->events, sd_frames, [job, &service](bool completed) {
      if (!completed && !job->finished) {
        log::info("job={} event=client_disconnected (cancelling)", job->id);
        service.cancel(job);
      }
      service.forget(job->id);
    }, [job] { job->stream_drained = true; });
  };
  http.get(R"(/v1/jobs/([A-Za-z0-9_-]{1,64})/stream)", "/v1/jobs/{id}/stream", stream);
  http.get(R"(/v1/inference/([A-Za-z0-9_-]{1,64})/stream)", "/v1/inference/{id}/stream", stream);
  auto cancel = [&ctx](const httplib::Request& req, httplib::Response& res) {
    auto job = find_job(ctx, req);
    const bool was_finished = job->finished;
    ctx.need_service().cancel(job);
    send_json(res, 200, {{"job_id", job->id}, {"status", was_finished ? "finished" : "cancelled"}});
  };
  http.del(R"(/v1/jobs/([A-Za-z0-9_-]{1,64}))", "/v1/jobs/{id}", cancel);
  http.del(R"(/v1/inference/([A-Za-z0-9_-]{1,64}))", "/v1/inference/{id}", cancel);
  http.post("/v1/images/generations", "/v1/images/generations",
            [&ctx](const httplib::Request& req, httplib::Response& res) { post_openai_image(ctx, req, res); });
}

}  // namespace rbee::server::sd_api
