// The SD VAE (diffusers AutoencoderKL): the decoder turns latents [B, latent, h, w] into images
// [B, 3, h * f, w * f] in [-1, 1] (f = 2^(levels - 1), 8 for SD); the encoder returns the posterior mean
// [B, latent, H / f, W / f]. Pipelines divide latents by scaling_factor before decoding and multiply encoded
// means by it.
#pragma once

#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "rbee/core/tensor.h"
#include "rbee/sd/weights.h"

namespace rbee::sd {

struct VaeConfig {
  int64_t in_channels = 3, out_channels = 3, latent_channels = 4;
  std::vector<int64_t> block_out_channels{128, 256, 512, 512};
  int layers_per_block = 2;
  int norm_num_groups = 32;
  double scaling_factor = 0.18215;
  bool use_quant_conv = true, use_post_quant_conv = true;
  bool mid_block_add_attention = true;
  // SDXL pipelines decode with an f32 VAE when it says so, whatever the pipeline's dtype (diffusers' needs_upcasting).
  bool force_upcast = true;

  static VaeConfig from_json(const nlohmann::json& config);
  int64_t scale() const { return int64_t{1} << (block_out_channels.size() - 1); }
};

class Vae {
 public:
  // with_encoder: also load the encoder (img2img, inpaint); the decoder is always loaded.
  static Vae load(const Weights& weights, const VaeConfig& config, bool with_encoder = true);
  // z [B, latent, h, w] (already divided by scaling_factor) -> image [B, out, h * f, w * f]
  Tensor decode(const Tensor& z) const;
  // image [B, in, H, W] (H, W multiples of f, values in [-1, 1]) -> posterior mean [B, latent, H / f, W / f]
  Tensor encode(const Tensor& image) const;
  // The posterior's moments [B, 2 * latent, H / f, W / f]: the mean, then the log-variance (diffusers'
  // DiagonalGaussianDistribution clamps it to [-30, 20]).
  Tensor encode_moments(const Tensor& image) const;
  const VaeConfig& config() const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace rbee::sd
