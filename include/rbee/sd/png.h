// PNG output of generated images: 8-bit RGB, no interlace, filter 0 on every row, the zlib stream written as
// stored (uncompressed) deflate blocks so no compression library is needed, and tEXt chunks for the generation
// parameters (key "parameters", as other SD tools write them).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "rbee/sd/pipeline.h"

namespace rbee::sd {

// Keys: 1-79 Latin-1 characters, no NUL; values: Latin-1 text without NUL (InvalidArgument otherwise).
using PngText = std::vector<std::pair<std::string, std::string>>;

std::vector<uint8_t> encode_png(const Image& image, const PngText& text = {});
void write_png_file(const std::string& path, const Image& image, const PngText& text = {});

// The tEXt chunks of a PNG (any PNG). Error(Io) naming the offset for a malformed chunk list or a bad CRC.
PngText read_png_text(const std::vector<uint8_t>& png);

// Decodes a PNG into 8-bit RGB: bit depths 1-16 of greyscale, truecolour, palette, grey+alpha and RGBA (alpha is
// dropped, 16-bit samples keep their high byte), every filter type, no interlace. Images larger than
// max_pixels are refused before decompressing. Error(InvalidArgument) naming the offset or the field of IHDR for
// anything malformed, truncated or unsupported (Adam7 interlace), never a crash.
Image decode_png(const uint8_t* data, size_t size, int64_t max_pixels = int64_t{4096} * 4096);

// CRC-32 (ISO 3309, as PNG uses) and Adler-32 (zlib) of a byte range.
uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc = 0);
uint32_t adler32(const uint8_t* data, size_t n);

}  // namespace rbee::sd
