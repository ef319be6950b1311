// UTF-8 helpers shared by the tokenizers, the chat-template interpreter and the CLIP tokenizer: validation with
// the offending offset, code point iteration, encoding, and the length of a well-formed prefix (for the
// streaming decoder).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rbee::text::utf8 {

// Length of the sequence that lead byte `b` starts (1..4), or 0 when `b` cannot start a character
// (a continuation byte, or 0xC0, 0xC1, 0xF5..0xFF).
int sequence_length(uint8_t b);

// Offset of the first byte that is not part of a well-formed UTF-8 character (overlongs, surrogates and
// code points above U+10FFFF are ill-formed), or npos when the whole text is valid.
size_t find_invalid(std::string_view text);

// Length (1..4) of the well-formed character that starts at text[pos], or 0 when the bytes there are not one.
int valid_length(std::string_view text, size_t pos);

// Decodes the character at text[pos] into *cp and returns its length; text must be valid UTF-8 there.
int decode(std::string_view text, size_t pos, uint32_t* cp);

// Appends the UTF-8 encoding of code point `cp` (must be <= U+10FFFF and not a surrogate).
void append(std::string& out, uint32_t cp);

// Splits valid UTF-8 text into its characters, each as a view into `text`.
std::vector<std::string_view> split_chars(std::string_view text);

// How a byte string ends: `complete` is the length of the longest prefix that may be emitted now; the
// remaining bytes (at most 3) are the start of a character that further bytes could complete.
size_t complete_prefix(std::string_view bytes);

// Replaces every ill-formed sequence by U+FFFD (one replacement per maximal invalid subpart, as WHATWG and
// Python's errors="replace" do).
std::string sanitize(std::string_view bytes);

}  // namespace rbee::text::utf8
