// Unicode lower-case mapping of single code points (generated into unicode_lower.cpp by tools/gen_unicode_lower.py),
// as Hugging Face tokenizers' Lowercase normalizer applies it: every code point on its own, full mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rbee::sd::unicode_lower {

struct LowerPair {
  uint32_t cp, lower;
};
extern const char* const kUnicodeVersion;
extern const LowerPair kLower[];  // sorted by cp
extern const size_t kLowerCount;

// Appends the UTF-8 lower case of `cp` to `out` (U+0130 becomes "i" U+0307; code points without a lower case are
// appended as they are).
void append_lower(std::string& out, uint32_t cp);

}  // namespace rbee::sd::unicode_lower
