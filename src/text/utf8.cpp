#include "rbee/text/utf8.h"

namespace rbee::text::utf8 {
namespace {

enum class Scan { Complete, Truncated, Invalid };

// Examines the character that starts at text[pos]. Complete: *len is its length. Truncated: the input ends
// inside a character whose bytes so far are well formed (*len of them). Invalid: *len (>= 1) is the length of
// the maximal ill-formed subpart to replace.
Scan scan(std::string_view text, size_t pos, int* len) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  const int n = sequence_length(b0);
  if (n == 0) {
    *len = 1;
    return Scan::Invalid;
  }
  for (int k = 1; k < n; ++k) {
    if (pos + k >= text.size()) {
      *len = k;
      return Scan::Truncated;
    }
    const auto b = static_cast<uint8_t>(text[pos + k]);
    uint8_t lo = 0x80, hi = 0xBF;
    if (k == 1) {  // the second byte carries the overlong / surrogate / range limits
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    }
    if (b < lo || b > hi) {
      *len = k;
      return Scan::Invalid;
    }
  }
  *len = n;
  return Scan::Complete;
}

}  // namespace

int sequence_length(uint8_t b) {
  if (b < 0x80) return 1;
  if (b < 0xC2) return 0;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  if (b < 0xF5) return 4;
  return 0;
}

size_t find_invalid(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    int len = 0;
    if (scan(text, pos, &len) != Scan::Complete) return pos;
    pos += len;
  }
  return std::string_view::npos;
}

int valid_length(std::string_view text, size_t pos) {
  int len = 0;
  return scan(text, pos, &len) == Scan::Complete ? len : 0;
}

int decode(std::string_view text, size_t pos, uint32_t* cp) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  const int n = sequence_length(b0);
  if (n <= 1) {
    *cp = b0;
    return 1;
  }
  uint32_t v = b0 & (0xFFu >> (n + 1));
  for (int k = 1; k < n && pos + k < text.size(); ++k) v = (v << 6) | (static_cast<uint8_t>(text[pos + k]) & 0x3Fu);
  *cp = v;
  return n;
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<std::string_view> split_chars(std::string_view text) {
  std::vector<std::string_view> chars;
  chars.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t n = static_cast<size_t>(sequence_length(static_cast<uint8_t>(text[pos])));
    if (n == 0) n = 1;
    if (pos + n > text.size()) n = text.size() - pos;
    chars.push_back(text.substr(pos, n));
    pos += n;
  }
  return chars;
}

size_t complete_prefix(std::string_view bytes) {
  // Only the last (at most 3) bytes can be the start of an unfinished character.
  size_t pos = bytes.size() > 3 ? bytes.size() - 3 : 0;
  while (pos < bytes.size()) {
    int len = 0;
    const Scan s = scan(bytes, pos, &len);
    if (s == Scan::Truncated) return pos;
    pos += static_cast<size_t>(len);
  }
  return bytes.size();
}

std::string sanitize(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    int len = 0;
    if (static_cast<uint8_t>(bytes[pos]) < 0x80) {
      out += bytes[pos++];
      continue;
    }
    if (scan(bytes, pos, &len) == Scan::Complete) {
      out.append(bytes.substr(pos, static_cast<size_t>(len)));
    } else {
      out += "\xEF\xBF\xBD";
    }
    pos += static_cast<size_t>(len);
  }
  return out;
}

}  // namespace rbee::text::utf8
