#include "llm/chat/args.h"

namespace rbee::llm::jinja {

ArgBinder::ArgBinder(std::string_view function, const CallArgs& args, std::initializer_list<std::string_view> params)
    : function_(function), params_(params), bound_(params.size(), nullptr) {
  if (args.positional.size() > params_.size())
    fail(fmt::format("{}() takes at most {} argument(s) ({} given)", function_, params_.size(),
                     args.positional.size()));
  for (size_t i = 0; i < args.positional.size(); ++i) bound_[i] = &args.positional[i];
  for (const auto& [name, value] : args.keyword) {
    size_t k = 0;
    while (k < params_.size() && params_[k] != name) ++k;
    if (k == params_.size()) fail(fmt::format("{}() got an unexpected keyword argument '{}'", function_, name));
    if (bound_[k]) fail(fmt::format("{}() got multiple values for argument '{}'", function_, name));
    bound_[k] = &value;
  }
}

const Value& ArgBinder::required(size_t i) const {
  if (!bound_[i]) fail(fmt::format("{}() missing required argument '{}'", function_, params_[i]));
  return *bound_[i];
}

const std::string& ArgBinder::string(size_t i) const {
  const Value& v = required(i);
  if (v.is_undefined()) fail(v.undefined_hint());
  if (!v.is_string())
    fail(fmt::format("{}() argument '{}' must be str, not {}", function_, params_[i], type_name(v)));
  return v.as_string();
}

int64_t ArgBinder::integer(size_t i) const {
  const Value& v = required(i);
  if (v.is_undefined()) fail(v.undefined_hint());
  if (!v.is_integral())
    fail(fmt::format("{}() argument '{}' must be int, not {}", function_, params_[i], type_name(v)));
  return v.as_int();
}

bool ArgBinder::flag(size_t i) const { return truthy(required(i)); }

}  // namespace rbee::llm::jinja
