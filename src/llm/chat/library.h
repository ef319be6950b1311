// The interpreter's built-in library: filters, tests, global functions and the methods of str, dict and list.
#pragma once

#include <string_view>

#include "llm/chat/ast.h"

namespace rbee::llm::jinja {

// nullptr when Jinja (with HF's overrides) has no filter / test of that name.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

// The globals every template sees: range, dict, namespace, raise_exception, strftime_now.
// A variable of the render context with the same name hides the global.
Value find_global(std::string_view name);

// `receiver.name` when receiver is a str, dict or list and `name` is one of its Python methods: a bound
// method value; otherwise an undefined value.
Value find_method(const Value& receiver, std::string_view name);

}  // namespace rbee::llm::jinja
