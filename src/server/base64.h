// Base64 (RFC 4648 section 4, the standard alphabet with '=' padding), for images in JSON bodies.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rbee::server {

std::string base64_encode(const uint8_t* data, size_t size);
inline std::string base64_encode(const std::vector<uint8_t>& bytes) { return base64_encode(bytes.data(), bytes.size()); }

// Decodes base64 text; ASCII whitespace is skipped, padding is optional, a "data:<mime>;base64," prefix (a data
// URL, as browsers produce) is accepted. On bad input returns nullopt and sets *why (when given) to the reason
// and the offset of the first bad character.
std::optional<std::vector<uint8_t>> base64_decode(std::string_view text, std::string* why = nullptr);

}  // namespace rbee::server
