// PNG reader: every colour type and bit depth against Pillow's decoding (tests/data/png, made by
// tools/goldens/make_png_decode_goldens.py; one file uses each of the five row filters), the writer's output read
// back, and malformed input refused with Error(InvalidArgument) naming the problem.
#include <fstream>
#include <iterator>

#include "rbee/core/error.h"
#include "rbee/sd/png.h"
#include "sd_test_util.h"

namespace rbee::sd {
namespace {

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
std::string png_data(const std::string& rel) { return std::string(RBEE_SOURCE_DIR) + "/tests/data/png/" + rel; }

class PngGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(PngGolden, MatchesPillow) {
  const std::string name = GetParam();
  const std::vector<uint8_t> png = read_bytes(png_data(name + ".png"));
  const std::vector<uint8_t> want = read_bytes(png_data(name + ".rgb"));
  const Image img = decode_png(png.data(), png.size());
  EXPECT_EQ(img.width, 37);
  EXPECT_EQ(img.height, 11);
  ASSERT_EQ(img.rgb.size(), want.size());
  size_t bad = 0, first = want.size();
  for (size_t i = 0; i < want.size(); ++i) {
    if (img.rgb[i] != want[i]) {
      ++bad;
      first = std::min(first, i);
    }
  }
  EXPECT_EQ(bad, 0u) << name << ": first difference at byte " << first;
}

INSTANTIATE_TEST_SUITE_P(Pillow, PngGolden,
                         ::testing::Values("rgb8", "rgba8", "gray8", "gray1", "gray_alpha8", "palette8", "palette4",
                                           "gray16", "rgb8_every_filter"));

TEST(SdPngDecode, ReadsWhatTheWriterWrites) {
  Image img;
  img.width = 300;  // several stored deflate blocks
  img.height = 70;
  img.rgb.resize((size_t)img.width * img.height * 3);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = (uint8_t)(i * 13 + i / 7);
  const std::vector<uint8_t> png = encode_png(img, {{"parameters", "x"}});
  const Image back = decode_png(png.data(), png.size());
  EXPECT_EQ(back.width, img.width);
  EXPECT_EQ(back.height, img.height);
  EXPECT_EQ(back.rgb, img.rgb);
}

void expect_refused(const std::vector<uint8_t>& png, const std::string& needle, int64_t max_pixels = 1 << 24) {
  try {
    decode_png(png.data(), png.size(), max_pixels);
    ADD_FAILURE() << "accepted; expected an error with '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
  }
}

// Rewrites the CRC of the chunk at `offset` after its bytes were edited.
void fix_crc(std::vector<uint8_t>& png, size_t offset) {
  const uint32_t len = (uint32_t)png[offset] << 24 | (uint32_t)png[offset + 1] << 16 | (uint32_t)png[offset + 2] << 8 |
                       png[offset + 3];
  const uint32_t c = crc32(png.data() + offset + 4, 4 + len);
  for (int k = 0; k < 4; ++k) png[offset + 8 + len + k] = (uint8_t)(c >> (24 - 8 * k));
}

TEST(SdPngDecode, RefusesMalformedInput) {
  const std::vector<uint8_t> good = read_bytes(png_data("rgb8.png"));
  expect_refused({}, "signature");
  expect_refused({'G', 'I', 'F', '8', '9', 'a', 0, 0}, "signature");
  expect_refused(std::vector<uint8_t>(good.begin(), good.begin() + 20), "chunk at offset 8 claims 13 bytes past the end");
  expect_refused(std::vector<uint8_t>(good.begin(), good.begin() + good.size() / 2), "offset");

  std::vector<uint8_t> crc = good;
  crc[20] ^= 1;  // a byte of IHDR's data
  expect_refused(crc, "bad CRC of the chunk at offset 8");

  std::vector<uint8_t> interlaced = good;
  interlaced[28] = 1;  // IHDR interlace method
  fix_crc(interlaced, 8);
  expect_refused(interlaced, "interlaced");

  std::vector<uint8_t> depth = good;
  depth[24] = 4;  // 4-bit truecolour does not exist
  fix_crc(depth, 8);
  expect_refused(depth, "bit depth 4");

  expect_refused(good, "exceeds 100 pixels", 100);

  // Bigger dimensions than the data holds: the inflated stream is too short.
  std::vector<uint8_t> taller = good;
  taller[23] = 12;  // height 11 -> 12
  fix_crc(taller, 8);
  expect_refused(taller, "inflates to 1232 bytes, 1344 expected");

  // A filter type byte out of range (our own writer's stored block: the first row's filter byte is in the clear).
  Image img;
  img.width = 4;
  img.height = 2;
  img.rgb.assign(24, 7);
  std::vector<uint8_t> bad_filter = encode_png(img);
  // IDAT follows IHDR (33 bytes in): 8 header bytes, zlib header 2, stored block header 5, then row 0's filter byte.
  const size_t idat = 33;
  ASSERT_EQ(std::string(bad_filter.begin() + idat + 4, bad_filter.begin() + idat + 8), "IDAT");
  bad_filter[idat + 8 + 2 + 5] = 9;
  // Keep zlib's Adler-32 consistent so that only the filter byte is wrong.
  const size_t zlen = (size_t)bad_filter[idat + 3];
  const size_t adler_at = idat + 8 + zlen - 4;
  std::vector<uint8_t> raw(bad_filter.begin() + idat + 8 + 2 + 5, bad_filter.begin() + adler_at);
  const uint32_t a = adler32(raw.data(), raw.size());
  for (int k = 0; k < 4; ++k) bad_filter[adler_at + k] = (uint8_t)(a >> (24 - 8 * k));
  fix_crc(bad_filter, idat);
  expect_refused(bad_filter, "filter type 9");
}

TEST(SdPngDecode, SurvivesEveryTruncationAndByteFlip) {
  const std::vector<uint8_t> good = read_bytes(png_data("palette4.png"));
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + (ptrdiff_t)n);
    EXPECT_THROW(decode_png(cut.data(), cut.size()), Error) << "truncated to " << n;
  }
  for (size_t i = 0; i < good.size(); ++i) {
    std::vector<uint8_t> flipped = good;
    flipped[i] ^= 0x5A;
    try {
      decode_png(flipped.data(), flipped.size());  // any outcome but a crash or another exception type
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace rbee::sd
