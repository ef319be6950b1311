// PNG reader (rbee/sd/png.h): chunk walk with CRC checks, zlib inflate of the IDAT stream, scanline unfiltering
// (PNG spec section 9), then conversion of any colour type to RGB8.
#include <zlib.h>

#include <cstring>

#include "rbee/core/error.h"
#include "rbee/sd/png.h"

namespace rbee::sd {
namespace {

uint32_t be32(const uint8_t* p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

struct Header {
  uint32_t width = 0, height = 0;
  int depth = 0, color = 0, interlace = 0;
  int channels() const { return color == 0 ? 1 : color == 2 ? 3 : color == 3 ? 1 : color == 4 ? 2 : 4; }
};

Header parse_ihdr(const uint8_t* d, uint32_t len, size_t offset) {
  RBEE_CHECK(len == 13, "png: IHDR at offset {} has {} bytes, not 13", offset, len);
  Header h;
  h.width = be32(d);
  h.height = be32(d + 4);
  h.depth = d[8];
  h.color = d[9];
  h.interlace = d[12];
  RBEE_CHECK(h.width >= 1 && h.height >= 1 && h.width <= (1u << 24) && h.height <= (1u << 24),
             "png: IHDR size {}x{} outside [1, 2^24]", h.width, h.height);
  const int c = h.color, b = h.depth;
  const bool ok = (c == 0 && (b == 1 || b == 2 || b == 4 || b == 8 || b == 16)) ||
                  (c == 3 && (b == 1 || b == 2 || b == 4 || b == 8)) || ((c == 2 || c == 4 || c == 6) && (b == 8 || b == 16));
  RBEE_CHECK(ok, "png: IHDR colour type {} with bit depth {} is not a valid PNG combination", c, b);
  RBEE_CHECK(d[10] == 0 && d[11] == 0, "png: IHDR compression {} / filter method {} unknown", d[10], d[11]);
  RBEE_CHECK(h.interlace == 0, "png: interlaced (Adam7) images are not supported; save the PNG without interlace");
  return h;
}

int paeth(int a, int b, int c) {
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

// Inflates `z` into exactly `expected` bytes (more output or a truncated stream is an error).
std::vector<uint8_t> inflate_all(const std::vector<uint8_t>& z, size_t expected) {
  std::vector<uint8_t> out(expected);
  z_stream s{};
  RBEE_CHECK(inflateInit(&s) == Z_OK, "png: zlib initialisation failed");
  s.next_in = const_cast<Bytef*>(z.data());
  s.avail_in = (uInt)z.size();
  s.next_out = out.data();
  s.avail_out = (uInt)out.size();
  const int rc = inflate(&s, Z_FINISH);
  const size_t produced = expected - s.avail_out;
  const std::string msg = s.msg ? s.msg : "";
  inflateEnd(&s);
  RBEE_CHECK(rc == Z_STREAM_END, "png: the image data does not inflate to {} bytes (zlib: {}, {} bytes out{}{})",
             expected, rc == Z_BUF_ERROR ? "truncated or too long" : rc == Z_DATA_ERROR ? "corrupt" : "error",
             produced, msg.empty() ? "" : ": ", msg);
  RBEE_CHECK(produced == expected, "png: the image data inflates to {} bytes, {} expected", produced, expected);
  return out;
}

}  // namespace

Image decode_png(const uint8_t* data, size_t size, int64_t max_pixels) {
  static constexpr uint8_t kSig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  RBEE_CHECK(size >= 8 && std::memcmp(data, kSig, 8) == 0, "png: no PNG signature at offset 0");
  Header h;
  bool have_header = false, have_end = false;
  std::vector<uint8_t> idat, palette;
  size_t pos = 8;
  while (pos < size && !have_end) {
    RBEE_CHECK(size - pos >= 12, "png: truncated chunk header at offset {}", pos);
    const uint32_t len = be32(data + pos);
    RBEE_CHECK(len <= size - pos - 12, "png: chunk at offset {} claims {} bytes past the end", pos, len);
    const uint8_t* type = data + pos + 4;
    const uint8_t* body = data + pos + 8;
    RBEE_CHECK(be32(body + len) == crc32(type, 4 + (size_t)len), "png: bad CRC of the chunk at offset {}", pos);
    if (std::memcmp(type, "IHDR", 4) == 0) {
      RBEE_CHECK(!have_header && pos == 8, "png: IHDR at offset {} is not the first chunk", pos);
      h = parse_ihdr(body, len, pos);
      have_header = true;
      RBEE_CHECK((int64_t)h.width * h.height <= max_pixels, "png: {}x{} image exceeds {} pixels", h.width, h.height,
                 max_pixels);
    } else {
      RBEE_CHECK(have_header, "png: chunk at offset {} comes before IHDR", pos);
      if (std::memcmp(type, "PLTE", 4) == 0) {
        RBEE_CHECK(len % 3 == 0 && len >= 3 && len <= 768, "png: PLTE at offset {} has {} bytes", pos, len);
        palette.assign(body, body + len);
      } else if (std::memcmp(type, "IDAT", 4) == 0) {
        idat.insert(idat.end(), body, body + len);
      } else if (std::memcmp(type, "IEND", 4) == 0) {
        have_end = true;
      } else {
        // Critical chunks (upper-case first letter) we do not know make the image undecodable.
        RBEE_CHECK((type[0] & 0x20) != 0, "png: unknown critical chunk '{}' at offset {}",
                   std::string(reinterpret_cast<const char*>(type), 4), pos);
      }
    }
    pos += 12 + (size_t)len;
  }
  RBEE_CHECK(have_header, "png: no IHDR chunk");
  RBEE_CHECK(have_end, "png: no IEND chunk before offset {} (truncated file)", size);
  RBEE_CHECK(!idat.empty(), "png: no IDAT chunk (no image data)");
  RBEE_CHECK(h.color != 3 || !palette.empty(), "png: palette image without a PLTE chunk");

  const int bits_per_pixel = h.depth * h.channels();
  const size_t stride = ((size_t)h.width * (size_t)bits_per_pixel + 7) / 8;
  const size_t bpp = std::max<size_t>(1, (size_t)bits_per_pixel / 8);  // filter distance in bytes
  std::vector<uint8_t> raw = inflate_all(idat, (stride + 1) * h.height);

  // Unfilter in place: row y's bytes follow its filter byte at raw[y * (stride + 1)].
  for (size_t y = 0; y < h.height; ++y) {
    uint8_t* row = raw.data() + y * (stride + 1);
    const int filter = row[0];
    RBEE_CHECK(filter <= 4, "png: row {} has filter type {} (0-4 exist)", y, filter);
    uint8_t* cur = row + 1;
    const uint8_t* prev = y > 0 ? raw.data() + (y - 1) * (stride + 1) + 1 : nullptr;
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= bpp ? cur[i - bpp] : 0, b = prev ? prev[i] : 0, c = prev && i >= bpp ? prev[i - bpp] : 0;
      int pred = 0;
      switch (filter) {
        case 1: pred = a; break;
        case 2: pred = b; break;
        case 3: pred = (a + b) / 2; break;
        case 4: pred = paeth(a, b, c); break;
        default: break;
      }
      cur[i] = (uint8_t)(cur[i] + pred);
    }
  }

  Image img;
  img.width = (int)h.width;
  img.height = (int)h.height;
  img.rgb.resize((size_t)h.width * h.height * 3);
  const int ch = h.channels();
  for (size_t y = 0; y < h.height; ++y) {
    const uint8_t* row = raw.data() + y * (stride + 1) + 1;
    for (size_t x = 0; x < h.width; ++x) {
      // Sample s of pixel x, scaled to 8 bits.
      auto sample = [&](int s) -> int {
        const size_t index = x * (size_t)ch + (size_t)s;
        if (h.depth == 16) return row[index * 2];
        if (h.depth == 8) return row[index];
        const size_t bit = index * (size_t)h.depth;
        const int v = (row[bit / 8] >> (8 - h.depth - (int)(bit % 8))) & ((1 << h.depth) - 1);
        return h.color == 3 ? v : v * 255 / ((1 << h.depth) - 1);
      };
      uint8_t* px = img.rgb.data() + (y * h.width + x) * 3;
      if (h.color == 3) {
        const int i = sample(0);
        RBEE_CHECK((size_t)i * 3 + 2 < palette.size(), "png: pixel ({}, {}) uses palette entry {} of {}", x, y, i,
                   palette.size() / 3);
        std::memcpy(px, palette.data() + i * 3, 3);
      } else if (h.color == 0 || h.color == 4) {
        px[0] = px[1] = px[2] = (uint8_t)sample(0);
      } else {
        for (int c = 0; c < 3; ++c) px[c] = (uint8_t)sample(c);
      }
    }
  }
  return img;
}

}  // namespace rbee::sd
