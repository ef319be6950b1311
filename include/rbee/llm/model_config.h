// ModelConfig: the hyper-parameters of a decoder-only transformer, read from GGUF metadata or from a Hugging
// Face config.json, with every architecture difference spelled out as a field.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rbee/backend/op_kinds.h"
#include "rbee/ops.h"

namespace rbee::gguf {
class File;
}

namespace rbee::llm {

enum class Activation { Silu, GeluTanh };

struct ModelConfig {
  std::string arch;  // "llama", "mistral", "qwen2", "phi3", "gemma", "gemma2", "gemma3"
  std::string name;  // general.name or the HF _name_or_path, for display
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;            // query/key head size
  int max_positions = 0;       // context length the model was trained for
  float norm_eps = 1e-5f;
  bool norm_weight_plus_one = false;  // Gemma (HF weights): norms multiply by (1 + w)

  // Rotary embedding
  float rope_theta = 10000.0f;
  float rope_theta_local = 0.0f;      // Gemma 3 local (sliding) layers; 0 = same as rope_theta
  int rotary_dim = 0;                 // dims of each head that rotate (partial rotary: Phi)
  RopeMode rope_mode = RopeMode::Neox;
  ops::RopeScaling rope_scaling;
  float rope_attn_factor = 1.0f;      // multiplies cos/sin (YaRN)
  bool rope_llamacpp_angles = false;  // GGUF files: unscaled rope angles as llama.cpp forms them (RopeParams)

  // Attention
  float attn_scale = 0.0f;            // q.k scale (default 1/sqrt(head_dim))
  bool qkv_bias = false;              // Qwen2
  bool qk_norm = false;               // Gemma 3: rms_norm on q and k heads
  int sliding_window = 0;             // window of local layers (0 = none)
  // Per layer: true when the layer uses the sliding window (Mistral: all; Gemma 2: even layers; Gemma 3: 5 of 6).
  std::vector<bool> layer_is_local;
  float attn_softcap = 0.0f;          // Gemma 2
  float final_softcap = 0.0f;         // Gemma 2

  // Blocks
  Activation activation = Activation::Silu;
  bool post_norms = false;            // Gemma 2/3: norms after attention and after the MLP too
  float embedding_scale = 1.0f;       // Gemma: sqrt(hidden_size)
  bool tie_embeddings = false;
  bool fused_qkv = false;             // Phi-3: one qkv projection
  bool fused_gate_up = false;         // Phi-3: one gate_up projection

  // Special tokens and chat template as the file declares them (the tokenizer has the authoritative ids).
  std::string chat_template;
  // How the model pools hidden states into an embedding, as the file declares it (GGUF {arch}.pooling_type:
  // 1 mean, 2 cls, 3 last; -1 when undeclared, as for every decoder-only chat model).
  int pooling_type = -1;

  // Throws InvalidArgument naming the field when a value is missing or inconsistent.
  void validate() const;
  std::string summary() const;  // one line for logs
};

ModelConfig config_from_gguf(const gguf::File& file);
ModelConfig config_from_hf(const nlohmann::json& config);

}  // namespace rbee::llm
