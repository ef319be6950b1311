#include "formats/mapped_fault.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace rbee::formats {

namespace {

struct Slot {
  std::atomic<uintptr_t> begin{0};  // 0: free
  std::atomic<uintptr_t> end{0};
  char path[512] = {};
};
Slot g_slots[64];
std::mutex g_mutex;  // writers only; the handler reads the atomics
struct sigaction g_previous {};
std::once_flag g_installed;

// Async-signal-safe decimal formatting.
size_t format_u64(uint64_t v, char* out) {
  char tmp[24];
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  for (size_t i = 0; i < n; ++i) out[i] = tmp[n - 1 - i];
  return n;
}

void write_str(const char* s) { (void)!::write(STDERR_FILENO, s, std::strlen(s)); }

void on_sigbus(int sig, siginfo_t* info, void* context) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (const Slot& s : g_slots) {
    const uintptr_t b = s.begin.load(std::memory_order_acquire);
    if (b == 0 || addr < b || addr >= s.end.load(std::memory_order_acquire)) continue;
    char offset[24];
    offset[format_u64(addr - b, offset)] = 0;
    write_str("rbee: fatal: the model file '");
    write_str(s.path);
    write_str("' was truncated or rewritten while the worker had it mapped (SIGBUS reading offset ");
    write_str(offset);
    write_str("); the weights are gone, so the process exits: restart it with an intact file\n");
    ::_exit(kMappedFileLostExit);
  }
  // Not ours: whoever handled SIGBUS before, else the default action (re-raised on return).
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) return g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN && g_previous.sa_handler) {
    return g_previous.sa_handler(sig);
  }
  signal(SIGBUS, SIG_DFL);
}

}  // namespace

void register_mapping(const void* addr, size_t size, const char* path) {
  if (!addr || size == 0) return;
  std::call_once(g_installed, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &g_previous);
  });
  std::lock_guard lock(g_mutex);
  for (Slot& s : g_slots) {
    if (s.begin.load() != 0) continue;
    std::strncpy(s.path, path, sizeof s.path - 1);
    s.path[sizeof s.path - 1] = 0;
    s.end.store(reinterpret_cast<uintptr_t>(addr) + size, std::memory_order_release);
    s.begin.store(reinterpret_cast<uintptr_t>(addr), std::memory_order_release);
    return;
  }
}

void unregister_mapping(const void* addr) {
  std::lock_guard lock(g_mutex);
  for (Slot& s : g_slots) {
    if (s.begin.load() == reinterpret_cast<uintptr_t>(addr)) {
      s.begin.store(0, std::memory_order_release);
      s.end.store(0, std::memory_order_release);
    }
  }
}

}  // namespace rbee::formats
