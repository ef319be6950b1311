// PNG writer: checksums against published check values, the chunk layout and pixels read back by an independent
// walk of the stored deflate blocks, tEXt round trip, and errors.
#include <cstring>

#include "rbee/core/error.h"
#include "rbee/sd/png.h"
#include "sd_test_util.h"

namespace rbee::sd {
namespace {

uint32_t be32(const uint8_t* p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

TEST(SdPng, ChecksumsMatchCheckValues) {
  const char* s = "123456789";
  EXPECT_EQ(crc32(reinterpret_cast<const uint8_t*>(s), 9), 0xCBF43926u);  // CRC-32 check value
  const char* w = "Wikipedia";
  EXPECT_EQ(adler32(reinterpret_cast<const uint8_t*>(w), 9), 0x11E60398u);
}

TEST(SdPng, LayoutPixelsAndText) {
  Image img;
  img.width = 300;  // 300 * 3 + 1 bytes per row: several stored blocks for 100 rows
  img.height = 100;
  img.rgb.resize((size_t)img.width * img.height * 3);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = (uint8_t)(i * 7 + i / 300);
  const std::string params = "a cat\nSteps: 20, Sampler: euler, Seed: 1";
  std::vector<uint8_t> png = encode_png(img, {{"parameters", params}});
  ASSERT_GT(png.size(), 8u + 25u);
  EXPECT_EQ(std::memcmp(png.data(), "\x89PNG\r\n\x1a\n", 8), 0);
  EXPECT_EQ(be32(png.data() + 8), 13u);  // IHDR
  EXPECT_EQ(std::memcmp(png.data() + 12, "IHDR", 4), 0);
  EXPECT_EQ(be32(png.data() + 16), 300u);
  EXPECT_EQ(be32(png.data() + 20), 100u);
  EXPECT_EQ(png[24], 8);
  EXPECT_EQ(png[25], 2);
  std::vector<uint8_t> z;  // the IDAT payload
  size_t pos = 8;
  bool iend = false;
  while (pos + 12 <= png.size()) {
    uint32_t len = be32(png.data() + pos);
    if (std::memcmp(png.data() + pos + 4, "IDAT", 4) == 0)
      z.insert(z.end(), png.begin() + (long)pos + 8, png.begin() + (long)(pos + 8 + len));
    if (std::memcmp(png.data() + pos + 4, "IEND", 4) == 0) iend = true;
    pos += 12 + len;
  }
  EXPECT_TRUE(iend);
  EXPECT_EQ(pos, png.size());
  ASSERT_GT(z.size(), 6u);
  EXPECT_EQ((z[0] * 256 + z[1]) % 31, 0);  // zlib header check bits
  std::vector<uint8_t> raw;
  size_t p = 2;
  for (bool last = false; !last;) {
    last = z[p] & 1;
    EXPECT_EQ(z[p] >> 1, 0);  // stored block
    uint32_t n = z[p + 1] | z[p + 2] << 8, nn = z[p + 3] | z[p + 4] << 8;
    EXPECT_EQ(n ^ 0xFFFFu, nn);
    raw.insert(raw.end(), z.begin() + (long)p + 5, z.begin() + (long)(p + 5 + n));
    p += 5 + n;
  }
  EXPECT_EQ(be32(z.data() + p), adler32(raw.data(), raw.size()));
  ASSERT_EQ(raw.size(), (size_t)(300 * 3 + 1) * 100);
  for (int y = 0; y < 100; ++y) {
    EXPECT_EQ(raw[(size_t)y * 901], 0);
    EXPECT_EQ(std::memcmp(raw.data() + (size_t)y * 901 + 1, img.rgb.data() + (size_t)y * 900, 900), 0) << "row " << y;
  }
  PngText text = read_png_text(png);
  ASSERT_EQ(text.size(), 1u);
  EXPECT_EQ(text[0].first, "parameters");
  EXPECT_EQ(text[0].second, params);
}

TEST(SdPng, Errors) {
  Image img;
  img.width = 2;
  img.height = 2;
  img.rgb.assign(11, 0);  // one byte short
  EXPECT_THROW(encode_png(img), Error);
  img.rgb.assign(12, 0);
  EXPECT_THROW(encode_png(img, {{"", "x"}}), Error);
  EXPECT_THROW(encode_png(img, {{std::string(80, 'k'), "x"}}), Error);
  EXPECT_THROW(encode_png(img, {{"k", std::string("a\0b", 3)}}), Error);
  std::vector<uint8_t> png = encode_png(img, {{"k", "v"}});
  std::vector<uint8_t> bad = png;
  bad[40] ^= 1;  // inside the tEXt chunk: CRC mismatch
  EXPECT_THROW(read_png_text(bad), Error);
  bad = png;
  bad.resize(30);
  EXPECT_THROW(read_png_text(bad), Error);
  EXPECT_THROW(read_png_text({1, 2, 3}), Error);
  img.width = 0;
  EXPECT_THROW(encode_png(img), Error);
}

}  // namespace
}  // namespace rbee::sd
