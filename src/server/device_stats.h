// DeviceStats: the device facts /info, /metrics and heartbeats report (name, vendor, arch, VRAM used and
// total), read from the backend (cudaMemGetInfo / hipMemGetInfo on GPUs; on the CPU the host's total and this
// process's resident set, not the host's used memory, which other processes fill) and cached
// for a second so that scrapes and heartbeats never hammer the driver.
//
// A worker whose model is spread over several devices (--devices, partial offload) reports each of them
// (report().devices) and their sum as the one figure the contract's single-device fields carry (snapshot(),
// report().total).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rbee {
class Device;
}

namespace rbee::server {

struct DeviceSnapshot {
  std::string id;       // "cuda:0"; several devices: "cuda:0,cuda:1"
  std::string backend;  // "cpu", "cuda", "rocm"; several backends: joined with '+' ("cpu+cuda")
  std::string name, vendor, arch;
  int64_t vram_total = 0;
  int64_t vram_used = 0;  // GPU: total - free, as the backend reports it; CPU: this process's resident set (RSS)
  int64_t allocator_in_use = 0;  // what rbee's caching allocator holds on it (in use + cached)
};

// Every device together and each device, read at one moment: the sums in `total` are those of `devices` (the CPU's
// resident set counted once).
struct DeviceReport {
  DeviceSnapshot total;
  std::vector<DeviceSnapshot> devices;
};

// This process's resident set size in bytes (/proc/self/statm), 0 when unknown.
int64_t process_rss_bytes();

class DeviceStats {
 public:
  explicit DeviceStats(Device& device) : devices_{&device} {}
  explicit DeviceStats(std::vector<Device*> devices);
  // The devices the model ended up on (a plan may add the host CPU for offloaded layers).
  void set_devices(std::vector<Device*> devices);
  // Every device together (sums; the CPU's resident set counted once).
  DeviceSnapshot snapshot();
  // The sums and each device from one reading (one lock): what a report that shows both must use, so that they
  // agree (two calls may straddle a refresh).
  DeviceReport report();
  // {"id","backend","name","vendor","arch","vram_total","vram_used"} of report().total, plus "devices": one such
  // object per device (with "allocator_bytes").
  nlohmann::json json();
  static nlohmann::json json(const DeviceSnapshot& s);
  // The "devices" list of json() for these devices.
  static nlohmann::json devices_json(const std::vector<DeviceSnapshot>& devices);

 private:
  void refresh();  // caller holds mutex_

  std::mutex mutex_;
  std::vector<Device*> devices_;
  std::vector<DeviceSnapshot> cached_;
  DeviceSnapshot total_;
  std::chrono::steady_clock::time_point read_at_{};
  bool valid_ = false;
};

}  // namespace rbee::server
