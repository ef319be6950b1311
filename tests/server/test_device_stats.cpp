// DeviceStats (server/device_stats.h): what /info, /metrics and heartbeats say about memory. A report's sums must be
// those of its per-device list however the readings are timed: the figures refresh once a second, and a report put
// together from two readings can straddle a refresh (the CPU's figure, this process's resident set, moves between
// them). Checked here across refreshes while the resident set grows and shrinks.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "common/harness.h"
#include "server/device_stats.h"

namespace rbee::server {
namespace {

TEST(DeviceStats, SumsAgreeWithTheListAcrossRefreshes) {
  DeviceStats stats(test::cpu_device());
  std::vector<std::unique_ptr<char[]>> held;  // touched pages: the resident set moves between refreshes
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(2300);  // two refreshes or more
  int reports = 0;
  int64_t lo = INT64_MAX, hi = 0;
  while (std::chrono::steady_clock::now() < end) {
    if (held.size() == 64) held.clear();
    held.push_back(std::make_unique<char[]>(1 << 20));
    std::memset(held.back().get(), 1 + (int)held.size(), 1 << 20);
    const DeviceReport r = stats.report();
    ASSERT_EQ(r.devices.size(), 1u);
    ASSERT_EQ(r.total.vram_used, r.devices[0].vram_used);
    ASSERT_EQ(r.total.vram_total, r.devices[0].vram_total);
    const nlohmann::json j = stats.json();
    ASSERT_EQ(j["devices"].size(), 1u) << j.dump();
    ASSERT_EQ(j["vram_used"], j["devices"][0]["vram_used"]) << j.dump();
    ASSERT_EQ(j["id"], j["devices"][0]["id"]) << j.dump();
    lo = std::min(lo, r.total.vram_used);
    hi = std::max(hi, r.total.vram_used);
    ++reports;
  }
  EXPECT_GT(reports, 100);
  // The figure is the resident set (nonzero on Linux) and it was refreshed while it moved.
  EXPECT_GT(lo, 0);
  EXPECT_GT(hi, lo) << "no refresh saw the resident set move: the check above compared one reading with itself";
}

}  // namespace
}  // namespace rbee::server
