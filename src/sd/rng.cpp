// Seeded standard-normal noise (rbee/sd/pipeline.h: randn).
#include <cmath>
#include <vector>

#include "rbee/sd/pipeline.h"

namespace rbee::sd {
namespace {

// SplitMix64 finalizer: a bijective 64-bit mixer, so distinct (seed, stream, counter) give independent words.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in (0, 1], 53 bits.
double uniform(uint64_t word) { return ((double)(word >> 11) + 1.0) * (1.0 / 9007199254740992.0); }

}  // namespace

Tensor randn(const Shape& shape, uint64_t seed, uint64_t stream, Device& device) {
  const int64_t n = shape.numel();
  std::vector<float> v((size_t)n);
  const uint64_t key = mix(seed ^ mix(stream + 0x632BE59BD9B4E019ull));
  for (int64_t i = 0; i < n; i += 2) {
    uint64_t base = key + (uint64_t)i;
    double u1 = uniform(mix(base)), u2 = uniform(mix(base ^ 0xD1B54A32D192ED03ull));
    double r = std::sqrt(-2.0 * std::log(u1)), th = 2.0 * M_PI * u2;
    v[(size_t)i] = (float)(r * std::cos(th));
    if (i + 1 < n) v[(size_t)i + 1] = (float)(r * std::sin(th));
  }
  return Tensor::from_vector(v, shape, device);
}

}  // namespace rbee::sd
