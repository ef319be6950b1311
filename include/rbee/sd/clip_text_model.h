// The CLIP text transformer of the SD text encoders (Hugging Face CLIPTextModel / CLIPTextModelWithProjection
// weights, as in a diffusers folder's text_encoder/ and text_encoder_2/).
//
// ids [B, T] (T <= max_position_embeddings) -> token embeddings + position embeddings -> pre-norm causal
// transformer layers -> final layer norm. SD 1.x and 2.x condition on the final-normed last hidden state; SDXL on
// the penultimate layer's output (not normed) and on the projected pooled output (the final-normed state at
// the first EOS token, i.e. the argmax id of each row, times text_projection).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "rbee/core/tensor.h"
#include "rbee/sd/weights.h"

namespace rbee::sd {

struct ClipTextConfig {
  int64_t vocab_size = 49408;
  int64_t hidden_size = 768;
  int64_t intermediate_size = 3072;
  int num_layers = 12;
  int num_heads = 12;
  int64_t max_positions = 77;
  float layer_norm_eps = 1e-5f;
  bool quick_gelu = true;      // hidden_act "quick_gelu" (OpenAI CLIP) or "gelu" (OpenCLIP)
  int64_t projection_dim = 0;  // > 0 when the checkpoint has text_projection (SDXL's second encoder)
  // architectures lists CLIPTextModelWithProjection: text_projection [projection_dim, hidden] is required (also
  // with random weights); otherwise it is used when the checkpoint has it.
  bool with_projection = false;

  // config.json of a CLIPTextModel(WithProjection); bad or missing fields throw naming the field.
  static ClipTextConfig from_json(const nlohmann::json& config);
};

struct ClipTextOutput {
  Tensor last_hidden;    // [B, T, hidden] after the final layer norm
  Tensor penultimate;    // [B, T, hidden] output of layer num_layers - 2 (before the last layer)
  Tensor pooled;         // [B, hidden] or [B, projection_dim]: last_hidden at each row's argmax id, projected
};

class ClipTextModel {
 public:
  static ClipTextModel load(const Weights& weights, const ClipTextConfig& config);
  // ids: B rows of T token ids (all rows the same length).
  ClipTextOutput forward(const std::vector<std::vector<int32_t>>& ids) const;
  const ClipTextConfig& config() const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace rbee::sd
