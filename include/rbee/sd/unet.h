// The SD UNet (diffusers UNet2DConditionModel) for SD 1.x, 2.x and SDXL: CrossAttnDownBlock2D / DownBlock2D,
// UNetMidBlock2DCrossAttn, UpBlock2D / CrossAttnUpBlock2D, with conv or linear transformer projections, a
// transformer depth per level, and SDXL's "text_time" added conditioning.
//
// forward(sample [B, in, H, W], timestep, context [B, S, cross_dim]) -> prediction [B, out, H, W] (noise or v,
// as the scheduler config says). H and W may be any positive sizes: the up blocks upsample to the size of the skip
// connection they meet (2x, or 2x - 1 after an odd side), as diffusers does.
//
// Every unet/config.json field diffusers' UNet2DConditionModel reads either takes effect here or is refused at load
// with Error(Unsupported) naming it (docs/SD.md lists them); fields diffusers does not read are ignored.
//
// SDXL (addition_embed_type "text_time"): the pooled text embedding [B, P] and the size conditioning time_ids
// [B, N] (N = 6: original height, original width, crop top, crop left, target height, target width) are embedded
// as concat(text_embeds, sinusoid(time_ids) [B, N * addition_time_embed_dim]) -> add_embedding linear_1, silu,
// linear_2, and added to the timestep embedding.
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
  int transformer_layers = 1;  // transformer blocks per attention (all levels) when the per-level list is empty
  // transformer_layers_per_block as a list: one depth per level for the down blocks (the mid block takes the
  // last, the up blocks take the list reversed).
  std::vector<int> transformer_layers_per_level;
  int64_t cross_attention_dim = 768;
  int norm_num_groups = 32;
  float norm_eps = 1e-5f;
  bool use_linear_projection = false;
  bool flip_sin_to_cos = true;
  double freq_shift = 0;
  int downsample_padding = 1;
  int64_t sample_size = 0;  // the latent side pipelines default to (0: none given)
  bool center_input_sample = false;  // sample -> 2 * sample - 1 first
  enum class MidBlock { CrossAttn, Plain, None } mid_block = MidBlock::CrossAttn;  // UNetMidBlock2DCrossAttn,
                                                                                   // UNetMidBlock2D, null
  double mid_block_scale_factor = 1.0;  // the mid block's resnets divide their output by it
  bool time_scale_shift = false;        // resnet_time_scale_shift "scale_shift": norm2(h) * (1 + scale) + shift
  int64_t time_embedding_dim = 0;       // 0: 4 x block_out_channels[0]
  int conv_in_kernel = 3, conv_out_kernel = 3;
  // SDXL's addition_embed_type "text_time" (add_embedding takes projection_class_embeddings_input_dim inputs).
  bool text_time = false;
  int64_t addition_time_embed_dim = 0;
  int64_t projection_class_embeddings_input_dim = 0;

  // Transformer blocks of each attention at down level `level` (the mid block: level = levels - 1).
  int transformer_depth(size_t level) const;

  // unet/config.json; unsupported features (other addition embeddings, other block types) throw Unsupported.
  static UNetConfig from_json(const nlohmann::json& config);
};

class UNet {
 public:
  static UNet load(const Weights& weights, const UNetConfig& config);
  // timestep: the same training timestep for every batch row (fractional values allowed, as Euler uses).
  // Not for text_time models (they need the added conditions).
  Tensor forward(const Tensor& sample, double timestep, const Tensor& context) const;
  // SDXL: text_embeds [B, projection_class_embeddings_input_dim - N * addition_time_embed_dim] and time_ids
  // [B, N], both F32 (any device).
  struct AddedConditions {
    Tensor text_embeds;
    Tensor time_ids;
  };
  Tensor forward(const Tensor& sample, double timestep, const Tensor& context, const AddedConditions& added) const;

  // forward() in two parts, for a caller that replays the device part as a graph (sd::UNetStepGraph):
  // condition() does the host work of one step (the timestep's sinusoid, SDXL's time-id sinusoids) and uploads it:
  // t [B, block_out_channels[0]] and, for text_time models, add_in [B, projection_class_embeddings_input_dim], both
  // in the activation dtype; denoise() then runs on the device alone (no host reads, no uploads, no synchronize).
  // forward(sample, t, ctx, added) == denoise(sample, condition(B, t, added, device), ctx).
  struct Conditioning {
    Tensor t;
    Tensor add_in;  // text_time models only
  };
  Conditioning condition(int64_t batch, double timestep, const AddedConditions& added, Device& device) const;
  Tensor denoise(const Tensor& sample, const Conditioning& cond, const Tensor& context) const;

  // The cross-attention keys and values of every transformer block for one context [B, S, cross_attention_dim], in
  // the order denoise() runs the blocks: keys[i], values[i] [B, S, C_i] in the activation dtype. They depend on the
  // context alone (the prompt), so a caller that runs many steps over one context projects it once
  // (sd::UNetStepGraph does, per request) and denoises with the projections:
  // denoise(sample, cond, context) == denoise(sample, cond, project_context(context)), bit for bit (the same
  // products of the same inputs).
  struct ContextProjections {
    std::vector<Tensor> keys, values;
  };
  ContextProjections project_context(const Tensor& context) const;
  Tensor denoise(const Tensor& sample, const Conditioning& cond, const ContextProjections& kv) const;
  const UNetConfig& config() const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace rbee::sd
