#include "server/device_stats.h"

#include <unistd.h>

#include <cstdio>

#include "rbee/backend/device.h"

namespace rbee::server {

int64_t process_rss_bytes() {
  // /proc/self/statm: size resident shared text lib data dt, in pages.
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  return got == 2 ? (int64_t)resident * (int64_t)sysconf(_SC_PAGESIZE) : 0;
}

DeviceSnapshot DeviceStats::snapshot() {
  std::lock_guard lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  if (!valid_ || now - read_at_ > std::chrono::seconds(1)) {
    const DeviceInfo info = device_.info();
    cached_.id = device_.id();
    cached_.backend = info.backend;
    cached_.name = info.name;
    cached_.vendor = info.vendor;
    cached_.arch = info.arch;
    cached_.vram_total = info.memory_total;
    // A GPU's used memory is the device's (the worker owns the device). On the CPU the "device" is the host, whose
    // used memory is everybody's: report this process's resident set instead.
    cached_.vram_used = info.backend == "cpu" ? process_rss_bytes()
                                              : std::max<int64_t>(0, info.memory_total - info.memory_free);
    read_at_ = now;
    valid_ = true;
  }
  return cached_;
}

nlohmann::json DeviceStats::json() {
  const DeviceSnapshot s = snapshot();
  return {{"id", s.id},         {"backend", s.backend},       {"name", s.name},          {"vendor", s.vendor},
          {"arch", s.arch},     {"vram_total", s.vram_total}, {"vram_used", s.vram_used}};
}

}  // namespace rbee::server
