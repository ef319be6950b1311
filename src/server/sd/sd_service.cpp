#include "server/sd/sd_service.h"

#include <random>

#include <fmt/format.h>

#include "rbee/core/error.h"
#include "rbee/core/log.h"
#include "rbee/sd/parameters.h"
#include "rbee/sd/png.h"
#include "server/api_error.h"
#include "server/base64.h"
#include "server/util.h"

namespace rbee::server::sd_api {

namespace {
int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The mask image as the pipeline takes it: [1, 1, H, W], 1 where the red channel is at least half (repaint), else
// 0 (keep); diffusers binarises its mask at 0.5 the same way.
Tensor mask_tensor(const sd::Image& mask, Device& device) {
  std::vector<float> v((size_t)mask.width * (size_t)mask.height);
  for (size_t p = 0; p < v.size(); ++p) v[p] = mask.rgb[p * 3] >= 128 ? 1.0f : 0.0f;
  return Tensor::from_vector(v, {1, 1, mask.height, mask.width}, device);
}
}  // namespace

void describe_sd_metrics(Metrics& m) {
  m.describe_gauge("rbee_queue_depth", "Image jobs waiting for the device.");
  m.describe_gauge("rbee_running_jobs", "Image jobs on the device (0 or 1).");
  m.describe_counter("rbee_jobs_total", "Image jobs by operation and outcome (complete, cancelled, error).");
  m.describe_counter("rbee_images_total", "Images generated.");
  m.describe_histogram("rbee_image_seconds", "Seconds per image (device time, not counting the queue).",
                       {0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 40, 80, 160});
  m.describe_histogram("rbee_step_seconds", "Seconds per denoising step.",
                       {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5});
  m.describe_histogram("rbee_batch_jobs", "Jobs run together in one UNet batch (queued text-to-image jobs of one size).",
                       {1, 2, 3, 4, 8, 16});
  m.describe_histogram("rbee_queue_seconds", "Seconds a job waited before the device took it.",
                       {0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 120});
}

SdService::SdService(const sd::Pipeline& pipeline, Metrics& metrics, ServiceOptions options)
    : pipeline_(pipeline), metrics_(metrics), options_(std::move(options)) {
  thread_ = std::thread([this] { loop(); });
}

SdService::~SdService() { drain(std::chrono::milliseconds(0)); }

std::shared_ptr<SdJob> SdService::submit(ImageRequest request) {
  collect_garbage();
  uint64_t seed = 0;
  if (request.seed) {
    seed = *request.seed;
  } else {
    std::random_device rd;
    seed = ((uint64_t)rd() << 32 | rd()) & (uint64_t)INT64_MAX;  // reported back; fits a JSON integer of any client
  }
  auto job = std::make_shared<SdJob>(random_id("img"), std::move(request), seed);
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw ApiError(503, "shutting_down", "the worker is shutting down", "", 5);
    if ((int)queue_.size() >= options_.queue_size) {
      throw ApiError(429, "queue_full",
                     fmt::format("the queue is full ({} jobs waiting); retry later", options_.queue_size), "",
                     options_.retry_after_s);
    }
    queue_.push_back(job);
    jobs_[job->id] = job;
  }
  cv_.notify_all();
  const ImageRequest& r = job->request;
  log::info("job={} event=submitted operation={} size={}x{} steps={} sampler={} guidance={} seed={}", job->id,
            operation_name(r.operation), r.width, r.height, r.steps, sd::diffusion_scheduler_kind_name(r.sampler),
            r.guidance_scale, seed);
  return job;
}

std::shared_ptr<SdJob> SdService::find(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second;
}

void SdService::forget(const std::string& id) {
  std::lock_guard lock(mutex_);
  jobs_.erase(id);
}

size_t SdService::streaming() const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  // A reader forgets its job when its response is over, so every attached job left is still being written.
  for (const auto& [id, job] : jobs_) n += job->consumer_attached ? 1 : 0;
  return n;
}

SdService::Stats SdService::stats() const {
  std::lock_guard lock(mutex_);
  return {(int)queue_.size(), !running_.empty(), images_};
}

void SdService::cancel(const std::shared_ptr<SdJob>& job) {
  job->cancel_requested = true;
  bool was_queued = false;
  {
    std::lock_guard lock(mutex_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (*it == job) {
        queue_.erase(it);
        was_queued = true;
        break;
      }
    }
  }
  if (was_queued) {
    SdEvent ev;
    ev.type = SdEvent::Type::Error;
    ev.code = "cancelled";
    ev.message = "the job was cancelled before it started";
    finish(*job, ev);
  }
}

void SdService::finish(SdJob& job, SdEvent last) {
  const char* outcome = last.type == SdEvent::Type::Complete ? "complete" : last.code == "cancelled" ? "cancelled" : "error";
  metrics_.add("rbee_jobs_total", 1, {{"operation", operation_name(job.request.operation)}, {"outcome", outcome}});
  if (last.type == SdEvent::Type::Error) {
    log::info("job={} event=finished outcome={} code={} message=\"{}\"", job.id, outcome, last.code, last.message);
  }
  job.events.push(std::move(last));
  job.finished_at_ms = steady_ms();
  job.finished = true;
  job.events.close();
}

void SdService::drain(std::chrono::milliseconds grace) {
  const auto deadline = std::chrono::steady_clock::now() + grace;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  // Queued jobs were accepted (the client holds a job id and maybe an open stream): the device thread keeps running
  // the queue down while the grace period lasts.
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard lock(mutex_);
      if (queue_.empty() && running_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Past the grace: what is still queued ends without starting, the running job at its next step.
  std::deque<std::shared_ptr<SdJob>> queued;
  std::vector<std::shared_ptr<SdJob>> running;
  {
    std::lock_guard lock(mutex_);
    queued.swap(queue_);
    running = running_;
  }
  for (auto& job : queued) {
    job->cancel_requested = true;
    SdEvent ev;
    ev.type = SdEvent::Type::Error;
    ev.code = "shutting_down";
    ev.message = "the worker is shutting down; the job did not start within the grace period";
    finish(*job, ev);
  }
  for (auto& job : running) job->cancel_requested = true;
  {
    std::lock_guard lock(mutex_);
    exit_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SdService::loop() {
  while (true) {
    std::vector<std::shared_ptr<SdJob>> jobs;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return exit_ || !queue_.empty(); });
      if (queue_.empty()) return;
      std::shared_ptr<SdJob> head = queue_.front();
      queue_.pop_front();
      jobs = take_batch(std::move(head));
      running_ = jobs;
    }
    for (const auto& job : jobs) metrics_.observe("rbee_queue_seconds", seconds_since(job->created));
    metrics_.observe("rbee_batch_jobs", (double)jobs.size());
    run_jobs(jobs);
    {
      std::lock_guard lock(mutex_);
      running_.clear();
    }
  }
}

std::vector<std::shared_ptr<SdJob>> SdService::take_batch(std::shared_ptr<SdJob> head) {
  std::vector<std::shared_ptr<SdJob>> jobs{std::move(head)};
  const ImageRequest& h = jobs[0]->request;
  if (options_.batch_images <= 1 || h.operation != Operation::Generate) return jobs;
  const sd::GenerateRequest lead = to_generate_request(h, jobs[0]->seed);
  int images = h.n;
  for (auto it = queue_.begin(); it != queue_.end() && images < options_.batch_images;) {
    const ImageRequest& r = (*it)->request;
    if (r.operation == Operation::Generate && images + r.n <= options_.batch_images &&
        sd::Pipeline::can_share_batch(lead, to_generate_request(r, (*it)->seed))) {
      images += r.n;
      jobs.push_back(*it);
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  return jobs;
}

void SdService::run_jobs(const std::vector<std::shared_ptr<SdJob>>& jobs) {
  const size_t n = jobs.size();
  const auto started = std::chrono::steady_clock::now();
  std::vector<sd::GenerateRequest> gs;
  // Per job: ended (its error already sent: dropped from the batch), ran past its deadline.
  std::vector<char> ended(n, 0), timed_out(n, 0);
  std::vector<std::chrono::steady_clock::time_point> deadlines, last_steps(n, started);
  auto error_event = [&](size_t j, ErrorCode code, const std::string& message) {
    SdEvent ev;
    ev.type = SdEvent::Type::Error;
    if (timed_out[j]) {
      ev.code = "timeout";
      ev.message = fmt::format("the job ran past the worker's time limit of {} s", options_.request_timeout_s);
    } else if (code == ErrorCode::Cancelled) {
      ev.code = "cancelled";
      ev.message = "the job was cancelled (DELETE, client disconnect or worker shutdown)";
    } else {
      ev.code = code == ErrorCode::OutOfMemory ? "out_of_memory" : "generation_failed";
      ev.message = message;
      log::error("job={} event=generation_failed error=\"{}\"", jobs[j]->id, message);
    }
    return ev;
  };
  for (size_t j = 0; j < n; ++j) {
    SdJob& job = *jobs[j];
    const ImageRequest& r = job.request;
    deadlines.push_back(job.created + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                          std::chrono::duration<double>(options_.request_timeout_s)));
    sd::GenerateRequest g = to_generate_request(r, job.seed);
    g.on_step = [&, j](int step, int total) {
      SdJob& jb = *jobs[j];
      if (ended[j]) return false;  // cancelled before the batch started: its error is out
      const auto now = std::chrono::steady_clock::now();
      metrics_.observe("rbee_step_seconds", std::chrono::duration<double>(now - last_steps[j]).count());
      last_steps[j] = now;
      SdEvent ev;
      ev.type = SdEvent::Type::Progress;
      ev.step = step;
      ev.total = total;
      jb.events.push(std::move(ev));
      if (now > deadlines[j]) timed_out[j] = 1;
      if (!jb.cancel_requested && !timed_out[j]) return true;
      // Dropped from the batch: its error now, while the others go on.
      ended[j] = 1;
      finish(jb, error_event(j, ErrorCode::Cancelled, ""));
      return false;
    };
    g.on_latents = [&, j](int step, int total, const Tensor& latents) {
      SdJob& jb = *jobs[j];
      const ImageRequest& rq = jb.request;
      if (gs[j].batch > 1 || rq.preview_every <= 0 || step % rq.preview_every != 0 || step == total ||
          jb.cancel_requested)
        return;
      SdEvent ev;
      ev.type = SdEvent::Type::Preview;
      ev.step = step;
      ev.total = total;
      ev.png_base64 = base64_encode(sd::encode_png(sd::Pipeline::to_image(pipeline_.decode(latents))));
      jb.events.push(std::move(ev));
      last_steps[j] = std::chrono::steady_clock::now();  // the decode is not step time
    };
    gs.push_back(std::move(g));
  }
  if (n > 1) {
    std::string ids;
    int images = 0;
    for (size_t j = 0; j < n; ++j) {
      ids += (j ? "," : "") + jobs[j]->id;
      images += gs[j].batch;
    }
    log::info("event=batched jobs={} images={}", ids, images);
  }
  std::vector<std::vector<sd::Image>> results;
  try {
    for (size_t j = 0; j < n; ++j) {
      if (jobs[j]->cancel_requested) {
        ended[j] = 1;
        finish(*jobs[j], error_event(j, ErrorCode::Cancelled, ""));
      }
    }
    bool any = false;
    for (size_t j = 0; j < n; ++j) any = any || !ended[j];
    if (!any) return;
    if (n == 1) {
      const ImageRequest& r = jobs[0]->request;
      sd::GenerateRequest& g = gs[0];
      if (r.operation != Operation::Generate) g.init_image = pipeline_.from_image(r.init_image);
      if (r.operation == Operation::Inpaint) g.mask = mask_tensor(r.mask, pipeline_.device());
      results.push_back(g.batch > 1 ? pipeline_.generate_batch(g) : std::vector<sd::Image>{pipeline_.generate(g)});
    } else {
      // Jobs that ended before the start keep their rows (they stop at their first step).
      results = pipeline_.generate_group(gs);
    }
  } catch (const Error& e) {
    for (size_t j = 0; j < n; ++j) {
      if (!ended[j]) finish(*jobs[j], error_event(j, e.code(), e.message()));
    }
    return;
  } catch (const std::exception& e) {
    for (size_t j = 0; j < n; ++j) {
      if (!ended[j]) finish(*jobs[j], error_event(j, ErrorCode::Internal, e.what()));
    }
    return;
  }
  for (size_t j = 0; j < n; ++j) {
    if (ended[j]) continue;
    SdJob& job = *jobs[j];
    const std::vector<sd::Image>& images = results[j];
    SdEvent last;
    try {
      for (size_t i = 0; i < images.size(); ++i) {
        sd::GenerateRequest gi = gs[j];  // image i's parameters: its own seed
        gi.seed = gs[j].seed + i;
        gi.batch = 1;
        std::string png = base64_encode(
            sd::encode_png(images[i], {{"parameters", sd::generation_parameters(gi, options_.model_name)}}));
        if (i == 0) last.png_base64 = std::move(png);
        else last.more_png_base64.push_back(std::move(png));
      }
    } catch (const std::exception& e) {
      finish(job, error_event(j, ErrorCode::Internal, e.what()));
      continue;
    }
    const sd::Image& image = images.front();
    last.type = SdEvent::Type::Complete;
    last.seed = job.seed;
    last.width = image.width;
    last.height = image.height;
    last.seconds = seconds_since(started);
    metrics_.add("rbee_images_total", (double)images.size());
    metrics_.observe("rbee_image_seconds", last.seconds);
    {
      std::lock_guard lock(mutex_);
      images_ += images.size();
    }
    log::info("job={} event=finished outcome=complete seconds={:.3f} it_per_s={:.2f}", job.id, last.seconds,
              job.request.steps / std::max(last.seconds, 1e-9));
    finish(job, std::move(last));
  }
}

void SdService::collect_garbage() {
  const int64_t now = steady_ms(), ttl = (int64_t)(options_.job_ttl_s * 1000);
  std::lock_guard lock(mutex_);
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const SdJob& j = *it->second;
    if (j.finished && !j.consumer_attached && now - j.finished_at_ms > ttl) it = jobs_.erase(it);
    else ++it;
  }
}

}  // namespace rbee::server::sd_api
