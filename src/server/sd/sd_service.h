// SdService: runs image jobs on the device one batch at a time (an SD step uses the whole device; running two
// would only split it), from a bounded FIFO queue: a job submitted while `queue_size` jobs wait gets 429 with
// Retry-After. The job at the head of the queue goes first; text-to-image jobs already queued behind it with the
// same size, steps, sampler, guidance and noise join it in one UNet batch (sd::Pipeline::generate_group), up to
// `batch_images` images together. Nothing waits for more jobs to come: an empty queue starts the head alone. Each
// job's images equal the ones it makes alone (its seeds, its prompt); a job cancelled or timed out inside a batch
// gets its error at once and the others go on. The device thread turns each job into a GenerateRequest, sends progress after every step and a
// preview every `preview_every` steps (the current latent x_t decoded by the VAE: noisy early on, the image at
// the end; at 256x256 a decode costs about one UNet step), then the PNG (with its parameters chunk) and seed.
// Cancelling (DELETE, a client that hangs up, shutdown) takes effect at the next step through on_step.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "rbee/sd/pipeline.h"
#include "server/sd/sd_job.h"
#include "server/metrics.h"

namespace rbee::server::sd_api {

struct ServiceOptions {
  std::string model_name;         // in the PNG parameters
  int queue_size = 8;             // jobs waiting at most (the running one not counted)
  int retry_after_s = 5;          // Retry-After of a 429
  double request_timeout_s = 600; // a job still running then is cancelled with error "timeout"
  double job_ttl_s = 120;         // a finished job nobody read is forgotten after this
  int batch_images = 4;           // images one batch of queued jobs holds at most (1: one job at a time)
};

// Registers the metric families the service reports into.
void describe_sd_metrics(Metrics& metrics);

class SdService {
 public:
  SdService(const sd::Pipeline& pipeline, Metrics& metrics, ServiceOptions options);
  ~SdService();

  // Queues the job; ApiError 429 (queue full) or 503 (shutting down).
  std::shared_ptr<SdJob> submit(ImageRequest request);
  std::shared_ptr<SdJob> find(const std::string& id);
  void forget(const std::string& id);
  // Cancels a queued job at once (error event "cancelled") or a running one at its next step.
  void cancel(const std::shared_ptr<SdJob>& job);

  // Refuses new jobs, lets the running and the queued (already accepted) ones run for up to `grace`, then cancels
  // what is left (queued ones end with "shutting_down" without starting); returns once the device thread stopped.
  void drain(std::chrono::milliseconds grace);

  struct Stats {
    int queued = 0;
    bool running = false;
    uint64_t images = 0;
  };
  Stats stats() const;
  const ServiceOptions& options() const { return options_; }
  const sd::ModelLimits& limits() const { return pipeline_.limits(); }
  // Jobs an HTTP thread is still reading (streams not yet closed).
  size_t streaming() const;

 private:
  void loop();
  // Runs jobs (the head of the queue first) as one batch; each ends with its own Complete or Error event.
  void run_jobs(const std::vector<std::shared_ptr<SdJob>>& jobs);
  // Takes the jobs of the queue that can join `head`'s batch (lock held).
  std::vector<std::shared_ptr<SdJob>> take_batch(std::shared_ptr<SdJob> head);
  void finish(SdJob& job, SdEvent last);
  void collect_garbage();

  const sd::Pipeline& pipeline_;
  Metrics& metrics_;
  ServiceOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<SdJob>> queue_;
  std::vector<std::shared_ptr<SdJob>> running_;  // the batch on the device
  std::unordered_map<std::string, std::shared_ptr<SdJob>> jobs_;
  bool stopping_ = false;   // no new jobs
  bool exit_ = false;       // the device thread leaves when the queue is empty
  uint64_t images_ = 0;
  std::thread thread_;
};

}  // namespace rbee::server::sd_api
