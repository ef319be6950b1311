// Decoding of untrusted input images (img2img init images, inpaint masks) through field-proven libraries from
// Debian: PNG by libspng, JPEG by libjpeg-turbo, WebP by libwebp. The format is told by the file's signature.
// Every decoder reads the image's dimensions first and refuses more than max_pixels before it allocates or
// decompresses anything; PNG chunk sizes are bounded too, so a small file cannot make the worker allocate much.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rbee/sd/pipeline.h"

namespace rbee::sd {

inline constexpr int64_t kDefaultMaxImagePixels = int64_t{4096} * 4096;

// Any of PNG, JPEG, WebP -> 8-bit RGB (alpha dropped, 16-bit samples reduced to 8, palettes expanded, interlaced
// PNG and progressive JPEG included). Error(InvalidArgument) naming the format and the decoder's reason for
// anything malformed, truncated, unsupported (e.g. CMYK JPEG, animated WebP) or larger than max_pixels.
Image decode_image(const uint8_t* data, size_t size, int64_t max_pixels = kDefaultMaxImagePixels);

// The decoders decode_image picks from, for callers that know the format.
Image decode_png(const uint8_t* data, size_t size, int64_t max_pixels = kDefaultMaxImagePixels);
Image decode_jpeg(const uint8_t* data, size_t size, int64_t max_pixels = kDefaultMaxImagePixels);
Image decode_webp(const uint8_t* data, size_t size, int64_t max_pixels = kDefaultMaxImagePixels);

}  // namespace rbee::sd
