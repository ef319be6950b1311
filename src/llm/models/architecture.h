// What distinguishes one transformer architecture from another: how its Hugging Face tensor names map onto
// the canonical (GGUF) names, and which decoder-layer wiring it uses. Each architecture is described in its
// own file (llama.cpp, mistral.cpp, qwen2.cpp, phi3.cpp, gemma.cpp, gemma2.cpp, gemma3.cpp); the shared
// blocks (attention, MLP) live in blocks.h.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "rbee/core/tensor.h"
#include "rbee/llm/kv_cache.h"
#include "rbee/llm/model_config.h"

namespace rbee::llm {

// One decoder layer's weights under their canonical names (undefined when the architecture has none).
// Linear weights are [out, in] (quantized, F16, BF16 or F32); norms and biases are F32.
struct LayerWeights {
  Tensor attn_norm;                    // [hidden]
  Tensor attn_q, attn_k, attn_v;       // [Hq*D, hidden], [Hkv*D, hidden], [Hkv*D, hidden]
  Tensor attn_q_bias, attn_k_bias, attn_v_bias;
  Tensor attn_qkv;                     // fused [(Hq + 2 Hkv) * D, hidden] (Phi-3)
  Tensor attn_output;                  // [hidden, Hq*D]
  Tensor attn_q_norm, attn_k_norm;     // [D] (Gemma 3)
  Tensor post_attention_norm;          // [hidden] (Gemma 2/3)
  Tensor ffn_norm;                     // [hidden]
  Tensor ffn_gate, ffn_up;             // [I, hidden]; fused gate+up: ffn_up [2I, hidden] (Phi-3)
  Tensor ffn_down;                     // [hidden, I]
  Tensor post_ffw_norm;                // [hidden] (Gemma 2/3)
};

struct ModelWeights {
  Tensor token_embd;   // [vocab, hidden]
  Tensor output_norm;  // [hidden]
  Tensor output;       // [vocab, hidden] (token_embd when tied)
  Tensor rope_freqs;   // [rotary_dim / 2] F32 divisors of the frequencies (Llama 3.1 GGUF), or undefined
  std::vector<LayerWeights> layers;
};

// Everything one forward step's layers share.
struct StepContext {
  const ModelConfig& config;
  KvCache& cache;
  Tensor positions;     // [N] I32
  Tensor slots;         // [N] I32: cache slot of each new token
  Tensor seq_info;      // [B, 3] I32 (q_start, q_len, ctx_len)
  Tensor block_tables;  // [B, max_blocks] I32
  Tensor inv_freq_global;  // [rotary_dim / 2] F32
  Tensor inv_freq_local;   // [rotary_dim / 2] F32 (sliding-window layers; Gemma 3 uses another base)
  float rope_ratio_global = 0.f;  // RopeParams::freq_ratio of global / local layers (0: use the tables)
  float rope_ratio_local = 0.f;
  // The fused decoder ops (rms_norm_qmatmul, add_rms_norm_qmatmul, swiglu_qmatmul, rope_kv_cache_write) where the
  // weights allow; false (RBEE_DECODE_FUSION=0) runs the unfused ops one by one, for comparisons.
  bool fused_ops = true;
};

// x [N, hidden] F32 -> [N, hidden] F32 after one decoder layer.
using LayerForward = Tensor (*)(const StepContext& step, const LayerWeights& w, int layer, const Tensor& x);

struct Architecture {
  const char* name;
  // Hugging Face per-layer suffixes ("self_attn.q_proj.weight") -> canonical suffixes ("attn_q.weight").
  std::vector<std::pair<std::string, std::string>> hf_layer_names;
  LayerForward layer;
};

const Architecture& architecture(const std::string& name);

// The standard Hugging Face names shared by every Llama-like family (attention and MLP projections).
std::vector<std::pair<std::string, std::string>> llama_like_hf_names();

// Layer wirings.
// Pre-norm: x += attn(norm(x)); x += mlp(norm(x))  (Llama, Mistral, Qwen2, Phi-3, Gemma)
Tensor pre_norm_layer(const StepContext& step, const LayerWeights& w, int layer, const Tensor& x);
// Sandwich: x += post_norm(attn(norm(x))); x += post_norm(mlp(norm(x)))  (Gemma 2, Gemma 3)
Tensor sandwich_norm_layer(const StepContext& step, const LayerWeights& w, int layer, const Tensor& x);

// Each architecture file defines one of these.
const Architecture& llama_architecture();
const Architecture& mistral_architecture();
const Architecture& qwen2_architecture();
const Architecture& phi3_architecture();
const Architecture& gemma_architecture();
const Architecture& gemma2_architecture();
const Architecture& gemma3_architecture();

}  // namespace rbee::llm
