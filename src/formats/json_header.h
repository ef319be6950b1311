// Strict JSON parsing for model files: safetensors headers, model.safetensors.index.json, config.json.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace rbee::formats {

// Deepest nesting of objects and arrays accepted (real headers and configs use a handful of levels).
inline constexpr int kMaxJsonDepth = 64;

// Parses `text` (found at byte `base_offset` of `source`) as one JSON object. Throws Error(Io) naming the
// source and the byte offset for a syntax error, a root that is not an object, a key repeated within one
// object, or nesting deeper than kMaxJsonDepth.
nlohmann::json parse_json_strict(std::string_view text, const std::string& source, uint64_t base_offset);

}  // namespace rbee::formats
