// Channel<T>: hands events from a producer (the scheduler thread, which must never block on a slow client) to
// one consumer (the HTTP thread writing a response). Unbounded: a job's events are bounded by its max_tokens.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

namespace rbee::server {

template <typename T>
class Channel {
 public:
  enum class Pop { Item, Timeout, Closed };

  void push(T item) {
    {
      std::lock_guard lock(mutex_);
      if (closed_) return;
      items_.push_back(std::move(item));
    }
    cv_.notify_all();
  }
  // After close() the consumer drains what is queued, then sees Closed.
  void close() {
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
    }
    cv_.notify_all();
  }
  Pop pop(T& out, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, timeout, [&] { return !items_.empty() || closed_; });
    if (!items_.empty()) {
      out = std::move(items_.front());
      items_.pop_front();
      return Pop::Item;
    }
    return closed_ ? Pop::Closed : Pop::Timeout;
  }
  bool closed() const {
    std::lock_guard lock(mutex_);
    return closed_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<T> items_;
  bool closed_ = false;
};

}  // namespace rbee::server
