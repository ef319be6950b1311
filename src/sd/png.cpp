// PNG writer and tEXt reader (rbee/sd/png.h).
#include "rbee/sd/png.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "rbee/core/error.h"

namespace rbee::sd {
namespace {

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  return table;
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back((uint8_t)(v >> s));
}
uint32_t get_u32(const uint8_t* p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

void chunk(std::vector<uint8_t>& out, const char type[4], const std::vector<uint8_t>& data) {
  put_u32(out, (uint32_t)data.size());
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put_u32(out, crc32(out.data() + start, out.size() - start));
}

constexpr uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

}  // namespace

uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc) {
  uint32_t c = crc ^ 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = crc_table()[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t adler32(const uint8_t* data, size_t n) {
  uint32_t a = 1, b = 0;
  for (size_t i = 0; i < n; ++i) {
    a = (a + data[i]) % 65521u;
    b = (b + a) % 65521u;
  }
  return b << 16 | a;
}

std::vector<uint8_t> encode_png(const Image& image, const PngText& text) {
  RBEE_CHECK(image.width > 0 && image.height > 0 && image.width <= 1 << 16 && image.height <= 1 << 16,
             "png: image size {}x{} outside [1, 65536]", image.width, image.height);
  const size_t row = (size_t)image.width * 3;
  RBEE_CHECK(image.rgb.size() == row * (size_t)image.height, "png: {}x{} RGB image needs {} bytes, has {}", image.width,
             image.height, row * (size_t)image.height, image.rgb.size());
  std::vector<uint8_t> out(kSignature, kSignature + 8);
  std::vector<uint8_t> ihdr;
  put_u32(ihdr, (uint32_t)image.width);
  put_u32(ihdr, (uint32_t)image.height);
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8 bits, truecolour, deflate, filter method 0, no interlace
  chunk(out, "IHDR", ihdr);
  for (const auto& [key, value] : text) {
    RBEE_CHECK(!key.empty() && key.size() <= 79 && key.find('\0') == std::string::npos,
               "png: text key '{}' must be 1-79 characters without NUL", key);
    RBEE_CHECK(value.find('\0') == std::string::npos, "png: text value of '{}' contains NUL", key);
    std::vector<uint8_t> data(key.begin(), key.end());
    data.push_back(0);
    data.insert(data.end(), value.begin(), value.end());
    chunk(out, "tEXt", data);
  }
  // Raw scanlines: filter byte 0, then the row.
  std::vector<uint8_t> raw;
  raw.reserve((row + 1) * (size_t)image.height);
  for (int y = 0; y < image.height; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), image.rgb.begin() + (ptrdiff_t)(row * (size_t)y), image.rgb.begin() + (ptrdiff_t)(row * (size_t)(y + 1)));
  }
  // zlib: header (deflate, 32K window, no dictionary, check bits), stored blocks of <= 65535 bytes, Adler-32.
  std::vector<uint8_t> z{0x78, 0x01};
  size_t pos = 0;
  do {
    const size_t n = std::min<size_t>(65535, raw.size() - pos);
    const bool last = pos + n == raw.size();
    z.push_back(last ? 1 : 0);
    z.push_back((uint8_t)(n & 0xFF));
    z.push_back((uint8_t)(n >> 8));
    z.push_back((uint8_t)(~n & 0xFF));
    z.push_back((uint8_t)((~n >> 8) & 0xFF));
    z.insert(z.end(), raw.begin() + (ptrdiff_t)pos, raw.begin() + (ptrdiff_t)(pos + n));
    pos += n;
  } while (pos < raw.size());
  put_u32(z, adler32(raw.data(), raw.size()));
  chunk(out, "IDAT", z);
  chunk(out, "IEND", {});
  return out;
}

void write_png_file(const std::string& path, const Image& image, const PngText& text) {
  const std::vector<uint8_t> bytes = encode_png(image, text);
  // Plain write(2) calls, each checked, and close(2) checked too: a full disk (ENOSPC) or a quota shows up at the
  // write or only at the close, and a stream's buffered tail would hide it. A partial regular file is removed.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  RBEE_CHECK_CODE(fd >= 0, ErrorCode::Io, "png: cannot create '{}': {}", path, std::strerror(errno));
  size_t done = 0;
  int err = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    done += (size_t)n;
  }
  struct stat st {};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    if (regular) ::unlink(path.c_str());
    RBEE_THROW(ErrorCode::Io, "png: writing '{}' failed after {} of {} bytes: {}", path, done, bytes.size(),
               std::strerror(err));
  }
}

PngText read_png_text(const std::vector<uint8_t>& png) {
  RBEE_CHECK_CODE(png.size() >= 8 && std::memcmp(png.data(), kSignature, 8) == 0, ErrorCode::Io,
                  "png: no PNG signature at offset 0");
  PngText text;
  size_t pos = 8;
  while (pos < png.size()) {
    RBEE_CHECK_CODE(png.size() - pos >= 12, ErrorCode::Io, "png: truncated chunk header at offset {}", pos);
    const uint32_t len = get_u32(png.data() + pos);
    RBEE_CHECK_CODE(len <= png.size() - pos - 12, ErrorCode::Io, "png: chunk at offset {} claims {} bytes past the end",
                    pos, len);
    const uint8_t* type = png.data() + pos + 4;
    const uint32_t crc = get_u32(png.data() + pos + 8 + len);
    RBEE_CHECK_CODE(crc == crc32(type, 4 + (size_t)len), ErrorCode::Io, "png: bad CRC of the chunk at offset {}", pos);
    if (std::memcmp(type, "tEXt", 4) == 0) {
      const uint8_t* d = type + 4;
      const uint8_t* nul = static_cast<const uint8_t*>(std::memchr(d, 0, len));
      RBEE_CHECK_CODE(nul != nullptr, ErrorCode::Io, "png: tEXt chunk at offset {} has no key separator", pos);
      text.emplace_back(std::string(d, nul), std::string(nul + 1, d + len));
    }
    if (std::memcmp(type, "IEND", 4) == 0) break;
    pos += 12 + (size_t)len;
  }
  return text;
}

}  // namespace rbee::sd
