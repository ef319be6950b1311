// PNG output of generated images: 8-bit RGB, no interlace, filter 0 on every row, the zlib stream written as
// stored (uncompressed) deflate blocks so no compression library is needed, and tEXt chunks for the generation
// parameters (key "parameters", as other SD tools write them).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "rbee/sd/image_decode.h"
#include "rbee/sd/pipeline.h"

namespace rbee::sd {

// Keys: 1-79 Latin-1 characters, no NUL; values: Latin-1 text without NUL (InvalidArgument otherwise).
using PngText = std::vector<std::pair<std::string, std::string>>;

std::vector<uint8_t> encode_png(const Image& image, const PngText& text = {});
void write_png_file(const std::string& path, const Image& image, const PngText& text = {});

// The tEXt chunks of a PNG (any PNG). Error(Io) naming the offset for a malformed chunk list or a bad CRC.
PngText read_png_text(const std::vector<uint8_t>& png);

// Decoding PNG (and JPEG, WebP) input images: rbee/sd/image_decode.h (libspng, libjpeg-turbo, libwebp).

// CRC-32 (ISO 3309, as PNG uses) and Adler-32 (zlib) of a byte range.
uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc = 0);
uint32_t adler32(const uint8_t* data, size_t n);

}  // namespace rbee::sd
