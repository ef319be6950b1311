// Helpers shared by the GGUF, safetensors and fuzz-regression tests: file bytes, the golden checksum and
// checks on the errors that malformed files must produce.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "common/source_dir.h"
#include "rbee/core/error.h"

namespace rbee::test {

inline std::string source_path(const std::string& relative) { return source_dir() + "/" + relative; }

inline std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline void write_file_bytes(const std::string& path, std::span<const uint8_t> bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), (std::streamsize)bytes.size());
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

// The golden scripts' checksum: sum of b[i] * ((i mod 65521) + 1), modulo 2^64 (tools/goldens/*.py).
inline uint64_t golden_checksum(std::span<const uint8_t> bytes) {
  uint64_t sum = 0;
  for (size_t i = 0; i < bytes.size(); ++i) sum += (uint64_t)bytes[i] * (uint64_t)(i % 65521 + 1);
  return sum;
}

// Runs `parse` and expects Error(Io) whose message contains every one of `parts`.
inline void expect_io_error(const std::function<void()>& parse, std::initializer_list<std::string> parts,
                            const std::string& what = "") {
  try {
    parse();
    ADD_FAILURE() << "expected Error(Io) " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Io) << e.what() << " " << what;
    for (const auto& p : parts) EXPECT_NE(e.message().find(p), std::string::npos) << e.what() << " lacks '" << p << "'";
  }
}

// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    path_ = std::filesystem::temp_directory_path() /
            ("rbee-" + tag + "-" + std::to_string((long)::getpid()) + "-" +
             std::to_string(reinterpret_cast<uintptr_t>(this)));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace rbee::test
