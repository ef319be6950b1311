#include "llm/models/rank_threads.h"

namespace rbee::llm {

RankThreads::RankThreads(int ranks) : ranks_(ranks) {
  for (int r = 1; r < ranks_; ++r) threads_.emplace_back([this, r] { worker(r); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  start_.notify_all();
  for (auto& t : threads_) t.join();
}

void RankThreads::failed(std::exception_ptr e, const std::string& what) {
  bool first = false;
  {
    std::lock_guard lock(mutex_);
    if (!error_) {
      error_ = e;
      first = true;
    }
  }
  if (first && on_error_ && *on_error_) (*on_error_)(what);
}

void RankThreads::worker(int rank) {
  uint64_t seen = 0;
  while (true) {
    const std::function<void(int)>* fn = nullptr;
    {
      std::unique_lock lock(mutex_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
    }
    try {
      (*fn)(rank);
    } catch (const std::exception& e) {
      failed(std::current_exception(), e.what());
    } catch (...) {
      failed(std::current_exception(), "unknown error");
    }
    {
      std::lock_guard lock(mutex_);
      --pending_;
    }
    done_.notify_all();
  }
}

void RankThreads::run(const std::function<void(int)>& fn, const std::function<void(const std::string&)>& on_error) {
  {
    std::lock_guard lock(mutex_);
    fn_ = &fn;
    on_error_ = &on_error;
    error_ = nullptr;
    pending_ = ranks_ - 1;
    ++generation_;
  }
  start_.notify_all();
  try {
    fn(0);
  } catch (const std::exception& e) {
    failed(std::current_exception(), e.what());
  } catch (...) {
    failed(std::current_exception(), "unknown error");
  }
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    error = error_;
    fn_ = nullptr;
    on_error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace rbee::llm
