// A test suite on the default model (RBEE_DEFAULT_MODEL, SmolLM2-135M-Instruct Q4_1): loaded once per suite on the
// default device; every test of the suite skips, saying why, when the file is missing (scripts/setup.sh fetches it).
//   class MySuite : public DefaultModelTest {};  TEST_F(MySuite, X) { ... *model_ ... }
#pragma once

#include <gtest/gtest.h>

#include <filesystem>

#include "rbee/llm/model.h"

namespace rbee::llm {

class DefaultModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::filesystem::exists(RBEE_DEFAULT_MODEL)) model_ = Model::load(RBEE_DEFAULT_MODEL).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override {
    if (!model_) GTEST_SKIP() << RBEE_DEFAULT_MODEL << " is missing: run scripts/setup.sh";
  }
  static inline Model* model_ = nullptr;
};

}  // namespace rbee::llm
