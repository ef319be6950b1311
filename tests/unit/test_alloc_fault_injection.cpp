// The caching allocator's fault injection (RBEE_FAULT_ALLOC_LIMIT, RBEE_FAULT_ALLOC_SWITCH; docs/RELIABILITY.md):
// what the worker-level fault tests rely on, checked on the allocator alone.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "rbee/backend/caching_allocator.h"
#include "rbee/core/error.h"

namespace {

rbee::CachingAllocator make(const char* name) {
  return rbee::CachingAllocator(name, [](size_t n) { return std::malloc(n); }, [](void* p) { std::free(p); });
}

struct EnvGuard {
  ~EnvGuard() {
    ::unsetenv("RBEE_FAULT_ALLOC_LIMIT");
    ::unsetenv("RBEE_FAULT_ALLOC_SWITCH");
    ::unsetenv("RBEE_FAULT_ALLOC_DEVICE");
  }
};

void expect_oom(rbee::CachingAllocator& a, size_t bytes, const std::string& needle) {
  size_t rounded = 0;
  try {
    a.allocate(bytes, &rounded);
    ADD_FAILURE() << "allocated " << bytes << " bytes; expected OutOfMemory";
  } catch (const rbee::Error& e) {
    EXPECT_EQ(e.code(), rbee::ErrorCode::OutOfMemory);
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
  }
}

}  // namespace

TEST(AllocFaultInjection, LimitActsLikeASmallerDevice) {
  EnvGuard guard;
  ::setenv("RBEE_FAULT_ALLOC_LIMIT", "65536", 1);
  auto a = make("cpu:0");
  size_t r1 = 0, r2 = 0;
  void* p = a.allocate(40000, &r1);
  expect_oom(a, 40000, "out of memory on cpu:0");
  a.release(p, r1);
  // The freed block is cached; a request of another size empties the cache and then fits.
  void* q = a.allocate(50000, &r2);
  EXPECT_NE(q, nullptr);
  a.release(q, r2);
}

TEST(AllocFaultInjection, SwitchFailsEveryAllocationWhileItsFileExists) {
  EnvGuard guard;
  const auto path = std::filesystem::temp_directory_path() / ("rbee-oom-switch-" + std::to_string(::getpid()));
  std::filesystem::remove(path);
  ::setenv("RBEE_FAULT_ALLOC_SWITCH", path.c_str(), 1);
  auto a = make("cuda:0");
  size_t r = 0;
  void* p = a.allocate(1000, &r);
  a.release(p, r);
  std::ofstream(path).put('x');
  expect_oom(a, 1000, "injected");  // a cached block of that size does not help: the device is "full"
  std::filesystem::remove(path);
  p = a.allocate(1000, &r);
  EXPECT_NE(p, nullptr);
  a.release(p, r);
}

TEST(AllocFaultInjection, DeviceFilter) {
  EnvGuard guard;
  ::setenv("RBEE_FAULT_ALLOC_LIMIT", "1000", 1);
  ::setenv("RBEE_FAULT_ALLOC_DEVICE", "cuda", 1);
  auto cpu = make("cpu:0");
  size_t r = 0;
  void* p = cpu.allocate(100000, &r);  // not a cuda device: no limit
  cpu.release(p, r);
  auto gpu = make("cuda:0");
  expect_oom(gpu, 100000, "out of memory on cuda:0");
}
