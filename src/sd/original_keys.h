// Names of the original Stable Diffusion checkpoints (CompVis / LDM single files: model.diffusion_model.*,
// first_stage_model.*, cond_stage_model.transformer.*) for the diffusers names the SD models load by.
#pragma once

#include <string>
#include <vector>

#include "rbee/sd/weights.h"

namespace rbee::sd {

// The original names a diffusers tensor name may have, most likely first (upsampler convs sit at index 1 or 2
// of their output block depending on whether the block has attentions). Empty when the name has no counterpart.
std::vector<std::string> original_sd_keys(SdComponent component, const std::string& diffusers_name,
                                          const OriginalLayout& layout);

}  // namespace rbee::sd
