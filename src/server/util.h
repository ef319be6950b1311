// Small helpers the workers share: job ids, ISO-8601 timestamps, constant-time comparison.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace rbee::server {

// "<prefix>-" followed by 24 random hex digits (96 bits from the OS's random device).
std::string random_id(std::string_view prefix);
// "2026-11-26T01:02:03.123Z"
std::string iso8601_utc(std::chrono::system_clock::time_point t);
inline std::string iso8601_now() { return iso8601_utc(std::chrono::system_clock::now()); }
// Equality whose time does not depend on where the strings differ (for secrets).
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace rbee::server
