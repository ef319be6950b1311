// PyTorch's CPU generator and randn (sd/torch_generator.h).
#include "sd/torch_generator.h"

#include <cmath>

namespace rbee::sd {

namespace {
constexpr double kPi = 3.14159265358979323846;

// aten's normal_fill_16: Box-Muller on 16 uniforms in place, u1 = 1 - data[j] (so log sees (0, 1]) and
// u2 = data[j + 8]; float arithmetic (the vectorized AVX2 path of torch differs by about an ulp).
void normal_fill_16(float* data) {
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - data[j];
    const float u2 = data[j + 8];
    const float radius = std::sqrt(-2.0f * std::log(u1));
    const float theta = (float)(2.0 * kPi * (double)u2);
    data[j] = radius * std::cos(theta);
    data[j + 8] = radius * std::sin(theta);
  }
}
}  // namespace

TorchGenerator::TorchGenerator(uint64_t seed) : engine_((uint32_t)(seed & 0xFFFFFFFFu)) {}

uint32_t TorchGenerator::random() { return (uint32_t)engine_(); }

float TorchGenerator::uniform_float() { return (float)(random() & 0xFFFFFFu) * (1.0f / 16777216.0f); }

double TorchGenerator::uniform_double() {
  const uint64_t hi = random(), lo = random();  // random64(): the first word is the high half
  const uint64_t v = (hi << 32) | lo;
  return (double)(v & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
}

double TorchGenerator::normal_double() {
  if (next_double_normal_) {
    const double v = *next_double_normal_;
    next_double_normal_.reset();
    return v;
  }
  const double u1 = uniform_double(), u2 = uniform_double();
  const double r = std::sqrt(-2.0 * std::log1p(-u2));
  const double theta = 2.0 * kPi * u1;
  next_double_normal_ = r * std::sin(theta);
  return r * std::cos(theta);
}

std::vector<float> TorchGenerator::randn(int64_t n) {
  std::vector<float> out((size_t)std::max<int64_t>(n, 0));
  if (n < 16) {
    for (float& v : out) v = (float)normal_double();
    return out;
  }
  for (float& v : out) v = uniform_float();
  for (int64_t i = 0; i + 16 <= n; i += 16) normal_fill_16(out.data() + i);
  if (n % 16 != 0) {  // the tail: the last 16 values drawn again and transformed together
    float* tail = out.data() + n - 16;
    for (int j = 0; j < 16; ++j) tail[j] = uniform_float();
    normal_fill_16(tail);
  }
  return out;
}

}  // namespace rbee::sd
