#include "server/util.h"

#include <ctime>
#include <mutex>
#include <random>

#include <fmt/format.h>

namespace rbee::server {

std::string random_id(std::string_view prefix) {
  static std::mutex mutex;
  static std::mt19937_64 rng{std::random_device{}()};
  uint64_t a, b;
  {
    std::lock_guard lock(mutex);
    a = rng();
    b = rng();
  }
  return fmt::format("{}-{:016x}{:08x}", prefix, a, (uint32_t)b);
}

std::string iso8601_utc(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t secs = (std::time_t)(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  const size_t n = a.size() < b.size() ? a.size() : b.size();
  for (size_t i = 0; i < b.size(); ++i) diff |= (unsigned)(uint8_t)(i < n ? a[i] : 0) ^ (uint8_t)b[i];
  return diff == 0;
}

}  // namespace rbee::server
