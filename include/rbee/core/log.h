// Logging: spdlog to stderr, so a command's stdout stays clean for its real output.
// Use rbee::log::info("loaded {} tensors", n) and friends; level via RBEE_LOG_LEVEL or set_level().
#pragma once

#include <string_view>

#include <spdlog/spdlog.h>

namespace rbee::log {

using spdlog::debug;
using spdlog::error;
using spdlog::info;
using spdlog::trace;
using spdlog::warn;

// "trace", "debug", "info", "warn", "error", "off". Unknown names throw InvalidArgument.
void set_level(std::string_view level);
// Reads RBEE_LOG_LEVEL (default "info") and sends output to stderr. Called once by the apps.
void init_from_env();

}  // namespace rbee::log
