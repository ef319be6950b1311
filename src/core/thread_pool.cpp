#include "rbee/core/thread_pool.h"

#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "rbee/core/env.h"
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

// Times this thread was preempted (getrusage: involuntary context switches).
long involuntary_switches() {
  rusage u{};
  return getrusage(RUSAGE_THREAD, &u) == 0 ? u.ru_nivcsw : 0;
}

// Spins briefly, then yields the core while waiting (a waiter must not keep the core from the thread it waits for).
template <typename Pred>
void wait_until(Pred done) {
  for (int spins = 0; !done(); ++spins) {
    if (spins < 2000) RBEE_CPU_RELAX();
    else std::this_thread::yield();
  }
}

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
    job.done.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::worker_loop() {
  t_inside_task = true;
  uint64_t seen = 0;
  // How long this worker spins for the next job before it sleeps. Spinning pays when the cores are ours (kernels
  // come back to back); when other threads want them too, the spinner is preempted (counted by the kernel as an
  // involuntary context switch) and spinning only takes time from whoever does useful work, so the budget halves
  // each time that happened while waiting and grows back while it does not.
  int spin_budget = kSpinIterations;
  long preempted = involuntary_switches();
  unsigned jobs_seen = 0;
  for (;;) {
    uint64_t gen;
    int spins = 0;
    while ((gen = generation_.load(std::memory_order_acquire)) == seen && !stop_.load(std::memory_order_relaxed)) {
      if (++spins < spin_budget) {
        if ((spins & 255) == 0) std::this_thread::yield();  // let a runnable thread of this core have it
        else RBEE_CPU_RELAX();
        continue;
      }
      std::unique_lock<std::mutex> lock(mutex_);
      sleeping_.fetch_add(1);
      wake_.wait(lock, [&] { return generation_.load() != seen || stop_.load(); });
      sleeping_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = gen;
    if ((++jobs_seen & 7) == 0) {  // a system call: every 8th job is often enough to follow the machine's load
      const long now_preempted = involuntary_switches();
      spin_budget = now_preempted > preempted ? spin_budget / 2 : std::min(kSpinIterations, spin_budget * 2 + 64);
      preempted = now_preempted;
    }
    // A job is touched only between active_++ and active_--, and its owner returns only once active_ is 0 after
    // unpublishing it; a worker that comes late (preempted, or still asleep) finds no job or a newer one.
    active_.fetch_add(1, std::memory_order_seq_cst);
    if (Job* job = job_.load(std::memory_order_seq_cst)) work_on(*job);
    active_.fetch_sub(1, std::memory_order_seq_cst);
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
  // Done when every task has run; a worker that has not shown up yet is not waited for (with more threads than
  // free cores it may not run for milliseconds). Then the job is unpublished and the workers inside it leave.
  wait_until([&] { return job.done.load(std::memory_order_acquire) == n_tasks; });
  job_.store(nullptr, std::memory_order_seq_cst);
  wait_until([&] { return active_.load(std::memory_order_seq_cst) == 0; });
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
  if (const std::optional<int64_t> n = env::integer("RBEE_THREADS", 1, 4096)) return (int)*n;
  int cpus = (int)std::max(1u, std::thread::hardware_concurrency());
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = std::max(1, CPU_COUNT(&set));
  std::string cgroup;
  if (FILE* f = std::fopen("/proc/self/cgroup", "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) cgroup.append(buf, n);
    std::fclose(f);
  }
  const int quota = cgroup_cpu_quota(cgroup, "/sys/fs/cgroup");
  return quota > 0 ? std::min(cpus, quota) : cpus;
}

namespace {
std::optional<std::string> read_small_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return std::nullopt;
  char buf[256];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  return std::string(buf, n);
}

// ceil(quota / period) for positive numbers, else 0.
int quota_cpus(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return 0;
  return (int)std::max<long long>(1, (quota + period - 1) / period);
}

// The smallest limit on the way from `dir` (a cgroup folder) up to `root`, read by `limit_in(folder)` (0: none).
template <typename F>
int smallest_limit_up(const std::string& root, std::string path, F limit_in) {
  int best = 0;
  while (true) {
    const int here = limit_in(root + path);
    if (here > 0 && (best == 0 || here < best)) best = here;
    if (path.empty() || path == "/") break;
    const size_t slash = path.find_last_of('/');
    path = slash == 0 || slash == std::string::npos ? "" : path.substr(0, slash);
  }
  return best;
}
}  // namespace

int cgroup_cpu_quota(const std::string& proc_self_cgroup, const std::string& root) {
  int best = 0;
  auto keep = [&](int q) {
    if (q > 0 && (best == 0 || q < best)) best = q;
  };
  size_t start = 0;
  while (start < proc_self_cgroup.size()) {
    const size_t end = std::min(proc_self_cgroup.find('\n', start), proc_self_cgroup.size());
    const std::string line = proc_self_cgroup.substr(start, end - start);
    start = end + 1;
    // "<id>:<controllers>:<path>"; cgroup v2 has id 0 and no controllers.
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    if (!path.empty() && path.back() == '/') path.pop_back();
    if (controllers.empty()) {
      // v2: "<max|quota> <period>" in cpu.max of the process's cgroup and each ancestor.
      keep(smallest_limit_up(root, path, [](const std::string& dir) {
        const auto text = read_small_file(dir + "/cpu.max");
        if (!text) return 0;
        char q[32] = {0};
        long long period = 0;
        if (std::sscanf(text->c_str(), "%31s %lld", q, &period) != 2 || std::string(q) == "max") return 0;
        return quota_cpus(std::atoll(q), period);
      }));
      continue;
    }
    // v1: the cpu controller (alone or with cpuacct), cpu.cfs_quota_us (-1: none) / cpu.cfs_period_us.
    bool has_cpu = false;
    for (size_t i = 0; i <= controllers.size();) {
      const size_t comma = std::min(controllers.find(',', i), controllers.size());
      if (controllers.compare(i, comma - i, "cpu") == 0) has_cpu = true;
      i = comma + 1;
    }
    if (!has_cpu) continue;
    for (const char* mount : {"/cpu", "/cpu,cpuacct", "/cpuacct,cpu"}) {
      keep(smallest_limit_up(root + mount, path, [](const std::string& dir) {
        const auto quota = read_small_file(dir + "/cpu.cfs_quota_us");
        const auto period = read_small_file(dir + "/cpu.cfs_period_us");
        if (!quota || !period) return 0;
        return quota_cpus(std::atoll(quota->c_str()), std::atoll(period->c_str()));
      }));
    }
  }
  return best;
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
