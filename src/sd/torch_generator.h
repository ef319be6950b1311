// PyTorch's CPU random generator (torch.Generator().manual_seed(seed)) and its torch.randn, so that a pipeline can
// draw the very noise diffusers draws from a seed: an mt19937 engine seeded with the seed's low 32 bits, floats
// made from 24 random bits, and torch's normal sampling order (aten's normal_fill: all uniforms first, then
// Box-Muller over blocks of 16 pairing element j with j + 8, the last 16 values redrawn when the count is not a
// multiple of 16; tensors of fewer than 16 values use the double-precision sampler with its cached second value).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

namespace rbee::sd {

class TorchGenerator {
 public:
  explicit TorchGenerator(uint64_t seed);
  // torch.randn(n, generator=g, dtype=torch.float32) on the CPU (row-major order of any shape with n values).
  std::vector<float> randn(int64_t n);
  // torch.rand-style draws: one 32-bit word, and the 24-bit float uniform in [0, 1) made from it.
  uint32_t random();
  float uniform_float();

 private:
  double uniform_double();
  double normal_double();  // at::normal_distribution<double>, with the generator's cached second sample
  std::mt19937 engine_;
  std::optional<double> next_double_normal_;
};

}  // namespace rbee::sd
