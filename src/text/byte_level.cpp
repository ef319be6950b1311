#include "rbee/text/byte_level.h"

#include <array>

#include "rbee/text/utf8.h"

namespace rbee::text::byte_level {
namespace {

struct Tables {
  std::array<uint32_t, 256> to_cp{};
  std::array<std::string, 256> to_utf8{};
  std::array<int16_t, 256 + 68> from_cp{};  // code point -> byte, -1 for code points outside the alphabet
  Tables() {
    from_cp.fill(-1);
    // Bytes that are printable and not space keep their code point; the rest take U+0100 upwards in order.
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = keep ? static_cast<uint32_t>(b) : next++;
      utf8::append(to_utf8[b], to_cp[b]);
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t b) { return tables().to_cp[b]; }

int codepoint_to_byte(uint32_t cp) { return cp < tables().from_cp.size() ? tables().from_cp[cp] : -1; }

std::string encode(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.to_utf8[static_cast<uint8_t>(c)];
  return out;
}

std::string decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    uint32_t cp = 0;
    const int n = utf8::decode(text, pos, &cp);
    const int b = codepoint_to_byte(cp);
    if (b >= 0) {
      out += static_cast<char>(b);
    } else {
      out.append(text.substr(pos, static_cast<size_t>(n)));
    }
    pos += static_cast<size_t>(n);
  }
  return out;
}

}  // namespace rbee::text::byte_level
