// rbee::env (include/rbee/core/env.h): every RBEE_* switch parses the same way, and a malformed value is an error
// that names the variable instead of a silent default.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "common/scoped_env.h"
#include "rbee/core/env.h"

namespace rbee {
namespace {

constexpr const char* kName = "RBEETEST_ENV_SWITCH";

// Sets the variable for the rest of one test; the ScopedEnv restores it (unset) when the test ends.
class EnvTest : public ::testing::Test {
 protected:
  void set(const char* value) {
    scoped_.reset();
    scoped_.emplace(kName, value);
  }
  std::optional<test::ScopedEnv> scoped_;
};

TEST_F(EnvTest, UnsetAndEmptyMeanNotSet) {
  ASSERT_EQ(std::getenv(kName), nullptr);
  EXPECT_FALSE(env::text(kName).has_value());
  EXPECT_FALSE(env::flag(kName).has_value());
  EXPECT_TRUE(env::flag_or(kName, true));
  EXPECT_FALSE(env::flag_or(kName, false));
  EXPECT_EQ(env::integer_or(kName, 17), 17);
  set("");
  EXPECT_FALSE(env::text(kName).has_value());
  EXPECT_TRUE(env::flag_or(kName, true));
  EXPECT_EQ(env::integer_or(kName, -3), -3);
}

TEST_F(EnvTest, SwitchSpellings) {
  for (const char* on : {"1", "on", "true", "yes"}) {
    set(on);
    EXPECT_TRUE(env::flag_or(kName, false)) << on;
  }
  for (const char* off : {"0", "off", "false", "no"}) {
    set(off);
    EXPECT_FALSE(env::flag_or(kName, true)) << off;
  }
}

TEST_F(EnvTest, MalformedSwitchNamesTheVariable) {
  for (const char* bad : {"2", "ON ", "enable", " 1", "1x"}) {
    set(bad);
    try {
      (void)env::flag_or(kName, true);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(e.message().find(kName), std::string::npos) << e.message();
      EXPECT_NE(e.message().find(bad), std::string::npos) << e.message();
    }
  }
}

TEST_F(EnvTest, IntegersInRange) {
  set("256");
  EXPECT_EQ(env::integer_or(kName, 0, 0, 1000), 256);
  set("-5");
  EXPECT_EQ(env::integer_or(kName, 0), -5);
  set("+7");
  EXPECT_EQ(env::integer_or(kName, 0, 1, 8), 7);
  set("9223372036854775807");
  EXPECT_EQ(env::integer_or(kName, 0), INT64_MAX);
}

TEST_F(EnvTest, MalformedOrOutOfRangeIntegers) {
  for (const char* bad : {"abc", "12abc", "1.5", " ", "99999999999999999999", "0x10"}) {
    set(bad);
    EXPECT_THROW((void)env::integer_or(kName, 1), Error) << bad;
  }
  set("0");
  EXPECT_THROW((void)env::integer_or(kName, 1, 1, 4096), Error);
  set("4097");
  try {
    (void)env::integer_or(kName, 1, 1, 4096);
    ADD_FAILURE() << "accepted 4097";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("[1, 4096]"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace rbee
