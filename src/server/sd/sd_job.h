// SdJob: one image job as the HTTP side sees it. The service's device thread pushes its events (progress after
// every step, a preview every few steps, then complete or error) into a Channel that the one HTTP thread
// streaming the job (SSE) or waiting for it (OpenAI images) reads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "server/sd/requests.h"
#include "server/channel.h"

namespace rbee::server::sd_api {

struct SdEvent {
  enum class Type { Progress, Preview, Complete, Error };
  Type type = Type::Progress;
  int step = 0, total = 0;  // Progress, Preview
  std::string png_base64;   // Preview, Complete (the first image of a batch)
  std::vector<std::string> more_png_base64;  // Complete: images 2 .. n of a request with n > 1 (seeds seed + i)
  uint64_t seed = 0;        // Complete
  int width = 0, height = 0;
  double seconds = 0;       // Complete: generation time (not counting the queue)
  std::string code, message;  // Error: "cancelled", "generation_failed", "shutting_down", "timeout"
};

class SdJob {
 public:
  SdJob(std::string id, ImageRequest request, uint64_t seed)
      : id(std::move(id)), request(std::move(request)), seed(seed), created(std::chrono::steady_clock::now()) {}

  const std::string id;
  const ImageRequest request;
  const uint64_t seed;  // the request's, or the one the worker drew
  const std::chrono::steady_clock::time_point created;
  Channel<SdEvent> events;
  std::atomic<bool> cancel_requested{false};   // DELETE, a client that went away, shutdown
  std::atomic<bool> consumer_attached{false};  // only one reader: the first stream or wait wins
  std::atomic<bool> stream_drained{false};     // its reader has taken every event: the job is as good as gone
  std::atomic<bool> finished{false};
  std::atomic<int64_t> finished_at_ms{0};      // steady-clock ms, for the service's time-to-live
};

}  // namespace rbee::server::sd_api
