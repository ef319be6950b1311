#include "server/device_stats.h"

#include <unistd.h>

#include <cstdio>

#include "rbee/backend/device.h"
#include "rbee/core/error.h"

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

DeviceStats::DeviceStats(std::vector<Device*> devices) : devices_(std::move(devices)) {
  RBEE_CHECK(!devices_.empty(), "device stats: no devices");
}

void DeviceStats::set_devices(std::vector<Device*> devices) {
  RBEE_CHECK(!devices.empty(), "device stats: no devices");
  std::lock_guard lock(mutex_);
  devices_ = std::move(devices);
  valid_ = false;
}

void DeviceStats::refresh() {
  const auto now = std::chrono::steady_clock::now();
  if (valid_ && now - read_at_ <= std::chrono::seconds(1)) return;
  cached_.clear();
  total_ = DeviceSnapshot{};
  bool counted_host = false;
  for (Device* device : devices_) {
    const DeviceInfo info = device->info();
    const AllocatorStats a = device->memory_stats();
    DeviceSnapshot s;
    s.id = device->id();
    s.backend = info.backend;
    s.name = info.name;
    s.vendor = info.vendor;
    s.arch = info.arch;
    s.vram_total = info.memory_total;
    // A GPU's used memory is the device's (the worker owns the device). On the CPU the "device" is the host, whose
    // used memory is everybody's: report this process's resident set instead.
    s.vram_used = info.backend == "cpu" ? process_rss_bytes() : std::max<int64_t>(0, info.memory_total - info.memory_free);
    s.allocator_in_use = a.in_use_bytes + a.cached_bytes;
    cached_.push_back(s);
    auto join = [](std::string& into, const std::string& part, const char* sep) {
      if (into.find(part) == std::string::npos) into += (into.empty() ? "" : sep) + part;
    };
    total_.id += (total_.id.empty() ? "" : ",") + s.id;
    join(total_.backend, s.backend, "+");
    join(total_.name, s.name, ", ");
    join(total_.vendor, s.vendor, ", ");
    join(total_.arch, s.arch, ", ");
    total_.allocator_in_use += s.allocator_in_use;
    // CPU instances share the host: its memory counts once.
    if (info.backend == "cpu") {
      if (counted_host) continue;
      counted_host = true;
    }
    total_.vram_total += s.vram_total;
    total_.vram_used += s.vram_used;
  }
  read_at_ = now;
  valid_ = true;
}

DeviceSnapshot DeviceStats::snapshot() {
  std::lock_guard lock(mutex_);
  refresh();
  return total_;
}

DeviceReport DeviceStats::report() {
  std::lock_guard lock(mutex_);
  refresh();
  return {total_, cached_};
}

nlohmann::json DeviceStats::json(const DeviceSnapshot& s) {
  return {{"id", s.id},         {"backend", s.backend},       {"name", s.name},          {"vendor", s.vendor},
          {"arch", s.arch},     {"vram_total", s.vram_total}, {"vram_used", s.vram_used}};
}

nlohmann::json DeviceStats::devices_json(const std::vector<DeviceSnapshot>& devices) {
  nlohmann::json list = nlohmann::json::array();
  for (const DeviceSnapshot& d : devices) {
    nlohmann::json j = json(d);
    j["allocator_bytes"] = d.allocator_in_use;
    list.push_back(std::move(j));
  }
  return list;
}

nlohmann::json DeviceStats::json() {
  const DeviceReport r = report();
  nlohmann::json out = json(r.total);
  out["devices"] = devices_json(r.devices);
  return out;
}

}  // namespace rbee::server
