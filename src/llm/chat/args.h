// Binds the arguments of a filter, test, global or method call to named parameters, like a Python signature:
// positional first, then keywords by name; unknown keywords, duplicates and surplus arguments are errors.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "llm/chat/value.h"

namespace rbee::llm::jinja {

class ArgBinder {
 public:
  ArgBinder(std::string_view function, const CallArgs& args, std::initializer_list<std::string_view> params);
  // The argument bound to parameter i, or nullptr when it was not given.
  const Value* get(size_t i) const { return bound_[i]; }
  bool has(size_t i) const { return bound_[i] != nullptr; }
  Value get_or(size_t i, Value fallback) const { return bound_[i] ? *bound_[i] : std::move(fallback); }
  // Typed accessors that fail with "<function>() argument '<name>' must be ..." on a wrong type.
  const std::string& string(size_t i) const;
  int64_t integer(size_t i) const;
  bool flag(size_t i) const;  // Python truthiness
  // Fails when parameter i was not given.
  const Value& required(size_t i) const;

 private:
  std::string function_;
  std::vector<std::string_view> params_;
  std::vector<const Value*> bound_;
};

}  // namespace rbee::llm::jinja
