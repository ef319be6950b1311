// The weights of one SD model component (text encoder, UNet, VAE), read from safetensors and moved to the
// compute device. Every tensor is looked up by its diffusers name and checked against the shape the model
// expects, so a file with missing or misshapen tensors is refused at load with the tensor's name.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "rbee/core/tensor.h"
#include "rbee/formats/safetensors.h"

namespace rbee {
class Device;
}

namespace rbee::sd {

// TextEncoder: SD 1.x's cond_stage_model.transformer.*; TextEncoderXL1 / XL2: SDXL's conditioner.embedders.0
// (CLIP ViT-L, Hugging Face names under .transformer.) and conditioner.embedders.1 (OpenCLIP ViT-bigG under .model.:
// fused in_proj q/k/v, text_projection stored [hidden, projection_dim]).
enum class SdComponent { Unet, Vae, TextEncoder, TextEncoderXL1, TextEncoderXL2 };

// What the original (single-file) names depend on besides the diffusers name.
struct OriginalLayout {
  int unet_layers_per_block = 2;  // resnets per UNet down block (the up blocks have one more)
  int vae_levels = 4;             // VAE resolution levels (the original decoder numbers them in reverse)
};

class Weights {
 public:
  // `path` as safetensors::Checkpoint::open takes it (a diffusers component folder such as unet/, or a file).
  // Floating tensors are cast to `dtype` (F32, or F16 on GPUs) on `device`.
  static Weights open(const std::string& path, Device& device, DType dtype = DType::F32);
  // The weights file of a diffusers component folder, as diffusers and transformers pick it: with a variant, the
  // variant's sharded index (<name>.safetensors.index.<variant>.json, or the older <name>.safetensors.<variant>.index
  // .json) or <name>.<variant>.safetensors; otherwise (or when the folder has no variant file and `variant_found` is
  // given: diffusers then loads the plain files of that component) the index <name>.safetensors.index.json or
  // <name>.safetensors, where <name> is diffusion_pytorch_model (UNet, VAE) or model (text encoders). A folder with
  // none of them but exactly one .safetensors file gives that file. Error(NotFound) names the files looked for.
  static std::string component_file(const std::string& dir, const std::string& variant = "",
                                    bool* variant_found = nullptr);
  // No file: every get() returns deterministic random values of the asked shape (weights uniform with variance
  // 1 / fan_in, norm scales 1, biases 0), keyed by `seed` and the tensor's name. Lets benchmarks build full-size
  // architectures without checkpoints. `config` is what config() returns.
  static Weights random(const nlohmann::json& config, uint64_t seed, Device& device, DType dtype = DType::F32);
  // One component of an original single-file SD checkpoint (model.diffusion_model.*, first_stage_model.*,
  // cond_stage_model.transformer.*): get() takes diffusers names and reads the original ones; 1x1-conv attention
  // weights of the VAE ([C, C, 1, 1]) load as the linear [C, C] they are; OpenCLIP's fused in_proj rows load as the
  // q / k / v projections and its text_projection transposed. `config` is what config() returns (single files carry
  // none). SD 1.x and SDXL layouts (SD 2.x's text encoder, OpenCLIP ViT-H under cond_stage_model.model, is
  // refused).
  static Weights open_original(const std::string& file, SdComponent component, const OriginalLayout& layout,
                               const nlohmann::json& config, Device& device, DType dtype = DType::F32);
  // Names below `prefix` ("down_blocks.0.") of the same checkpoint; prefixes nest.
  Weights sub(const std::string& prefix) const;

  bool has(const std::string& name) const;
  // The tensor `prefix + name`; Error(NotFound) when absent, Error(InvalidArgument) when its shape is not `shape`.
  Tensor get(const std::string& name, const Shape& shape) const;
  // The same, kept in F32 whatever `dtype` is (norm parameters, biases).
  Tensor get_f32(const std::string& name, const Shape& shape) const;

  // config.json of the component folder (Error(NotFound) when absent).
  const nlohmann::json& config() const;
  Device& device() const { return *device_; }
  DType dtype() const { return dtype_; }
  const std::string& prefix() const { return prefix_; }

 private:
  struct Random {
    nlohmann::json config;
    uint64_t seed = 0;
  };
  Tensor get_random(const std::string& full, const Shape& shape) const;

  struct Original {
    SdComponent component;
    OriginalLayout layout;
    nlohmann::json config;
  };
  // Where the tensor of diffusers name `full` lives: checkpoint name ("" when absent), the row third of a fused
  // q/k/v tensor (-1: whole tensor) and whether it is stored transposed.
  struct Source {
    std::string key;
    int qkv_part = -1;
    bool transposed = false;
  };
  Source resolve(const std::string& full) const;

  std::shared_ptr<const safetensors::Checkpoint> ckpt_;  // null in random mode
  std::shared_ptr<const Original> original_;             // set for single-file checkpoints
  std::shared_ptr<const Random> random_;
  std::string prefix_;
  Device* device_ = nullptr;
  DType dtype_ = DType::F32;
};

}  // namespace rbee::sd
