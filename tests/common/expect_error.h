// expect_invalid: the bad-input check of the op tests. `call` must throw rbee::Error of category InvalidArgument
// whose message contains `fragment` (every one of `fragments`); anything else is a test failure.
#pragma once

#include <functional>
#include <initializer_list>
#include <string_view>

namespace rbee::test {

void expect_invalid(const std::function<void()>& call, std::string_view fragment);
void expect_invalid(const std::function<void()>& call, std::initializer_list<std::string_view> fragments);

}  // namespace rbee::test
