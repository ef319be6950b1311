// GPT-2's byte <-> Unicode mapping used by byte-level BPE vocabularies: every byte becomes one printable
// code point (printable Latin-1 bytes map to themselves, the other 68 to U+0100..U+0143), so "Ġ" (U+0120)
// in a vocabulary stands for the space byte 0x20.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rbee::text::byte_level {

// The code point byte `b` is written as.
uint32_t byte_to_codepoint(uint8_t b);
// The byte code point `cp` stands for, or -1 when `cp` is not one of the 256 mapped code points.
int codepoint_to_byte(uint32_t cp);

// Maps raw bytes to the vocabulary's alphabet (UTF-8 of the mapped code points).
std::string encode(std::string_view bytes);
// Maps vocabulary text back to raw bytes. Characters outside the alphabet are kept as their UTF-8 bytes
// (added tokens such as "<|im_end|>" are plain ASCII and map to themselves anyway). `text` must be valid UTF-8.
std::string decode(std::string_view text);

}  // namespace rbee::text::byte_level
