#include "rbee/core/log.h"

#include <cstdlib>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>

#include "rbee/core/error.h"

namespace rbee::log {

void set_level(std::string_view level) {
  const auto parsed = spdlog::level::from_str(std::string(level));
  RBEE_CHECK(parsed != spdlog::level::off || level == "off", "unknown log level '{}'", level);
  spdlog::set_level(parsed);
}

void init_from_env() {
  auto logger = spdlog::stderr_color_mt("rbee");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  const char* level = std::getenv("RBEE_LOG_LEVEL");
  set_level(level ? level : "info");
}

}  // namespace rbee::log
