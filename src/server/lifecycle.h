// Lifecycle: readiness while the model loads (/ready), and shutdown on SIGTERM/SIGINT.
//
// install_signal_handlers() blocks SIGTERM and SIGINT in the calling thread (call it in main before starting any
// thread, so every thread inherits the mask) and waits for them on a dedicated thread with sigwait(); it also
// ignores SIGPIPE, so a client that hangs up shows as a failed write instead of killing the process.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

namespace rbee::server {

class Lifecycle {
 public:
  enum class State { Loading, Ready, Failed, Draining };

  ~Lifecycle();

  void set_progress(float fraction);  // 0..1 while loading
  void set_ready();
  void set_failed(const std::string& reason);
  void set_draining();
  State state() const { return state_; }
  bool ready() const { return state_ == State::Ready; }

  // /ready's status and body: 200 {"ready":true} or 503 {"ready":false,"reason","progress"}.
  nlohmann::json ready_body(int& status) const;
  // "loading", "ready", "failed", "draining"
  const char* state_name() const;

  void install_signal_handlers();
  void request_shutdown();
  bool shutdown_requested() const { return shutdown_; }
  // Blocks until SIGTERM/SIGINT or request_shutdown().
  void wait_for_shutdown();

 private:
  std::atomic<State> state_{State::Loading};
  std::atomic<float> progress_{0};
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::string failure_;
  std::atomic<bool> shutdown_{false};
  std::atomic<bool> leaving_{false}, signal_thread_done_{false};
  std::thread signal_thread_;
};

}  // namespace rbee::server
