// decode_image and its three decoders (rbee/sd/image_decode.h).
#include "rbee/sd/image_decode.h"

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <jpeglib.h>
#include <spng.h>
#include <webp/decode.h>

#include "rbee/core/error.h"

namespace rbee::sd {

namespace {

void check_pixels(const char* format, int64_t width, int64_t height, int64_t max_pixels) {
  RBEE_CHECK(width >= 1 && height >= 1, "{}: the image has no pixels ({}x{})", format, width, height);
  RBEE_CHECK(width * height <= max_pixels, "{}: {}x{} image exceeds {} pixels", format, width, height, max_pixels);
}

struct SpngFree {
  void operator()(spng_ctx* c) const { spng_ctx_free(c); }
};

// A JPEG error: libjpeg calls error_exit, which must not return; it jumps back to the decoder's setjmp with the
// message. No C++ object with a destructor lives between the setjmp and the libjpeg calls.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void jpeg_quiet(j_common_ptr, int) {}  // warnings (e.g. premature end of data) are not printed

// A progressive JPEG may hold any number of scans, each a pass over the whole image: a small file could keep a
// worker busy for minutes. More than kMaxScans is refused (libjpeg-turbo's advice for untrusted input).
constexpr int kMaxScans = 256;
struct JpegProgress {
  jpeg_progress_mgr mgr;
};
void jpeg_limit_scans(j_common_ptr cinfo) {
  if (cinfo->is_decompressor) {
    const auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
    if (d->input_scan_number > kMaxScans) {
      std::snprintf(reinterpret_cast<JpegError*>(cinfo->err)->message, JMSG_LENGTH_MAX,
                    "more than %d progressive scans", kMaxScans);
      std::longjmp(reinterpret_cast<JpegError*>(cinfo->err)->jump, 2);
    }
  }
}

}  // namespace

Image decode_png(const uint8_t* data, size_t size, int64_t max_pixels) {
  std::unique_ptr<spng_ctx, SpngFree> ctx(spng_ctx_new(0));
  RBEE_CHECK_CODE(ctx != nullptr, ErrorCode::OutOfMemory, "png: cannot create a decoder");
  // Bounds before anything is read: 2^24 per side (the format's own limit is 2^31), 16 MiB per chunk and 64 MiB of
  // ancillary chunks in total, so text or ICC chunks of a small hostile file cannot make us allocate much.
  spng_set_image_limits(ctx.get(), 1u << 24, 1u << 24);
  spng_set_chunk_limits(ctx.get(), 16u << 20, 64u << 20);
  int rc = spng_set_png_buffer(ctx.get(), data, size);
  spng_ihdr ihdr{};
  if (rc == 0) rc = spng_get_ihdr(ctx.get(), &ihdr);
  RBEE_CHECK(rc == 0, "png: {} (libspng error {})", spng_strerror(rc), rc);
  check_pixels("png", ihdr.width, ihdr.height, max_pixels);
  size_t bytes = 0;
  rc = spng_decoded_image_size(ctx.get(), SPNG_FMT_RGB8, &bytes);
  RBEE_CHECK(rc == 0, "png: {} (libspng error {})", spng_strerror(rc), rc);
  Image img;
  img.width = (int)ihdr.width;
  img.height = (int)ihdr.height;
  RBEE_CHECK(bytes == (size_t)img.width * img.height * 3, "png: libspng reports {} bytes for {}x{} RGB", bytes,
             img.width, img.height);
  img.rgb.resize(bytes);
  // No SPNG_DECODE_TRNS and no gamma: alpha and transparency are dropped, samples kept as stored.
  rc = spng_decode_image(ctx.get(), img.rgb.data(), bytes, SPNG_FMT_RGB8, 0);
  RBEE_CHECK(rc == 0, "png: {} (libspng error {})", spng_strerror(rc), rc);
  return img;
}

Image decode_jpeg(const uint8_t* data, size_t size, int64_t max_pixels) {
  jpeg_decompress_struct cinfo{};
  JpegError err{};
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  err.mgr.emit_message = jpeg_quiet;
  // Written after the setjmp and read after a longjmp: volatile (C11 7.13.2.1). Plain data only (see JpegError).
  volatile int width = 0, height = 0;
  uint8_t* volatile out = nullptr;
  const char* volatile refusal = nullptr;
  JpegProgress progress{};
  progress.mgr.progress_monitor = jpeg_limit_scans;
  cinfo.progress = &progress.mgr;
  if (const int why = setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    std::free(out);
    if (why == 1) RBEE_THROW(ErrorCode::InvalidArgument, "jpeg: {} (libjpeg-turbo)", err.message);
    RBEE_THROW(ErrorCode::InvalidArgument, "jpeg: {}", err.message);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, (unsigned long)size);
  jpeg_read_header(&cinfo, TRUE);
  width = (int)cinfo.image_width;
  height = (int)cinfo.image_height;
  if (width < 1 || height < 1 || (int64_t)width * height > max_pixels) {
    refusal = "size";
  } else if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    refusal = "cmyk";
  } else {
    cinfo.out_color_space = JCS_RGB;
    jpeg_start_decompress(&cinfo);
    const size_t row = (size_t)width * 3;
    out = static_cast<uint8_t*>(std::malloc(row * (size_t)height));
    if (!out) {
      refusal = "memory";
    } else {
      while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW rowp = (uint8_t*)out + (size_t)cinfo.output_scanline * row;
        jpeg_read_scanlines(&cinfo, &rowp, 1);
      }
      jpeg_finish_decompress(&cinfo);
    }
  }
  jpeg_destroy_decompress(&cinfo);
  if (refusal) {
    std::free(out);
    RBEE_CHECK_CODE(std::strcmp(refusal, "memory") != 0, ErrorCode::OutOfMemory, "jpeg: no memory for {}x{} pixels",
                    width, height);
    RBEE_CHECK(std::strcmp(refusal, "cmyk") != 0, "jpeg: CMYK/YCCK images are not supported; save it as RGB");
    check_pixels("jpeg", width, height, max_pixels);
  }
  Image img;
  img.width = width;
  img.height = height;
  uint8_t* pixels = out;
  img.rgb.assign(pixels, pixels + (size_t)width * height * 3);
  std::free(pixels);
  return img;
}

Image decode_webp(const uint8_t* data, size_t size, int64_t max_pixels) {
  WebPBitstreamFeatures f{};
  const VP8StatusCode st = WebPGetFeatures(data, size, &f);
  RBEE_CHECK(st == VP8_STATUS_OK, "webp: not a WebP image libwebp can read (status {})", (int)st);
  RBEE_CHECK(!f.has_animation, "webp: animated WebP images are not supported");
  check_pixels("webp", f.width, f.height, max_pixels);
  Image img;
  img.width = f.width;
  img.height = f.height;
  img.rgb.resize((size_t)f.width * f.height * 3);
  const uint8_t* ok = WebPDecodeRGBInto(data, size, img.rgb.data(), img.rgb.size(), f.width * 3);
  RBEE_CHECK(ok != nullptr, "webp: the image data does not decode (truncated or corrupt)");
  return img;
}

Image decode_image(const uint8_t* data, size_t size, int64_t max_pixels) {
  static constexpr uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (size >= 8 && std::memcmp(data, kPng, 8) == 0) return decode_png(data, size, max_pixels);
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) return decode_jpeg(data, size, max_pixels);
  if (size >= 12 && std::memcmp(data, "RIFF", 4) == 0 && std::memcmp(data + 8, "WEBP", 4) == 0) {
    return decode_webp(data, size, max_pixels);
  }
  RBEE_THROW(ErrorCode::InvalidArgument, "image: not a PNG, JPEG or WebP file (no known signature at offset 0)");
}

}  // namespace rbee::sd
