// PNG reader: every colour type and bit depth against Pillow's decoding (tests/data/png, made by
// tools/goldens/make_png_decode_goldens.py; one file uses each of the five row filters), the writer's output read
// back, and malformed input refused with Error(InvalidArgument) naming the problem.
#include <cctype>
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

// Refused with Error(InvalidArgument) whose message starts with "png: " and holds one of `needles` (lower case).
void expect_refused(const std::vector<uint8_t>& png, std::vector<std::string> needles, int64_t max_pixels = 1 << 24) {
  try {
    decode_png(png.data(), png.size(), max_pixels);
    ADD_FAILURE() << "accepted; expected an error with '" << needles[0] << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    std::string msg = e.message();
    EXPECT_EQ(msg.rfind("png: ", 0), 0u) << msg;
    for (auto& c : msg) c = (char)std::tolower((unsigned char)c);
    bool found = false;
    for (const auto& n : needles) found = found || msg.find(n) != std::string::npos;
    EXPECT_TRUE(found) << "'" << e.message() << "' names none of the expected reasons, e.g. '" << needles[0] << "'";
  }
}

// Rewrites the CRC of the chunk at `offset` after its bytes were edited.
void fix_crc(std::vector<uint8_t>& png, size_t offset) {
  const uint32_t len = (uint32_t)png[offset] << 24 | (uint32_t)png[offset + 1] << 16 | (uint32_t)png[offset + 2] << 8 |
                       png[offset + 3];
  const uint32_t c = crc32(png.data() + offset + 4, 4 + len);
  for (int k = 0; k < 4; ++k) png[offset + 8 + len + k] = (uint8_t)(c >> (24 - 8 * k));
}

// libspng decodes now (issue 13: a field-proven decoder for untrusted images); its reasons replace the ones our own
// chunk parser gave, so each case names the words of libspng's message.
TEST(SdPngDecode, RefusesMalformedInput) {
  const std::vector<uint8_t> good = read_bytes(png_data("rgb8.png"));
  expect_refused({}, {"eof", "buf", "invalid", "signature"});
  expect_refused({'G', 'I', 'F', '8', '9', 'a', 0, 0}, {"signature", "end of stream"});
  expect_refused(std::vector<uint8_t>(good.begin(), good.begin() + 20), {"eof", "end of", "buf"});
  expect_refused(std::vector<uint8_t>(good.begin(), good.begin() + good.size() / 2), {"eof", "end of", "buf"});

  std::vector<uint8_t> crc = good;
  crc[20] ^= 1;  // a byte of IHDR's height: libspng checks the limits before the CRC
  expect_refused(crc, {"crc", "limit"});
  std::vector<uint8_t> crc_only = good;
  crc_only[8 + 8 + 13] ^= 1;  // IHDR's CRC itself
  expect_refused(crc_only, {"crc", "checksum"});

  std::vector<uint8_t> depth = good;
  depth[24] = 4;  // 4-bit truecolour does not exist
  fix_crc(depth, 8);
  expect_refused(depth, {"bit depth", "depth"});

  expect_refused(good, {"exceeds 100 pixels"}, 100);

  // Bigger dimensions than the data holds: the inflated stream is too short.
  std::vector<uint8_t> taller = good;
  taller[23] = 12;  // height 11 -> 12
  fix_crc(taller, 8);
  expect_refused(taller, {"idat", "eof", "stream", "zlib", "inflate", "data"});

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
  expect_refused(bad_filter, {"filter"});
}

// A PNG that claims 2^24 x 2^24 pixels in a few dozen bytes is refused from its header, before any allocation.
TEST(SdPngDecode, HugeDimensionsRefusedBeforeDecoding) {
  std::vector<uint8_t> big = read_bytes(png_data("rgb8.png"));
  big[16] = 0x00, big[17] = 0xFF, big[18] = 0xFF, big[19] = 0xFF;  // width 2^24 - 1
  big[20] = 0x00, big[21] = 0xFF, big[22] = 0xFF, big[23] = 0xFF;  // height 2^24 - 1
  fix_crc(big, 8);
  expect_refused(big, {"exceeds", "limit"});
}

TEST(SdPngDecode, SurvivesEveryTruncationAndByteFlip) {
  const std::vector<uint8_t> good = read_bytes(png_data("palette4.png"));
  // A prefix either fails, or (libspng needs no IEND once the image data is complete) gives the whole image.
  const Image full = decode_png(good.data(), good.size());
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + (ptrdiff_t)n);
    try {
      const Image img = decode_png(cut.data(), cut.size());
      EXPECT_EQ(img.rgb, full.rgb) << "truncated to " << n << " decoded to another image";
    } catch (const Error&) {
    }
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
