// `rbee sd` as a user runs it, on the tiny SD 1.5 pipeline: the PNG it writes is read back here independently
// (chunk walk, CRCs and zlib inflate written from the PNG spec, not rbee's reader), with the asked size, real
// pixels and the parameters text chunk; the same seed gives the same file; bad arguments exit non-zero with a
// message naming the option.
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cli_run.h"

namespace {

const std::string kTinySd = std::string(RBEE_SOURCE_DIR) + "/tests/data/tiny_sd/sd15";

rbee::test::CliRun rbee_sd(const std::string& args) {
  return rbee::test::run_command(std::string(RBEE_CLI) + " sd " + args + " 2>&1");
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

uint32_t be32(const uint8_t* p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

struct Png {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rows;  // (1 + 3 * width) bytes per row: filter byte, then RGB
  std::map<std::string, std::string> text;
};

// An 8-bit RGB PNG, checked chunk by chunk; ADD_FAILURE on anything off.
Png parse_png(const std::vector<uint8_t>& b) {
  Png png;
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (b.size() < 8 || std::memcmp(b.data(), sig, 8) != 0) {
    ADD_FAILURE() << "no PNG signature";
    return png;
  }
  std::vector<uint8_t> idat;
  size_t pos = 8;
  bool end = false;
  while (pos + 12 <= b.size() && !end) {
    const uint32_t len = be32(&b[pos]);
    if (pos + 12 + len > b.size()) break;
    const std::string type(reinterpret_cast<const char*>(&b[pos + 4]), 4);
    const uint8_t* data = &b[pos + 8];
    EXPECT_EQ(::crc32(0, &b[pos + 4], 4 + len), be32(data + len)) << "CRC of " << type;
    if (type == "IHDR") {
      png.width = be32(data);
      png.height = be32(data + 4);
      EXPECT_EQ(data[8], 8);  // bit depth
      EXPECT_EQ(data[9], 2);  // truecolour
    } else if (type == "IDAT") {
      idat.insert(idat.end(), data, data + len);
    } else if (type == "tEXt") {
      const char* d = reinterpret_cast<const char*>(data);
      const size_t key_len = strnlen(d, len);
      png.text[std::string(d, key_len)] = std::string(d + key_len + 1, d + len);
    } else if (type == "IEND") {
      end = true;
    }
    pos += 12 + len;
  }
  EXPECT_TRUE(end) << "no IEND";
  uLongf n = (uLongf)(png.height * (1 + 3 * png.width));
  png.rows.resize(n);
  EXPECT_EQ(uncompress(png.rows.data(), &n, idat.data(), (uLong)idat.size()), Z_OK);
  EXPECT_EQ(n, png.rows.size());
  return png;
}

std::string tmp_png(const char* name) { return ::testing::TempDir() + "rbee_sd_cli_" + name + ".png"; }

TEST(SdCli, WritesPngWithSizeAndParameters) {
  const std::string out = tmp_png("a");
  std::remove(out.c_str());
  const rbee::test::CliRun r = rbee_sd("-m " + kTinySd + " -p 'a blue cube' -n 'blurry' --steps 2 -W 256 -H 192 -s 42 "
                                       "--sampler ddim -g 0 --backend cpu -o " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("s per image"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("it/s"), std::string::npos) << r.output;
  const Png png = parse_png(read_file(out));
  EXPECT_EQ(png.width, 256u);
  EXPECT_EQ(png.height, 192u);
  std::set<uint8_t> values;
  for (size_t y = 0; y < png.height; ++y) {
    for (size_t i = 1; i <= 3 * png.width; ++i) values.insert(png.rows[y * (1 + 3 * png.width) + i]);
  }
  EXPECT_GT(values.size(), 10u) << "a flat image";
  ASSERT_EQ(png.text.count("parameters"), 1u);
  const std::string& p = png.text.at("parameters");
  EXPECT_EQ(p.rfind("a blue cube\nNegative prompt: blurry\n", 0), 0u) << p;
  for (const char* part : {"Steps: 2", "Sampler: ddim", "CFG scale: 0", "Seed: 42", "Size: 256x192", "Model: sd15"}) {
    EXPECT_NE(p.find(part), std::string::npos) << part << " not in " << p;
  }

  // Same seed, same bytes; img2img from that image at its size.
  const std::string again = tmp_png("b");
  ASSERT_EQ(rbee_sd("-m " + kTinySd + " -p 'a blue cube' -n 'blurry' --steps 2 -W 256 -H 192 -s 42 --sampler ddim "
                    "-g 0 -q -o " + again).status, 0);
  EXPECT_EQ(read_file(out), read_file(again));
  const std::string img2img = tmp_png("c");
  const rbee::test::CliRun r2 = rbee_sd("-m " + kTinySd + " -p x --steps 2 --strength 0.5 -g 0 -s 1 --init-image " +
                                        out + " --mask " + out + " -o " + img2img);
  ASSERT_EQ(r2.status, 0) << r2.output;
  const Png png2 = parse_png(read_file(img2img));
  EXPECT_EQ(png2.width, 256u);
  EXPECT_EQ(png2.height, 192u);
  EXPECT_NE(png2.text.at("parameters").find("Denoising strength: 0.5"), std::string::npos);
  EXPECT_NE(png2.text.at("parameters").find("Inpaint: true"), std::string::npos);
}

// Disk full when the image is written (issue 13): /dev/full answers every write with ENOSPC. A clear error naming
// the file and the system's reason, exit status 1 (before, a stream's buffered tail could fail unnoticed).
TEST(SdCli, DiskFullWhenWritingTheImage) {
  const rbee::test::CliRun r = rbee_sd("-m " + kTinySd + " -p x --steps 1 -W 256 -H 256 -g 0 -s 1 -q -o /dev/full");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("writing '/dev/full' failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << r.output;
}

void expect_refused(const std::string& args, const std::string& needle) {
  const rbee::test::CliRun r = rbee_sd(args);
  EXPECT_GT(r.status, 0) << "rbee sd " << args << " was not refused:\n" << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << "rbee sd " << args << ": no '" << needle << "' in\n"
                                                      << r.output;
}

TEST(SdCli, RefusesBadArguments) {
  const std::string m = "-m " + kTinySd + " -o " + tmp_png("bad") + " ";
  expect_refused(m + "-p x --steps 0", "--steps");
  expect_refused(m + "-p x --steps 151", "--steps");
  expect_refused(m + "-p x -g 21", "--guidance");
  expect_refused(m + "-p x --sampler plms", "--sampler");
  expect_refused(m + "-p x -W 100", "--width: 100 must be a positive multiple of 8");
  expect_refused(m + "-p x -H 2056", "--height: 2056 must be a positive multiple of 8 up to 2048");
  // Limits only the model's files know are checked before the load: LCM places at most 50 steps here.
  expect_refused(m + "-p x --sampler lcm --steps 60", "--steps: 60 is more than sampler lcm can place");
  expect_refused(m + "-p x --variant fp16", "fp16");
  expect_refused(m + "-p x --noise philox", "--noise");
  expect_refused(m + "-p x --strength 1.5", "--strength");
  expect_refused(m + "-p x --mask " + kTinySd + "/model_index.json", "--mask needs --init-image");
  expect_refused(m + "-p x --init-image " + kTinySd + "/model_index.json", "not a PNG, JPEG or WebP");
  expect_refused(m + "-p x --init-image /nonexistent.png", "cannot read");
  expect_refused(m + "-p x --sd-version v2-1", "'v2-1' was asked for");
  expect_refused("-m /nonexistent -p x", "does not exist");
  expect_refused("-m " + kTinySd, "--prompt");
}

TEST(SdCli, HelpNamesEveryFlag) {
  const rbee::test::CliRun r = rbee_sd("--help");
  EXPECT_EQ(r.status, 0);
  for (const char* flag : {"--model", "--prompt", "--negative-prompt", "--output", "--steps", "--width", "--height",
                           "--seed", "--sampler", "--guidance", "--init-image", "--strength", "--mask", "--backend",
                           "--device", "--use-f16", "--config", "--sd-version", "--variant", "--noise"}) {
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
