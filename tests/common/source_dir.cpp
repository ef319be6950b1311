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

}  // namespace

std::string find_source_dir(const char* env, const std::string& built, const std::string& exe_dir,
                            const std::string& cwd) {
  if (env && *env) return env;
  if (holds_test_data(built)) return built;
  for (const std::string& start : {exe_dir, cwd}) {
    if (fs::path found = search_up(start); !found.empty()) return found.string();
  }
  return built;
}

const std::string& source_dir() {
  static const std::string dir = [] {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    const std::string exe_dir = ec ? std::string() : exe.parent_path().string();
    const fs::path cwd = fs::current_path(ec);
    return find_source_dir(std::getenv("RBEE_SOURCE_DIR"), RBEE_SOURCE_DIR, exe_dir, ec ? std::string() : cwd.string());
  }();
  return dir;
}

}  // namespace rbee::test
