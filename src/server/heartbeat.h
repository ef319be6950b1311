// Heartbeat: POSTs a JSON body to {hive_url}/v1/worker-heartbeat every interval (docs/DESIGN.md section 5) on its own
// thread. Failures (hive down, timeouts, non-2xx) back off exponentially up to max_backoff and are logged once
// per change of state; the worker keeps serving whatever the hive does.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

namespace rbee::server {

struct HeartbeatOptions {
  std::string hive_url;           // "http://host:port" with an optional path prefix
  double interval_s = 5.0;
  double initial_backoff_s = 1.0; // first retry after a failure; doubles per failure
  double max_backoff_s = 30.0;
  double timeout_s = 2.0;         // connect and read timeout of one POST
};

// Splits "http://host:port/prefix" into the scheme-host-port part and the path prefix (no trailing slash).
// Throws Error(InvalidArgument) naming the URL when it is not http(s)://host[:port][/path].
std::pair<std::string, std::string> split_base_url(const std::string& url);

class Heartbeat {
 public:
  using BodyFn = std::function<nlohmann::json()>;
  Heartbeat(HeartbeatOptions options, BodyFn body);
  ~Heartbeat();

  void start();
  // Stops the thread; when `final_body` is given, sends it once (best effort, one attempt).
  void stop(const nlohmann::json* final_body = nullptr);

  uint64_t sent() const { return sent_; }
  uint64_t failures() const { return failures_; }

 private:
  void loop();
  bool send(const nlohmann::json& body);

  HeartbeatOptions options_;
  BodyFn body_;
  std::string base_, path_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::atomic<uint64_t> sent_{0}, failures_{0};
};

}  // namespace rbee::server
