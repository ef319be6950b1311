// Lookup over the generated lower-case table (sd/unicode_lower.h).
#include <algorithm>

#include "rbee/text/utf8.h"
#include "sd/unicode_lower.h"

namespace rbee::sd::unicode_lower {

void append_lower(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back((char)(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
    return;
  }
  if (cp == 0x130) {  // the one code point whose lower case is two: "i" + COMBINING DOT ABOVE
    out.push_back('i');
    text::utf8::append(out, 0x307);
    return;
  }
  const LowerPair* end = kLower + kLowerCount;
  const LowerPair* it = std::lower_bound(kLower, end, cp, [](const LowerPair& p, uint32_t c) { return p.cp < c; });
  text::utf8::append(out, it != end && it->cp == cp ? it->lower : cp);
}

}  // namespace rbee::sd::unicode_lower
