// RankThreads: one host thread per tensor-parallel rank (the caller's thread is rank 0). Collectives
// (rbee/backend/communicator.h) need every rank's calls to be in flight together, so each rank's part of a step
// runs on its own thread; the threads persist between steps.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace rbee::llm {

class RankThreads {
 public:
  explicit RankThreads(int ranks);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  // Runs fn(r) for every rank r (rank 0 on the calling thread) and returns when all have returned. When a rank
  // throws, on_error(message) is called once at once (e.g. to abort the communicator, so that ranks waiting in a
  // collective wake up), and the first exception is rethrown after every rank has returned.
  void run(const std::function<void(int)>& fn, const std::function<void(const std::string&)>& on_error);

 private:
  void worker(int rank);
  void failed(std::exception_ptr e, const std::string& what);

  int ranks_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* fn_ = nullptr;
  const std::function<void(const std::string&)>* on_error_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace rbee::llm
