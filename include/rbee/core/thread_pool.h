// ThreadPool: fork-join parallelism for CPU kernels.
//
// run(n, fn) calls fn(i) for every i in [0, n) on the pool's threads plus the calling thread and returns when
// all calls are done. Work is claimed dynamically (an atomic counter), so uneven tasks balance themselves.
// Workers spin briefly between jobs (kernels come back to back in a decode loop) and then sleep; a worker that
// gets preempted while spinning (other processes want the cores) spins less, down to sleeping at once.
// run() returns when every task has run; it never waits for a worker that has not shown up (with more threads than
// free cores a worker may not run for milliseconds, and waiting for each on every op made a busy machine 10-70x
// slower than one thread).
// A call made from inside a task runs serially on that thread (no nested parallelism, no deadlock).
// The first exception thrown by a task is rethrown by run() after every task has finished.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rbee/core/function_ref.h"

namespace rbee {

class ThreadPool {
 public:
  // threads: total threads taking part, the caller included (>= 1).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return (int)workers_.size() + 1; }

  void run(int64_t n_tasks, FunctionRef<void(int64_t)> fn);

  // Splits [0, n) into contiguous chunks of at least `grain` items and calls fn(begin, end) for each.
  void parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn);

  // The pool kernels use. Created on first use with default_threads() threads.
  static ThreadPool& global();
  // Replaces the global pool (call before kernels run, e.g. from --threads).
  static void set_global_threads(int threads);
  // RBEE_THREADS if set, else the number of CPUs this process may run on (affinity), capped by its cgroup's CPU
  // quota (cpu.max, or cpu.cfs_quota_us / cpu.cfs_period_us), rounded up: a container limited to 2 CPUs on a
  // 64-core host runs 2 threads, not 64 that the quota throttles.
  static int default_threads();

 private:
  struct Job {
    FunctionRef<void(int64_t)>* fn = nullptr;
    int64_t n_tasks = 0;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    std::mutex error_mutex;
    std::exception_ptr error;
  };
  void worker_loop();
  void work_on(Job& job);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<Job*> job_{nullptr};
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> active_{0};  // workers inside the published job
  std::mutex run_mutex_;  // one job at a time
};

// The CPUs a cgroup CPU quota allows (ceil(quota / period), the smallest over the process's cgroup and its
// ancestors), or 0 when there is none. proc_self_cgroup: the text of /proc/self/cgroup; root: where the cgroup
// file systems are mounted ("/sys/fs/cgroup"; v2 at the root, v1 controllers in "cpu" or "cpu,cpuacct").
int cgroup_cpu_quota(const std::string& proc_self_cgroup, const std::string& root);

}  // namespace rbee
