#include "server/base64.h"

#include <fmt/format.h>

namespace rbee::server {

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int value_of(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}
}  // namespace

std::string base64_encode(const uint8_t* data, size_t size) {
  std::string out;
  out.reserve((size + 2) / 3 * 4);
  for (size_t i = 0; i < size; i += 3) {
    const uint32_t n = (uint32_t)data[i] << 16 | (i + 1 < size ? (uint32_t)data[i + 1] << 8 : 0u) |
                       (i + 2 < size ? (uint32_t)data[i + 2] : 0u);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < size ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < size ? kAlphabet[n & 63] : '=';
  }
  return out;
}

std::optional<std::vector<uint8_t>> base64_decode(std::string_view text, std::string* why) {
  auto fail = [why](std::string reason) -> std::optional<std::vector<uint8_t>> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  size_t start = 0;
  if (text.substr(0, 5) == "data:") {
    const size_t comma = text.find(',');
    if (comma == std::string_view::npos || text.substr(0, comma).find(";base64") == std::string_view::npos) {
      return fail("a data URL must be 'data:<type>;base64,<data>'");
    }
    start = comma + 1;
  }
  std::vector<uint8_t> out;
  out.reserve((text.size() - start) / 4 * 3);
  uint32_t acc = 0;
  int bits = 0, digits = 0, padding = 0;
  for (size_t i = start; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      ++padding;
      if (padding > 2) return fail(fmt::format("too much '=' padding at offset {}", i));
      continue;
    }
    const int v = value_of(c);
    if (v < 0) return fail(fmt::format("character {} at offset {} is not base64", (int)(unsigned char)c, i));
    if (padding) return fail(fmt::format("data after '=' padding at offset {}", i));
    acc = acc << 6 | (uint32_t)v;
    bits += 6;
    ++digits;
    if (bits >= 8) {
      bits -= 8;
      out.push_back((uint8_t)(acc >> bits));
      acc &= (1u << bits) - 1;
    }
  }
  if (digits % 4 == 1) return fail("the length is not valid base64 (one digit left over)");
  if (padding && (digits + padding) % 4 != 0) return fail("the '=' padding does not complete a 4-digit group");
  if (acc != 0) return fail("the last digit has bits set beyond the data (not canonical base64)");
  return out;
}

}  // namespace rbee::server
