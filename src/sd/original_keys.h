// Names of the original Stable Diffusion checkpoints (CompVis / LDM single files: model.diffusion_model.*,
// first_stage_model.*, cond_stage_model.transformer.*; SDXL (Stability generative-models): the same UNet and VAE
// names plus label_emb, conditioner.embedders.0.transformer.* and conditioner.embedders.1.model.*) for the
// diffusers names the SD models load by.
#pragma once

#include <string>
#include <vector>

#include "rbee/sd/weights.h"

namespace rbee::sd {

// One original tensor holding a diffusers tensor: all of it, or (OpenCLIP's fused attention in_proj_weight /
// in_proj_bias [3 * C, ...]) the rows of part qkv_part (0 q, 1 k, 2 v); `transposed` when stored as [in, out]
// (OpenCLIP's text_projection).
struct OriginalName {
  std::string name;
  int qkv_part = -1;
  bool transposed = false;
};

// The original names a diffusers tensor name may have, most likely first (upsampler convs sit at index 1 or 2
// of their output block depending on whether the block has attentions). Empty when the name has no counterpart.
std::vector<OriginalName> original_sd_keys(SdComponent component, const std::string& diffusers_name,
                                           const OriginalLayout& layout);

}  // namespace rbee::sd
