#include "server/json_fields.h"

#include <cmath>

#include <fmt/format.h>

#include "server/api_error.h"

namespace rbee::server {

nlohmann::json parse_json_object(std::string_view body) {
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(body.begin(), body.end());
  } catch (const nlohmann::json::parse_error& e) {
    throw ApiError(400, "invalid_json", fmt::format("the body is not valid JSON (byte {}): {}", e.byte, e.what()));
  } catch (const nlohmann::json::exception& e) {
    // Valid syntax the parser still refuses, e.g. a number beyond double range ("1E9999": out_of_range.406).
    throw ApiError(400, "invalid_json", fmt::format("the body is not usable JSON: {}", e.what()));
  }
  if (!value.is_object()) {
    throw ApiError(400, "invalid_request", "the body must be a JSON object, got " + JsonFields::describe(value));
  }
  return value;
}

std::string JsonFields::describe(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::string: {
      const std::string& s = v.get_ref<const std::string&>();
      if (s.size() <= 40) return "string \"" + s + "\"";
      return fmt::format("a string of {} bytes", s.size());
    }
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::array: return fmt::format("an array of {}", v.size());
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::boolean: return v.get<bool>() ? "true" : "false";
    default: return "number " + v.dump();
  }
}

const nlohmann::json* JsonFields::find(const char* name) const {
  auto it = obj_.find(name);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::string> JsonFields::string(const char* name) const {
  const auto* v = find(name);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw invalid_field(name, "must be a string, got " + describe(*v));
  return v->get<std::string>();
}

std::string JsonFields::required_string(const char* name) const {
  auto s = string(name);
  if (!s) throw invalid_field(name, "is required");
  return *s;
}

std::optional<int64_t> JsonFields::integer(const char* name, int64_t min, int64_t max) const {
  const auto* v = find(name);
  if (!v) return std::nullopt;
  int64_t out = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > (uint64_t)INT64_MAX) {
      throw invalid_field(name, fmt::format("must be in [{}, {}], got {}", min, max, v->dump()));
    }
    out = v->get<int64_t>();
  } else if (v->is_number_float()) {
    const double d = v->get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15) {
      throw invalid_field(name, "must be a whole number, got " + describe(*v));
    }
    out = (int64_t)d;
  } else {
    throw invalid_field(name, "must be an integer, got " + describe(*v));
  }
  if (out < min || out > max) throw invalid_field(name, fmt::format("must be in [{}, {}], got {}", min, max, out));
  return out;
}

std::optional<double> JsonFields::number(const char* name, double min, double max) const {
  const auto* v = find(name);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw invalid_field(name, "must be a number, got " + describe(*v));
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < min || d > max) {
    throw invalid_field(name, fmt::format("must be in [{}, {}], got {}", min, max, v->dump()));
  }
  return d;
}

std::optional<bool> JsonFields::boolean(const char* name) const {
  const auto* v = find(name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) throw invalid_field(name, "must be true or false, got " + describe(*v));
  return v->get<bool>();
}

}  // namespace rbee::server
