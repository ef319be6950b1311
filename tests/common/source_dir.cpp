#include "common/source_dir.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace rbee::test {

namespace {

namespace fs = std::filesystem;

bool holds_test_data(const fs::path& dir) {
  std::error_code ec;
  return !dir.empty() && fs::is_directory(dir / "tests" / "data", ec);
}

// dir or its first parent that holds tests/data; empty when none does.
fs::path search_up(fs::path dir) {
  for (; !dir.empty(); dir = dir.parent_path()) {
    if (holds_test_data(dir)) return dir;
    if (dir == dir.parent_path()) break;
  }
  return {};
}

std::string find_source_dir() {
  if (const char* env = std::getenv("RBEE_SOURCE_DIR"); env && *env) return env;
  if (holds_test_data(RBEE_SOURCE_DIR)) return RBEE_SOURCE_DIR;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    if (fs::path found = search_up(exe.parent_path()); !found.empty()) return found.string();
  }
  if (fs::path found = search_up(fs::current_path(ec)); !ec && !found.empty()) return found.string();
  return RBEE_SOURCE_DIR;
}

}  // namespace

const std::string& source_dir() {
  static const std::string dir = find_source_dir();
  return dir;
}

}  // namespace rbee::test
