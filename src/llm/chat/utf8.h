// UTF-8 as Python's str sees it, for the chat-template interpreter (on the shared rbee/text/utf8.h).
//
// Jinja runs on Python str, whose lengths, indices and slices count code points and whose strip()/split()
// know Unicode whitespace. Our strings are UTF-8 bytes, so everything that Python does per character goes
// through these helpers. Invalid UTF-8 is decoded leniently (each bad byte is one code point U+FFFD-like unit
// that round-trips as the original byte), so no input can make them read out of bounds.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace rbee::llm::jinja::utf8 {

// Decodes the code point starting at s[i] and advances i past it. A malformed sequence yields the single
// byte's value + 0x110000 (outside Unicode) so that encode() writes the byte back unchanged.
char32_t next(std::string_view s, size_t& i);
void append(std::string& out, char32_t cp);
std::vector<char32_t> decode(std::string_view s);
std::string encode(const std::vector<char32_t>& cps);
size_t length(std::string_view s);  // number of code points

// Byte offset of each code point plus the end (size = length + 1).
std::vector<size_t> boundaries(std::string_view s);

// Python str.isspace() (the same set `\s` matches in a str regex).
bool is_space(char32_t cp);
bool is_digit(char32_t cp);  // ASCII digits only
bool is_alpha(char32_t cp);  // letters we know a case for, plus other non-ASCII letters are not classified
bool is_printable(char32_t cp);  // Python str.isprintable() for one code point (approximation, see .cpp)

// Simple case mapping (one code point to one): ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic.
// Other scripts are returned unchanged. to_upper_str handles the one-to-many case Python knows best (ß -> SS).
char32_t to_lower(char32_t cp);
char32_t to_upper(char32_t cp);
bool is_cased(char32_t cp);
bool is_lower(char32_t cp);
bool is_upper(char32_t cp);
std::string upper(std::string_view s);
std::string lower(std::string_view s);

// Python strip family. `chars` null means whitespace; otherwise the set of code points in *chars.
std::string strip(std::string_view s, const std::string* chars, bool left, bool right);

}  // namespace rbee::llm::jinja::utf8
