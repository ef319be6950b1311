#include "formats/json_header.h"

#include <set>
#include <vector>

#include "rbee/core/error.h"

namespace rbee::formats {

using nlohmann::json;

json parse_json_strict(std::string_view text, const std::string& source, uint64_t base_offset) {
  // Keys seen in each open object, innermost last. nlohmann keeps the last of repeated keys silently; a model
  // file that says two things about one tensor is refused instead.
  std::vector<std::set<std::string>> open_objects;
  std::string problem;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    if (!problem.empty()) return false;
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth > kMaxJsonDepth) {
          problem = fmt::format("JSON nested deeper than {} levels", kMaxJsonDepth);
          return false;
        }
        if (event == json::parse_event_t::object_start) open_objects.emplace_back();
        return true;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        return true;
      case json::parse_event_t::key:
        if (!open_objects.empty() && parsed.is_string() &&
            !open_objects.back().insert(parsed.get<std::string>()).second) {
          const std::string& key = parsed.get_ref<const std::string&>();
          problem = fmt::format("JSON key '{}' appears twice in one object", key.substr(0, 64));
          return false;
        }
        return true;
      default:
        return true;
    }
  };
  json result;
  try {
    result = json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::parse_error& e) {
    // e.byte is 1-based and may point one past the end for truncated input.
    const uint64_t at = base_offset + (e.byte > 0 ? e.byte - 1 : 0);
    RBEE_THROW(ErrorCode::Io, "{}: byte {}: invalid JSON: {}", source, at, e.what());
  } catch (const json::exception& e) {
    // Other parser failures (a number too large for a double throws out_of_range) carry no position.
    RBEE_THROW(ErrorCode::Io, "{}: byte {}: invalid JSON: {}", source, base_offset, e.what());
  }
  if (!problem.empty()) RBEE_THROW(ErrorCode::Io, "{}: byte {}: {}", source, base_offset, problem);
  if (!result.is_object())
    RBEE_THROW(ErrorCode::Io, "{}: byte {}: JSON root is {}, not an object", source, base_offset, result.type_name());
  return result;
}

}  // namespace rbee::formats
