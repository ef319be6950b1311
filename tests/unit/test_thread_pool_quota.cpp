// The default thread count follows the process's cgroup CPU quota (issue 13: a container limited to a few CPUs ran
// one thread per host CPU, which the quota then throttled). cgroup_cpu_quota reads a fake cgroup tree here.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "rbee/core/thread_pool.h"

namespace fs = std::filesystem;

namespace {

class CgroupTree {
 public:
  CgroupTree() {
    root_ = fs::temp_directory_path() / ("rbee-cgroup-test-" + std::to_string(::getpid()) + "-" +
                                         std::to_string(counter_++));
    fs::create_directories(root_);
  }
  ~CgroupTree() { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    const fs::path p = root_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::string root() const { return root_.string(); }

 private:
  fs::path root_;
  static inline int counter_ = 0;
};

}  // namespace

TEST(CgroupCpuQuota, V2CpuMaxOfTheProcessAndItsAncestors) {
  CgroupTree t;
  t.write("cpu.max", "max 100000\n");
  t.write("kubepods/pod1/cpu.max", "250000 100000\n");  // 2.5 CPUs -> 3 threads
  t.write("kubepods/pod1/ctr/cpu.max", "max 100000\n");
  EXPECT_EQ(rbee::cgroup_cpu_quota("0::/kubepods/pod1/ctr\n", t.root()), 3);
  t.write("kubepods/cpu.max", "100000 100000\n");  // an ancestor's smaller quota wins
  EXPECT_EQ(rbee::cgroup_cpu_quota("0::/kubepods/pod1/ctr\n", t.root()), 1);
}

TEST(CgroupCpuQuota, V2NoQuota) {
  CgroupTree t;
  t.write("cpu.max", "max 100000\n");
  EXPECT_EQ(rbee::cgroup_cpu_quota("0::/\n", t.root()), 0);
  EXPECT_EQ(rbee::cgroup_cpu_quota("0::/missing/path\n", t.root()), 0);
  EXPECT_EQ(rbee::cgroup_cpu_quota("", t.root()), 0);
}

TEST(CgroupCpuQuota, V1CfsQuota) {
  CgroupTree t;
  t.write("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "150000\n");
  t.write("cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  const std::string self = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n";
  EXPECT_EQ(rbee::cgroup_cpu_quota(self, t.root()), 2);
  t.write("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");  // no quota
  EXPECT_EQ(rbee::cgroup_cpu_quota(self, t.root()), 0);
  // Inside a container the listed path is the host's; the container's own cgroup is mounted at the root.
  t.write("cpu/cpu.cfs_quota_us", "400000\n");
  t.write("cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(rbee::cgroup_cpu_quota("3:cpu:/host/path/x\n", t.root()), 4);
}

TEST(ThreadPool, DefaultThreadsFollowsAffinityAndEnv) {
  ::unsetenv("RBEE_THREADS");
  const int n = rbee::ThreadPool::default_threads();
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_GE(n, 1);
  EXPECT_LE(n, CPU_COUNT(&set));
  ::setenv("RBEE_THREADS", "3", 1);
  EXPECT_EQ(rbee::ThreadPool::default_threads(), 3);
  ::unsetenv("RBEE_THREADS");
}

// More pool threads than cores and a busy core: every run() still returns once its tasks are done, and every task
// runs exactly once (a worker that shows up late must not run a task of a job that has ended).
TEST(ThreadPool, OversubscribedRunsEveryTaskOnce) {
  rbee::ThreadPool pool((int)std::thread::hardware_concurrency() * 4 + 1);
  std::atomic<bool> stop{false};
  std::thread hog([&] {
    while (!stop) {
    }
  });
  for (int round = 0; round < 2000; ++round) {
    std::vector<std::atomic<int>> hits(7 + round % 13);
    pool.run((int64_t)hits.size(), [&](int64_t i) { hits[(size_t)i].fetch_add(1); });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "round " << round;
  }
  stop = true;
  hog.join();
}
