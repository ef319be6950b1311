// Inputs that once crashed, hung or leaked in a fuzz target (docs/FUZZING.md): each must now be refused with
// a clean Error(Io). Files live in tests/data/fuzz-regressions/, named <target>-<what>.bin.
#include <algorithm>
#include <filesystem>

#include "formats_test_util.h"
#include "rbee/formats/gguf.h"
#include "rbee/formats/safetensors.h"

namespace rbee {
namespace {

std::vector<std::filesystem::path> regression_inputs(const std::string& prefix) {
  std::vector<std::filesystem::path> out;
  const std::filesystem::path dir = test::source_path("tests/data/fuzz-regressions");
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(FuzzRegressions, GgufInputsGiveCleanErrors) {
  const auto inputs = regression_inputs("gguf-");
  ASSERT_FALSE(inputs.empty());
  for (const auto& path : inputs) {
    const std::vector<uint8_t> bytes = test::read_file_bytes(path.string());
    test::expect_io_error([&] { gguf::File::parse(bytes, path.filename().string()); },
                          {path.filename().string() + ": byte "}, path.string());
  }
}

TEST(FuzzRegressions, SafetensorsInputsGiveCleanErrors) {
  const auto inputs = regression_inputs("safetensors-");
  ASSERT_FALSE(inputs.empty());
  for (const auto& path : inputs) {
    const std::vector<uint8_t> bytes = test::read_file_bytes(path.string());
    test::expect_io_error([&] { safetensors::File::parse(bytes, path.filename().string()); },
                          {path.filename().string() + ": byte "}, path.string());
  }
}

}  // namespace
}  // namespace rbee
