// The SD UNet (diffusers UNet2DConditionModel) for SD 1.x and 2.x: CrossAttnDownBlock2D / DownBlock2D,
// UNetMidBlock2DCrossAttn, UpBlock2D / CrossAttnUpBlock2D, with conv or linear transformer projections.
//
// forward(sample [B, in, H, W], timestep, context [B, S, cross_dim]) -> prediction [B, out, H, W] (noise or v,
// as the scheduler config says). H and W must be multiples of 2^(levels - 1).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rbee/core/tensor.h"
#include "rbee/sd/weights.h"

namespace rbee::sd {

struct UNetConfig {
  int64_t in_channels = 4, out_channels = 4;
  std::vector<int64_t> block_out_channels{320, 640, 1280, 1280};
  std::vector<bool> down_cross_attn{true, true, true, false};  // CrossAttnDownBlock2D vs DownBlock2D
  std::vector<bool> up_cross_attn{false, true, true, true};    // UpBlock2D vs CrossAttnUpBlock2D
  std::vector<int64_t> heads{8, 8, 8, 8};                      // per level (attention_head_dim legacy naming)
  int layers_per_block = 2;
  int transformer_layers = 1;
  int64_t cross_attention_dim = 768;
  int norm_num_groups = 32;
  float norm_eps = 1e-5f;
  bool use_linear_projection = false;
  bool flip_sin_to_cos = true;
  double freq_shift = 0;
  int downsample_padding = 1;

  // unet/config.json; unsupported features (SDXL addition embeddings, other block types) throw Unsupported.
  static UNetConfig from_json(const nlohmann::json& config);
};

class UNet {
 public:
  static UNet load(const Weights& weights, const UNetConfig& config);
  // timestep: the same training timestep for every batch row (fractional values allowed, as Euler uses).
  Tensor forward(const Tensor& sample, double timestep, const Tensor& context) const;
  const UNetConfig& config() const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace rbee::sd
