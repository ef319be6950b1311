#include "rbee/core/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include "rbee/core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RBEE_CPU_RELAX() _mm_pause()
#else
#define RBEE_CPU_RELAX() std::this_thread::yield()
#endif

namespace rbee {

namespace {
thread_local bool t_inside_task = false;
// Spin iterations (each a pause, tens of nanoseconds) before a worker sleeps: decode loops launch kernels
// back to back, and a sleeping worker costs tens of microseconds to wake.
constexpr int kSpinIterations = 20000;

std::unique_ptr<ThreadPool>& global_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
std::mutex& global_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace

ThreadPool::ThreadPool(int threads) {
  RBEE_CHECK(threads >= 1, "thread count must be at least 1, got {}", threads);
  workers_.reserve((size_t)threads - 1);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work_on(Job& job) {
  for (;;) {
    const int64_t i = job.next.fetch_add(1, std::memory_order_relaxed);
    if (i >= job.n_tasks) break;
    try {
      (*job.fn)(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(job.error_mutex);
      if (!job.error) job.error = std::current_exception();
    }
  }
}

void ThreadPool::worker_loop() {
  t_inside_task = true;
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen;
    int spins = 0;
    while ((gen = generation_.load(std::memory_order_acquire)) == seen && !stop_.load(std::memory_order_relaxed)) {
      if (++spins < kSpinIterations) {
        RBEE_CPU_RELAX();
        continue;
      }
      std::unique_lock<std::mutex> lock(mutex_);
      sleeping_.fetch_add(1);
      wake_.wait(lock, [&] { return generation_.load() != seen || stop_.load(); });
      sleeping_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = gen;
    Job* job = job_.load(std::memory_order_acquire);
    work_on(*job);
    job->done.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(int64_t n_tasks, FunctionRef<void(int64_t)> fn) {
  if (n_tasks <= 0) return;
  if (n_tasks == 1 || workers_.empty() || t_inside_task) {
    for (int64_t i = 0; i < n_tasks; ++i) fn(i);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mutex_);
  Job job;
  job.fn = &fn;
  job.n_tasks = n_tasks;
  job_.store(&job, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  if (sleeping_.load() > 0) wake_.notify_all();

  t_inside_task = true;
  work_on(job);
  t_inside_task = false;
  // Every worker takes part in every job, so the job (on this stack) is dead only after all have left it.
  const int64_t workers = (int64_t)workers_.size();
  while (job.done.load(std::memory_order_acquire) != workers) RBEE_CPU_RELAX();
  job_.store(nullptr, std::memory_order_relaxed);
  if (job.error) std::rethrow_exception(job.error);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = std::max<int64_t>(1, (int64_t)size() * 4);
  const int64_t chunks = std::min<int64_t>((n + grain - 1) / grain, max_chunks);
  const int64_t per = (n + chunks - 1) / chunks;
  run(chunks, [&](int64_t c) {
    const int64_t begin = c * per;
    const int64_t end = std::min(n, begin + per);
    if (begin < end) fn(begin, end);
  });
}

int ThreadPool::default_threads() {
  if (const char* env = std::getenv("RBEE_THREADS")) {
    const int n = std::atoi(env);
    RBEE_CHECK(n >= 1, "RBEE_THREADS must be a positive integer, got '{}'", env);
    return n;
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool& ThreadPool::global() {
  std::lock_guard<std::mutex> lock(global_mutex());
  auto& slot = global_slot();
  if (!slot) slot = std::make_unique<ThreadPool>(default_threads());
  return *slot;
}

void ThreadPool::set_global_threads(int threads) {
  std::lock_guard<std::mutex> lock(global_mutex());
  global_slot() = std::make_unique<ThreadPool>(threads);
}

}  // namespace rbee
