// JPEG and WebP input images (libjpeg-turbo, libwebp) and the format dispatch of decode_image. The files are made
// here by the libraries' own encoders from a known image: lossless WebP must come back exactly, JPEG (quality 95)
// close to the original; malformed, truncated and oversized inputs give Error(InvalidArgument), never a crash.
#include <csetjmp>
#include <cstdio>

#include <jpeglib.h>
#include <webp/encode.h>

#include "rbee/core/error.h"
#include "rbee/sd/image_decode.h"
#include "rbee/sd/png.h"
#include "sd_test_util.h"

namespace rbee::sd {
namespace {

// A smooth gradient with a few edges (JPEG keeps it within a few levels at quality 95).
Image test_image(int w, int h) {
  Image img;
  img.width = w;
  img.height = h;
  img.rgb.resize((size_t)w * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &img.rgb[((size_t)y * w + x) * 3];
      p[0] = (uint8_t)(x * 255 / (w - 1));
      p[1] = (uint8_t)(y * 255 / (h - 1));
      p[2] = (uint8_t)((x + y) < (w + h) / 2 ? 40 : 200);
    }
  }
  return img;
}

std::vector<uint8_t> encode_webp_lossless(const Image& img) {
  uint8_t* out = nullptr;
  const size_t n = WebPEncodeLosslessRGB(img.rgb.data(), img.width, img.height, img.width * 3, &out);
  std::vector<uint8_t> v(out, out + n);
  WebPFree(out);
  return v;
}

std::vector<uint8_t> encode_jpeg(const Image& img, bool progressive) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = (JDIMENSION)img.width;
  c.image_height = (JDIMENSION)img.height;
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 95, TRUE);
  if (progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(&img.rgb[(size_t)c.next_scanline * img.width * 3]);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::vector<uint8_t> v(buf, buf + size);
  std::free(buf);
  return v;
}

double mean_abs_diff(const Image& a, const Image& b) {
  double sum = 0;
  for (size_t i = 0; i < a.rgb.size(); ++i) sum += std::abs((int)a.rgb[i] - (int)b.rgb[i]);
  return sum / (double)a.rgb.size();
}

void expect_refused(const std::vector<uint8_t>& bytes, const std::string& needle, int64_t max_pixels) {
  try {
    decode_image(bytes.data(), bytes.size(), max_pixels);
    ADD_FAILURE() << "accepted; expected '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
  }
}

TEST(SdImageDecode, WebpLosslessRoundTrip) {
  const Image img = test_image(53, 31);
  const auto webp = encode_webp_lossless(img);
  const Image back = decode_image(webp.data(), webp.size());
  EXPECT_EQ(back.width, 53);
  EXPECT_EQ(back.height, 31);
  EXPECT_EQ(back.rgb, img.rgb);
  expect_refused(webp, "webp: 53x31 image exceeds 1000 pixels", 1000);
}

TEST(SdImageDecode, JpegBaselineAndProgressive) {
  const Image img = test_image(64, 48);
  for (bool progressive : {false, true}) {
    const auto jpg = encode_jpeg(img, progressive);
    const Image back = decode_image(jpg.data(), jpg.size());
    ASSERT_EQ(back.width, 64);
    ASSERT_EQ(back.height, 48);
    EXPECT_LT(mean_abs_diff(back, img), 3.0) << (progressive ? "progressive" : "baseline");
    expect_refused(jpg, "jpeg: 64x48 image exceeds 3000 pixels", 3000);
  }
}

TEST(SdImageDecode, PngThroughTheDispatch) {
  const Image img = test_image(20, 10);
  const auto png = encode_png(img);
  EXPECT_EQ(decode_image(png.data(), png.size()).rgb, img.rgb);
}

TEST(SdImageDecode, UnknownFormatsAndGarbage) {
  expect_refused({}, "not a PNG, JPEG or WebP", 1 << 20);
  expect_refused({'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0}, "not a PNG, JPEG or WebP", 1 << 20);
  expect_refused({0xFF, 0xD8, 0xFF, 0xE0, 0, 0}, "jpeg:", 1 << 20);
  expect_refused({'R', 'I', 'F', 'F', 4, 0, 0, 0, 'W', 'E', 'B', 'P'}, "webp:", 1 << 20);
}

// Every prefix and many byte flips of a JPEG and a WebP file: an Error or an image, never a crash or a leak (the
// sanitizer build runs this).
TEST(SdImageDecode, SurvivesTruncationAndByteFlips) {
  const Image img = test_image(24, 16);
  for (const auto& file : {encode_jpeg(img, false), encode_jpeg(img, true), encode_webp_lossless(img)}) {
    for (size_t n = 0; n < file.size(); n += 1 + n / 64) {
      try {
        decode_image(file.data(), n);
      } catch (const Error&) {
      }
    }
    for (size_t i = 0; i < file.size(); i += 1 + i / 32) {
      std::vector<uint8_t> flipped = file;
      flipped[i] ^= 0xA5;
      try {
        decode_image(flipped.data(), flipped.size());
      } catch (const Error&) {
      }
    }
  }
}

}  // namespace
}  // namespace rbee::sd
