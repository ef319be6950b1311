#include "server/device_stats.h"

#include "rbee/backend/device.h"

namespace rbee::server {

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
    cached_.vram_used = std::max<int64_t>(0, info.memory_total - info.memory_free);
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
