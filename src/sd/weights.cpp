// Component weights (rbee/sd/weights.h).
#include "rbee/sd/weights.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include <fmt/ranges.h>

#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/core/log.h"
#include "sd/original_keys.h"

namespace rbee::sd {

namespace {

// Non-finite values (NaN, +-inf) in a contiguous host tensor of F32, F16 or BF16, found from the exponent bits.
int64_t count_non_finite(const Tensor& t) {
  const int64_t n = t.numel();
  int64_t bad = 0;
  if (t.dtype() == DType::F32) {
    const uint32_t* p = static_cast<const uint32_t*>(t.data());
    for (int64_t i = 0; i < n; ++i) bad += (p[i] & 0x7F800000u) == 0x7F800000u;
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(t.data());
    const uint16_t mask = t.dtype() == DType::F16 ? 0x7C00 : 0x7F80;
    for (int64_t i = 0; i < n; ++i) bad += (p[i] & mask) == mask;
  }
  return bad;
}

}  // namespace

Weights Weights::open(const std::string& path, Device& device, DType dtype) {
  RBEE_CHECK(dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16,
             "sd weights: compute dtype must be f32, f16 or bf16, got {}", dtype_name(dtype));
  Weights w;
  w.ckpt_ = std::make_shared<const safetensors::Checkpoint>(safetensors::Checkpoint::open(path));
  w.device_ = &device;
  w.dtype_ = dtype;
  return w;
}

std::string Weights::component_file(const std::string& dir, const std::string& variant, bool* variant_found) {
  namespace fs = std::filesystem;
  std::error_code ec;
  RBEE_CHECK_CODE(fs::is_directory(dir, ec), ErrorCode::NotFound, "sd weights: component folder '{}' does not exist",
                  dir);
  RBEE_CHECK(variant.find('/') == std::string::npos && variant.find('.') == std::string::npos,
             "sd weights: variant '{}' must be a plain name such as fp16", variant);
  auto first_of = [&](const std::vector<std::string>& names) -> std::string {
    for (const std::string& file : names)
      if (fs::is_regular_file(fs::path(dir) / file, ec)) return (fs::path(dir) / file).string();
    return "";
  };
  std::vector<std::string> plain, variants;
  for (const std::string name : {"diffusion_pytorch_model", "model"}) {
    plain.push_back(name + ".safetensors.index.json");
    plain.push_back(name + ".safetensors");
    if (!variant.empty()) {
      // diffusers' _add_variant puts the variant before the last suffix; older saves put it before ".index.json".
      variants.push_back(name + ".safetensors.index." + variant + ".json");
      variants.push_back(name + ".safetensors." + variant + ".index.json");
      variants.push_back(name + "." + variant + ".safetensors");
    }
  }
  if (!variant.empty()) {
    const std::string found = first_of(variants);
    if (variant_found) *variant_found = !found.empty();
    if (!found.empty()) return found;
    RBEE_CHECK_CODE(variant_found, ErrorCode::NotFound, "sd weights: '{}' has none of {} (variant '{}')", dir,
                    fmt::join(variants, ", "), variant);
  }
  if (std::string found = first_of(plain); !found.empty()) return found;
  std::vector<fs::path> any;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().extension() == ".safetensors" && entry.is_regular_file(ec)) any.push_back(entry.path());
  if (variant.empty() && any.size() == 1) return any[0].string();
  RBEE_THROW(ErrorCode::NotFound, "sd weights: '{}' has none of {}", dir, fmt::join(plain, ", "));
}

Weights Weights::sub(const std::string& prefix) const {
  Weights w = *this;
  w.prefix_ = prefix_ + prefix;
  return w;
}

Weights Weights::random(const nlohmann::json& config, uint64_t seed, Device& device, DType dtype) {
  RBEE_CHECK(dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16,
             "sd weights: compute dtype must be f32, f16 or bf16, got {}", dtype_name(dtype));
  Weights w;
  w.random_ = std::make_shared<const Random>(Random{config, seed});
  w.device_ = &device;
  w.dtype_ = dtype;
  return w;
}

Weights Weights::open_original(const std::string& file, SdComponent component, const OriginalLayout& layout,
                               const nlohmann::json& config, Device& device, DType dtype) {
  Weights w = open(file, device, dtype);
  w.original_ = std::make_shared<const Original>(Original{component, layout, config});
  const char* probe = component == SdComponent::TextEncoder
                          ? "cond_stage_model.transformer.text_model.embeddings.token_embedding.weight"
                      : component == SdComponent::TextEncoderXL1
                          ? "conditioner.embedders.0.transformer.text_model.embeddings.token_embedding.weight"
                      : component == SdComponent::TextEncoderXL2 ? "conditioner.embedders.1.model.token_embedding.weight"
                                                                 : nullptr;
  RBEE_CHECK_CODE(!probe || w.ckpt_->find_tensor(probe), ErrorCode::Unsupported,
                  "sd weights: '{}' has no {} text encoder ('{}' is missing; SD 2.x OpenCLIP single files are not "
                  "supported)",
                  file, component == SdComponent::TextEncoderXL2 ? "OpenCLIP" : "CLIP", probe ? probe : "");
  return w;
}

Weights::Source Weights::resolve(const std::string& full) const {
  if (!ckpt_) return {};
  if (!original_) return ckpt_->find_tensor(full) ? Source{full} : Source{};
  for (const OriginalName& k : original_sd_keys(original_->component, full, original_->layout))
    if (ckpt_->find_tensor(k.name)) return {k.name, k.qkv_part, k.transposed};
  return {};
}

// Random mode never has optional tensors (a checkpoint decides those): has() is false, so optional parts stay off.
bool Weights::has(const std::string& name) const { return !resolve(prefix_ + name).key.empty(); }

Tensor Weights::get_random(const std::string& full, const Shape& shape) const {
  const int64_t n = shape.numel();
  std::vector<float> v((size_t)n);
  const bool is_bias = full.size() >= 5 && full.compare(full.size() - 5, 5, ".bias") == 0;
  const bool is_norm = !is_bias && full.find("norm") != std::string::npos && shape.rank() == 1;
  if (shape.rank() == 1) {
    std::fill(v.begin(), v.end(), is_norm ? 1.0f : 0.0f);
  } else {
    const int64_t fan_in = n / shape[0];
    const double a = std::sqrt(3.0 / (double)std::max<int64_t>(fan_in, 1));
    uint64_t h = random_->seed ^ 0xCBF29CE484222325ull;  // FNV-1a of the name, then an xorshift stream
    for (char c : full) h = (h ^ (uint8_t)c) * 0x100000001B3ull;
    uint64_t x = h | 1;
    for (int64_t i = 0; i < n; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      v[(size_t)i] = (float)(a * (2.0 * ((double)(x >> 11) * (1.0 / 9007199254740992.0)) - 1.0));
    }
  }
  Tensor t = Tensor::from_vector(v, shape, Registry::global().cpu());
  if (dtype_ != DType::F32) t = t.to(dtype_);
  return t.to(*device_);
}

Tensor Weights::get_f32(const std::string& name, const Shape& shape) const {
  Weights w = *this;
  w.dtype_ = DType::F32;
  return w.get(name, shape);
}

Tensor Weights::get(const std::string& name, const Shape& shape) const {
  const std::string full = prefix_ + name;
  if (random_) return get_random(full, shape);
  const Source src = resolve(full);
  const std::string& key = src.key;
  RBEE_CHECK_CODE(!key.empty(), ErrorCode::NotFound, "sd weights: '{}' has no tensor '{}'{}", ckpt_->directory(), full,
                  original_ ? " (looked for its original SD name)" : "");
  const safetensors::TensorInfo* info = ckpt_->find_tensor(key);
  RBEE_CHECK(info->dtype == DType::F32 || info->dtype == DType::F16 || info->dtype == DType::BF16,
             "sd weights: tensor '{}' is {}, expected a floating dtype", full, dtype_name(info->dtype));
  // The shape stored for `shape`: fused q/k/v rows stack three, transposed matrices swap their axes.
  Shape stored = shape;
  if (src.qkv_part >= 0 && stored.rank() >= 1) stored[0] *= 3;
  if (src.transposed && stored.rank() == 2) std::swap(stored[0], stored[1]);
  // Original VAE attention projections are 1x1 convolutions: [C, C, 1, 1] holds the same values as [C, C].
  const bool conv_as_linear = original_ && shape.rank() == 2 && info->shape.rank() == 4 && info->shape[0] == shape[0] &&
                              info->shape[1] == shape[1] && info->shape[2] == 1 && info->shape[3] == 1;
  RBEE_CHECK(info->shape == stored || conv_as_linear, "sd weights: tensor '{}' has shape {}, the model expects {}",
             key, info->shape.to_string(), stored.to_string());
  Tensor t = ckpt_->tensor(key, Registry::global().cpu());
  if (conv_as_linear) t = t.reshape(shape);
  if (src.qkv_part >= 0) t = t.narrow(0, src.qkv_part * shape[0], shape[0]);
  if (src.transposed) t = t.transpose(0, 1);
  t = t.contiguous();
  // diffusers warns when a model gives NaN images; a NaN in the weights is the usual cause, so say which tensor.
  if (const int64_t bad = count_non_finite(t); bad > 0)
    log::warn("sd weights: tensor '{}' of '{}' holds {} NaN or infinite values of {}: images will come out black or "
              "as noise",
              key, ckpt_->directory(), bad, t.numel());
  if (t.dtype() != dtype_) t = t.to(dtype_);
  return t.to(*device_).contiguous();
}

const nlohmann::json& Weights::config() const {
  if (random_) return random_->config;
  if (original_) return original_->config;
  return ckpt_->config();
}

}  // namespace rbee::sd
