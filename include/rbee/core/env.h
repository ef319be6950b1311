// Environment switches: the RBEE_* variables listed in docs/ENVIRONMENT.md, read through one parser.
//
// Contract, the same for every variable:
//   * unset and empty mean the same thing: "not set", the caller's default applies;
//   * a switch is 0 / off / false / no or 1 / on / true / yes;
//   * an integer is decimal, optionally signed, within the range the caller states;
//   * anything else is an Error (InvalidArgument) naming the variable, its value and what it takes, so a typo
//     stops the run at the first read instead of silently running the default.
// Header-only: the engine, the backend plug-ins and the benchmarks read switches the same way without linking.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "rbee/core/error.h"

namespace rbee::env {

// The variable's value; nullopt when it is unset or empty.
inline std::optional<std::string_view> text(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string_view(v);
}

// A switch; nullopt when unset or empty.
inline std::optional<bool> flag(const char* name) {
  const std::optional<std::string_view> v = text(name);
  if (!v) return std::nullopt;
  for (std::string_view on : {"1", "on", "true", "yes"})
    if (*v == on) return true;
  for (std::string_view off : {"0", "off", "false", "no"})
    if (*v == off) return false;
  RBEE_THROW(ErrorCode::InvalidArgument, "{}={}: expected 0 or 1 (off/on, false/true, no/yes)", name, *v);
}

// A switch with its default for unset or empty.
inline bool flag_or(const char* name, bool fallback) { return flag(name).value_or(fallback); }

// A decimal integer in [lo, hi]; nullopt when unset or empty.
inline std::optional<int64_t> integer(const char* name, int64_t lo = std::numeric_limits<int64_t>::min(),
                                      int64_t hi = std::numeric_limits<int64_t>::max()) {
  const std::optional<std::string_view> v = text(name);
  if (!v) return std::nullopt;
  const std::string copy(*v);
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(copy.c_str(), &end, 10);
  const bool parsed = end != copy.c_str() && *end == '\0' && errno == 0;
  RBEE_CHECK(parsed && n >= lo && n <= hi, "{}={}: expected an integer in [{}, {}]", name, *v, lo, hi);
  return (int64_t)n;
}

// An integer with its default for unset or empty.
inline int64_t integer_or(const char* name, int64_t fallback, int64_t lo = std::numeric_limits<int64_t>::min(),
                          int64_t hi = std::numeric_limits<int64_t>::max()) {
  return integer(name, lo, hi).value_or(fallback);
}

}  // namespace rbee::env
