#include "common/random_models.h"

#include <filesystem>
#include <map>
#include <mutex>
#include <tuple>

#include <unistd.h>

#include "rbee/llm/model_files.h"

namespace rbee::test {
namespace {

// The files written so far; removes them at exit.
struct Written {
  std::mutex mutex;
  std::map<std::tuple<std::string, DType, uint64_t>, std::string> paths;
  ~Written() {
    for (const auto& [key, path] : paths) {
      std::error_code ec;
      std::filesystem::remove(path, ec);
    }
  }
};

}  // namespace

const std::string& random_model_file(const std::string& preset, DType type, uint64_t seed) {
  static Written written;
  std::lock_guard<std::mutex> lock(written.mutex);
  const auto key = std::make_tuple(preset, type, seed);
  auto it = written.paths.find(key);
  if (it == written.paths.end()) {
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("rbee-random-" + std::to_string((long)::getpid()) + "-" + preset + "-" +
                               std::string(dtype_name(type)) + "-" + std::to_string(seed) + ".gguf"))
                                 .string();
    try {
      llm::write_random_model(preset, type, path, seed);
    } catch (...) {
      std::error_code ec;
      std::filesystem::remove(path, ec);
      throw;
    }
    it = written.paths.emplace(key, path).first;
  }
  return it->second;
}

}  // namespace rbee::test
