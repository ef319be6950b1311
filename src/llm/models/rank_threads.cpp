#include "llm/models/rank_threads.h"

#include <chrono>

#include "rbee/core/step_times.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace rbee::llm {

namespace {

// A CPU hint that this is a spin loop (frees the core's shared resources for its sibling hyper-thread).
inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Step-time rows of the ranks' wake-up latency (string literals, as step_times wants).
const char* wake_row(int rank) {
  static const char* const rows[] = {"rank 0 woken",         "rank 1 woken (after run)", "rank 2 woken (after run)",
                                     "rank 3 woken (after run)", "rank 4 woken (after run)", "rank 5 woken (after run)",
                                     "rank 6 woken (after run)", "rank 7 woken (after run)"};
  return rank >= 0 && rank < 8 ? rows[rank] : "rank 8+ woken (after run)";
}

}  // namespace

RankThreads::RankThreads(int ranks, int64_t spin_us) : ranks_(ranks), spin_us_(spin_us < 0 ? 0 : spin_us) {
  for (int r = 1; r < ranks_; ++r) threads_.emplace_back([this, r] { worker(r); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard lock(mutex_);
    stop_.store(true);
  }
  start_.notify_all();
  for (auto& t : threads_) t.join();
}

template <typename Done>
bool RankThreads::spin(const Done& done) const {
  if (spin_us_ <= 0) return done();
  using Clock = std::chrono::steady_clock;
  const auto until = Clock::now() + std::chrono::microseconds(spin_us_);
  for (int i = 1;; ++i) {
    if (done()) return true;
    spin_pause();
    if (i % 256 == 0 && Clock::now() >= until) return done();
  }
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
    auto started = [&] { return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen; };
    if (!spin(started)) {
      std::unique_lock lock(mutex_);
      start_.wait(lock, started);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    const std::function<void(int)>* fn = fn_;
    if (step_times::enabled()) step_times::add(wake_row(rank), step_times::now() - started_at_);
    try {
      (*fn)(rank);
    } catch (const std::exception& e) {
      failed(std::current_exception(), e.what());
    } catch (...) {
      failed(std::current_exception(), "unknown error");
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // The last rank: wake run() if it sleeps (the lock orders this notify after its predicate check).
      std::lock_guard lock(mutex_);
      done_.notify_all();
    }
  }
}

void RankThreads::run(const std::function<void(int)>& fn, const std::function<void(const std::string&)>& on_error) {
  {
    std::lock_guard lock(mutex_);
    fn_ = &fn;
    on_error_ = &on_error;
    error_ = nullptr;
    pending_.store(ranks_ - 1, std::memory_order_relaxed);
    if (step_times::enabled()) started_at_ = step_times::now();
    generation_.fetch_add(1, std::memory_order_release);
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
    step_times::Phase phase("rank 0 waits for the other ranks");
    auto finished = [&] { return pending_.load(std::memory_order_acquire) == 0; };
    if (!spin(finished)) {
      std::unique_lock lock(mutex_);
      done_.wait(lock, finished);
    }
  }
  {
    std::lock_guard lock(mutex_);
    error = error_;
    fn_ = nullptr;
    on_error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace rbee::llm
