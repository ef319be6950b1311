// Opening an SD model as a user names it: a diffusers folder, or a single-file .safetensors checkpoint with a
// diffusers folder that gives its architecture (configs and tokenizer; its weights are not read). Shared by
// sd-worker-rbee and `rbee sd`.
#pragma once

#include <string>

#include "rbee/sd/pipeline.h"

namespace rbee::sd {

// "v1-5" (CLIP ViT-L text encoder), "v2-1" (OpenCLIP ViT-H), "xl" (two text encoders); "turbo" is a distilled
// xl or 2.1 run with few steps and no guidance.
std::string detect_sd_version(const std::string& model, const std::string& config_dir);

struct ModelFiles {
  std::string model;       // folder or .safetensors file
  std::string config_dir;  // single file only: the diffusers folder with its configs and tokenizer
  std::string sd_version;  // "auto", "v1-5", "v2-1", "xl", "turbo"
};

// What the files allow a request (latent scale, scheduler config, SDXL), read from their configs without loading
// any weights, so that a caller can check a request (check_request) before the load. Errors as load_model_files.
ModelLimits read_model_limits(const ModelFiles& files, const LoadOptions& options);

// Checks the files and the requested version against what they hold (Error(InvalidArgument) naming both on a
// mismatch, NotFound for missing files), then loads the pipeline. The pipeline's own Error(Unsupported) (SDXL
// in a build without it) passes through.
Pipeline load_model_files(const ModelFiles& files, const LoadOptions& options);

}  // namespace rbee::sd
