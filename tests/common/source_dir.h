// Where tests find the files of the source tree (tests/data: goldens, tiny models, tokenizers).
#pragma once

#include <string>

namespace rbee::test {

// The source tree's root, the first of: the environment variable RBEE_SOURCE_DIR; the tree the tests were built
// from (the compile-time RBEE_SOURCE_DIR) when it still holds tests/data; the first folder holding tests/data among
// the test binary's folder and its parents, then the working directory and its parents (a packed build run from a
// copy of the tree on another machine, e.g. a GPU machine's .devpack-*/tests/rbee_unit_tests). Falls back to the
// compile-time path, so a missing file is reported under the name the tests were built with.
const std::string& source_dir();

// The choice source_dir() makes, from its inputs (env: the variable's value or null; built: the compile-time path;
// exe_dir / cwd: the folders searched upwards, either may be empty).
std::string find_source_dir(const char* env, const std::string& built, const std::string& exe_dir,
                            const std::string& cwd);

}  // namespace rbee::test
