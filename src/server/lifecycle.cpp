#include "server/lifecycle.h"

#include <pthread.h>
#include <signal.h>

#include <cmath>

#include "rbee/core/log.h"

namespace rbee::server {

Lifecycle::~Lifecycle() {
  if (signal_thread_.joinable()) {
    // Still in sigwait: wake it with a signal it waits for; the flag tells it to leave quietly.
    leaving_ = true;
    if (!signal_thread_done_) pthread_kill(signal_thread_.native_handle(), SIGTERM);
    signal_thread_.join();
  }
}

void Lifecycle::set_progress(float fraction) { progress_ = fraction; }
void Lifecycle::set_ready() {
  progress_ = 1.0f;
  state_ = State::Ready;
}
void Lifecycle::set_failed(const std::string& reason) {
  std::lock_guard lock(mutex_);
  failure_ = reason;
  state_ = State::Failed;
}
void Lifecycle::set_draining() { state_ = State::Draining; }

const char* Lifecycle::state_name() const {
  switch (state_.load()) {
    case State::Loading: return "loading";
    case State::Ready: return "ready";
    case State::Failed: return "failed";
    case State::Draining: return "draining";
  }
  return "loading";
}

nlohmann::json Lifecycle::ready_body(int& status) const {
  if (state_ == State::Ready) {
    status = 200;
    return {{"ready", true}};
  }
  status = 503;
  nlohmann::json body = {{"ready", false}, {"reason", state_name()}};
  if (state_ == State::Loading) body["progress"] = (double)std::round(progress_.load() * 1000.0f) / 1000.0;
  if (state_ == State::Failed) {
    std::lock_guard lock(mutex_);
    body["message"] = failure_;
  }
  return body;
}

void Lifecycle::install_signal_handlers() {
  signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal_thread_ = std::thread([this, set] {
    while (true) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      if (leaving_) break;
      log::info("event=signal signal={} (graceful shutdown)", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      request_shutdown();
      break;
    }
    signal_thread_done_ = true;
  });
}

void Lifecycle::request_shutdown() {
  {
    std::lock_guard lock(mutex_);
    shutdown_ = true;
  }
  cv_.notify_all();
}

void Lifecycle::wait_for_shutdown() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return shutdown_.load(); });
}

}  // namespace rbee::server
