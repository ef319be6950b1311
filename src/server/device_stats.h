// DeviceStats: the device facts /info, /metrics and heartbeats report (name, vendor, arch, VRAM used and
// total), read from the backend (cudaMemGetInfo / hipMemGetInfo on GPUs; on the CPU the host's total and this
// process's resident set, not the host's used memory, which other processes fill) and cached
// for a second so that scrapes and heartbeats never hammer the driver.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

namespace rbee {
class Device;
}

namespace rbee::server {

struct DeviceSnapshot {
  std::string id;       // "cuda:0"
  std::string backend;  // "cpu", "cuda", "rocm"
  std::string name, vendor, arch;
  int64_t vram_total = 0;
  int64_t vram_used = 0;  // GPU: total - free, as the backend reports it; CPU: this process's resident set (RSS)
};

// This process's resident set size in bytes (/proc/self/statm), 0 when unknown.
int64_t process_rss_bytes();

class DeviceStats {
 public:
  explicit DeviceStats(Device& device) : device_(device) {}
  DeviceSnapshot snapshot();
  // {"id","backend","name","vendor","arch","vram_total","vram_used"}
  nlohmann::json json();

 private:
  Device& device_;
  std::mutex mutex_;
  DeviceSnapshot cached_;
  std::chrono::steady_clock::time_point read_at_{};
  bool valid_ = false;
};

}  // namespace rbee::server
