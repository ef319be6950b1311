#include "common/expect_error.h"

#include <string>

#include <gtest/gtest.h>

#include "rbee/core/error.h"

namespace rbee::test {

void expect_invalid(const std::function<void()>& call, std::string_view fragment) { expect_invalid(call, {fragment}); }

void expect_invalid(const std::function<void()>& call, std::initializer_list<std::string_view> fragments) {
  try {
    call();
    ADD_FAILURE() << "no error thrown; expected InvalidArgument mentioning '" << *fragments.begin() << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    for (std::string_view f : fragments) {
      EXPECT_NE(e.message().find(f), std::string::npos) << "'" << f << "' not in: " << e.what();
    }
  }
}

}  // namespace rbee::test
