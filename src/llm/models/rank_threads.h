// RankThreads: one host thread per tensor-parallel rank (the caller's thread is rank 0). Collectives
// (rbee/backend/communicator.h) need every rank's calls to be in flight together, so each rank's part of a step
// runs on its own thread; the threads persist between steps.
//
// Hand-over: a waiting thread (a rank for the next step, rank 0 for the others to finish) first spins on an atomic
// for up to `spin_us` microseconds, then sleeps on a condition variable. On GPUs a rank's part of a step only
// launches work, so the thread that wakes it up is on the critical path of every step: a condition variable's
// wake-up costs tens of microseconds on a busy or virtualized host, a spin about one. Spinning keeps one core busy
// per extra rank while steps follow each other (and for spin_us after the last), so CPU ranks, whose cores compute,
// pass 0 (always sleep).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace rbee::llm {

class RankThreads {
 public:
  explicit RankThreads(int ranks, int64_t spin_us = 0);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  // Runs fn(r) for every rank r (rank 0 on the calling thread) and returns when all have returned. When a rank
  // throws, on_error(message) is called once at once (e.g. to abort the communicator, so that ranks waiting in a
  // collective wake up), and the first exception is rethrown after every rank has returned.
  void run(const std::function<void(int)>& fn, const std::function<void(const std::string&)>& on_error);

  int64_t spin_us() const { return spin_us_; }

 private:
  void worker(int rank);
  void failed(std::exception_ptr e, const std::string& what);
  // Spins until done() or spin_us_ passed; returns done().
  template <typename Done>
  bool spin(const Done& done) const;

  int ranks_;
  int64_t spin_us_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable start_, done_;
  // Written by run() before it advances generation_ (release); read by the workers after they see it (acquire).
  const std::function<void(int)>* fn_ = nullptr;
  const std::function<void(const std::string&)>* on_error_ = nullptr;
  double started_at_ = 0;  // step_times::now() when run() advanced generation_ (RBEE_STEP_TIMES: wake-up latency)
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
};

}  // namespace rbee::llm
