// Where the tests find tests/data (tests/common/source_dir.h): the environment first, then the tree they were built
// from, then a parent of the test binary's folder, then of the working directory (a packed build run from a copy of
// the tree on a GPU machine), and the built path when none holds tests/data.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <unistd.h>

#include "common/source_dir.h"

namespace rbee::test {
namespace {

namespace fs = std::filesystem;

// A scratch folder with two trees: copy/ (holds tests/data and a pack below it) and bare/ (no tests/data).
struct Trees {
  fs::path root, copy, pack_tests, bare;
  Trees() {
    root = fs::temp_directory_path() / ("rbee-source-dir-" + std::to_string(::getpid()));
    copy = root / "copy";
    pack_tests = copy / ".devpack-x" / "tests";
    bare = root / "bare" / "sub";
    fs::create_directories(copy / "tests" / "data");
    fs::create_directories(pack_tests);
    fs::create_directories(bare);
  }
  ~Trees() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

TEST(SourceDir, EnvironmentThenBuiltTreeThenParentsOfBinaryAndWorkingDirectory) {
  Trees t;
  const std::string gone = (t.root / "was-built-here").string();  // no tests/data there
  // The environment wins, even over a built tree that exists.
  EXPECT_EQ(find_source_dir("/some/where", t.copy.string(), "", ""), "/some/where");
  // An empty variable counts as unset.
  EXPECT_EQ(find_source_dir("", t.copy.string(), "", ""), t.copy.string());
  // The built tree when it still holds tests/data.
  EXPECT_EQ(find_source_dir(nullptr, t.copy.string(), t.bare.string(), t.bare.string()), t.copy.string());
  // Else the first parent of the binary's folder that holds tests/data (the pack inside a copy of the tree) ...
  EXPECT_EQ(find_source_dir(nullptr, gone, t.pack_tests.string(), t.bare.string()), t.copy.string());
  // ... else of the working directory ...
  EXPECT_EQ(find_source_dir(nullptr, gone, t.bare.string(), t.pack_tests.string()), t.copy.string());
  // ... else the built path, so that a missing file is reported under the name the tests were built with.
  EXPECT_EQ(find_source_dir(nullptr, gone, t.bare.string(), ""), gone);
  EXPECT_EQ(find_source_dir(nullptr, gone, "", ""), gone);
}

TEST(SourceDir, ThisBuildFindsItsData) {
  EXPECT_TRUE(fs::is_directory(fs::path(source_dir()) / "tests" / "data")) << source_dir();
}

}  // namespace
}  // namespace rbee::test
