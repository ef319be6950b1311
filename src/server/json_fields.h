// Typed, range-checked access to the fields of a JSON request body. Every getter throws ApiError(400) whose
// message names the field, the expected type or range and what was sent; a JSON null counts as absent.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace rbee::server {

// Parses a request body as one JSON object. Malformed JSON (invalid UTF-8 included) is 400 "invalid_json"
// with the byte offset; any other top-level value is 400 "invalid_request".
nlohmann::json parse_json_object(std::string_view body);

class JsonFields {
 public:
  explicit JsonFields(const nlohmann::json& object) : obj_(object) {}

  // The raw value, or nullptr when the field is absent or null.
  const nlohmann::json* find(const char* name) const;
  bool has(const char* name) const { return find(name) != nullptr; }

  std::optional<std::string> string(const char* name) const;
  std::string required_string(const char* name) const;
  // Whole numbers only (1.0 is accepted, 1.5 is not), in [min, max].
  std::optional<int64_t> integer(const char* name, int64_t min, int64_t max) const;
  // Finite numbers in [min, max].
  std::optional<double> number(const char* name, double min, double max) const;
  std::optional<bool> boolean(const char* name) const;

  // "what" for a value, short and safe to put in a message: its JSON type and, for scalars, its text.
  static std::string describe(const nlohmann::json& value);

 private:
  const nlohmann::json& obj_;
};

}  // namespace rbee::server
