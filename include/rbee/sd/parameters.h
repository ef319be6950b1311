// The text of a PNG's "parameters" chunk: how an image was made, in the layout other SD tools write
// (prompt line, "Negative prompt: ..." line, then "Steps: 20, Sampler: euler, CFG scale: 7.5, Seed: 1, Size: 512x512,
// Model: name" with "Denoising strength" for img2img and inpaint).
#pragma once

#include <string>

#include "rbee/sd/pipeline.h"

namespace rbee::sd {

std::string generation_parameters(const GenerateRequest& request, const std::string& model_name);

}  // namespace rbee::sd
