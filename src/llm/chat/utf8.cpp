#include "llm/chat/utf8.h"

#include "rbee/text/utf8.h"

namespace rbee::llm::jinja::utf8 {

namespace {
constexpr char32_t kRawByteBase = 0x110000;  // malformed byte b decodes to kRawByteBase + b
}  // namespace

char32_t next(std::string_view s, size_t& i) {
  // Well-formed characters only (no overlongs, surrogates or values past U+10FFFF), so encode(decode(s)) == s.
  const int len = text::utf8::valid_length(s, i);
  if (len == 0) return kRawByteBase + static_cast<unsigned char>(s[i++]);
  uint32_t cp = 0;
  text::utf8::decode(s, i, &cp);
  i += (size_t)len;
  return cp;
}

void append(std::string& out, char32_t cp) {
  if (cp >= kRawByteBase) out.push_back(static_cast<char>(cp - kRawByteBase));
  else text::utf8::append(out, cp);
}

std::vector<char32_t> decode(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(next(s, i));
  return out;
}

std::string encode(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append(out, cp);
  return out;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    next(s, i);
    ++n;
  }
  return n;
}

std::vector<size_t> boundaries(std::string_view s) {
  std::vector<size_t> out;
  out.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    out.push_back(i);
    next(s, i);
  }
  out.push_back(s.size());
  return out;
}

bool is_space(char32_t cp) {
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F)) return true;
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_digit(char32_t cp) { return cp >= '0' && cp <= '9'; }

bool is_alpha(char32_t cp) {
  if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return true;
  if (cp < 0x80) return false;
  return is_cased(cp) || cp == 0xDF || (cp >= 0x3040 && cp <= 0x30FF) || (cp >= 0x4E00 && cp <= 0x9FFF) ||
         (cp >= 0xAC00 && cp <= 0xD7A3);
}

// Python treats categories Cc, Cf, Cs, Co, Cn, Zl, Zp and Zs (except the space) as not printable. We know the
// control, separator, private-use and common format characters; unassigned code points count as printable.
bool is_printable(char32_t cp) {
  if (cp >= kRawByteBase) return false;
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
  if (cp < 0x600) return true;
  if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F || cp == 0x1680 || cp == 0x180E)
    return false;
  if ((cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x2064) ||
      (cp >= 0x2066 && cp <= 0x206F) || cp == 0x3000)
    return false;
  if ((cp >= 0xD800 && cp <= 0xF8FF) || cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB)) return false;
  if (cp == 0x110BD || (cp >= 0x1D173 && cp <= 0x1D17A) || cp == 0xE0001 || (cp >= 0xE0020 && cp <= 0xE007F))
    return false;
  if (cp >= 0xF0000) return false;
  return true;
}

char32_t to_lower(char32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 0x20;
  if (cp == 0x130) return 'i';  // Python gives 'i' + U+0307; the combining dot is dropped here
  if (cp >= 0x100 && cp <= 0x137) return cp | 1;
  if (cp >= 0x139 && cp <= 0x148) return (cp & 1) ? cp + 1 : cp;
  if (cp >= 0x14A && cp <= 0x177) return cp | 1;
  if (cp == 0x178) return 0xFF;
  if (cp >= 0x179 && cp <= 0x17E) return (cp & 1) ? cp + 1 : cp;
  if (cp == 0x386) return 0x3AC;
  if (cp >= 0x388 && cp <= 0x38A) return cp + 0x25;
  if (cp == 0x38C) return 0x3CC;
  if (cp == 0x38E || cp == 0x38F) return cp + 0x3F;
  if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return cp + 0x20;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 0x50;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 0x20;
  if (cp >= 0xFF21 && cp <= 0xFF3A) return cp + 0x20;
  return cp;
}

char32_t to_upper(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  if (cp == 0xB5) return 0x39C;
  if (cp >= 0xE0 && cp <= 0xFE && cp != 0xF7) return cp - 0x20;
  if (cp == 0xFF) return 0x178;
  if (cp >= 0x100 && cp <= 0x137 && cp != 0x130) return cp & ~char32_t{1};
  if (cp == 0x131) return 'I';
  if (cp >= 0x139 && cp <= 0x148) return (cp & 1) ? cp : cp - 1;
  if (cp >= 0x14A && cp <= 0x177) return cp & ~char32_t{1};
  if (cp >= 0x179 && cp <= 0x17E) return (cp & 1) ? cp : cp - 1;
  if (cp == 0x17F) return 'S';
  if (cp == 0x3AC) return 0x386;
  if (cp >= 0x3AD && cp <= 0x3AF) return cp - 0x25;
  if (cp == 0x3CC) return 0x38C;
  if (cp == 0x3CD || cp == 0x3CE) return cp - 0x3F;
  if (cp == 0x3C2) return 0x3A3;
  if (cp >= 0x3B1 && cp <= 0x3C9) return cp - 0x20;
  if (cp >= 0x430 && cp <= 0x44F) return cp - 0x20;
  if (cp >= 0x450 && cp <= 0x45F) return cp - 0x50;
  if (cp >= 0xFF41 && cp <= 0xFF5A) return cp - 0x20;
  return cp;
}

bool is_lower(char32_t cp) { return to_upper(cp) != cp || cp == 0xDF; }
bool is_upper(char32_t cp) { return to_lower(cp) != cp; }
bool is_cased(char32_t cp) { return is_lower(cp) || is_upper(cp); }

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = next(s, i);
    if (cp == 0xDF) {
      out += "SS";
    } else {
      append(out, to_upper(cp));
    }
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append(out, to_lower(next(s, i)));
  return out;
}

std::string strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<char32_t> set;
  if (chars) set = decode(*chars);
  auto strippable = [&](char32_t cp) {
    if (!chars) return is_space(cp);
    for (char32_t c : set)
      if (c == cp) return true;
    return false;
  };
  const std::vector<size_t> b = boundaries(s);
  size_t lo = 0;
  size_t hi = b.size() - 1;  // code point indices [lo, hi)
  auto cp_at = [&](size_t k) {
    size_t pos = b[k];
    return next(s, pos);
  };
  if (left)
    while (lo < hi && strippable(cp_at(lo))) ++lo;
  if (right)
    while (hi > lo && strippable(cp_at(hi - 1))) --hi;
  return std::string(s.substr(b[lo], b[hi] - b[lo]));
}

}  // namespace rbee::llm::jinja::utf8
