// Everything rbee knows about one transformer architecture, in that architecture's own file (llama.cpp,
// mistral.cpp, qwen2.cpp, phi3.cpp, gemma.cpp, gemma2.cpp, gemma3.cpp): how its GGUF and Hugging Face configs
// read and which traits it fixes, which layers slide, how its Hugging Face tensor names map onto the canonical
// (GGUF) names, its decoder-layer wiring, its built-in chat template family and its random-model shapes. The
// registry (architecture.cpp) lists them once; no other file names an architecture. The shared blocks
// (attention, MLP) live in blocks.h.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "rbee/backend/communicator.h"
#include "rbee/backend/reduce_with.h"
#include "rbee/core/tensor.h"
#include "rbee/llm/kv_cache.h"
#include "rbee/llm/model_config.h"
#include "rbee/llm/model_files.h"

namespace rbee::gguf {
class File;
}

namespace rbee::llm {

class Tokenizer;

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

// Everything one forward step's layers share. Under a tensor split each rank runs the layers with its own
// context: `config` holds the rank's heads (n_heads, n_kv_heads), `part` picks its KV cache part, and the
// attention and MLP blocks end with comm->all_reduce_sum (their row-parallel projections give partial sums).
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
  int part = 0;                   // KV cache part of this rank
  Communicator* comm = nullptr;   // tensor split: the ranks' group (null: one device holds the whole layer)
  int rank = 0;
  // Tensor split: a residual that is the same on every rank is added by rank 0's row-parallel projection, before
  // the all-reduce, instead of by an add after it; false (RBEE_TP_FOLD_RESIDUAL=0) adds it after, for comparisons.
  bool fold_residual = true;
  // With fold_residual: rank 0 passes that residual to the all-reduce (all_reduce_sum_with,
  // rbee/backend/reduce_with.h: on GPUs the peer-to-peer kernel adds it in its push, so no add runs after the
  // projection's vendor GEMM); false (RBEE_TP_RESIDUAL_IN_REDUCE=0) lets the projection add it (the gemv's epilogue,
  // or an add after the GEMM).
  bool residual_in_reduce = true;
  // Tensor split, steps of one row per sequence (decode): each row-parallel product (attention output, down
  // projection) is cut in two by output columns, the first half's all-reduce running on the device's side stream
  // beside the second half's product (reduce_in_halves, llm/models/overlapped_reduce.h); the same bits as the whole
  // product and all-reduce. On with RBEE_TP_OVERLAP=1 (off by default until measured on two GPUs).
  bool tp_overlap = false;
  // With tp_overlap: the first part's share of the output columns, in percent (RBEE_TP_OVERLAP_SPLIT, 10 to 90,
  // default 50). A larger first part leaves a smaller all-reduce on the critical path but hides its own behind a
  // shorter product.
  int tp_overlap_first_percent = 50;
  // Tensor split: the attention output's all-reduce, the residual add, the MLP norm and the gate/up projection in one
  // communicator call where it has a fused pass (rbee/backend/reduce_norm.h; on GPUs: one kernel for the all-reduce,
  // the add and the norm, then the 16-bit GEMM); the same bits. RBEE_TP_REDUCE_NORM=1 (off by default).
  bool reduce_norm = false;
  // With reduce_norm: the down projection's all-reduce of layer l also runs layer l + 1's attention norm and q/k/v
  // product (the same fused call); layer l + 1 takes the product from here instead of computing it (and clears it).
  mutable Tensor carried_qkv;
  // Tensor split: the next layer's weights on this rank (null for the last layer), whose first projection the
  // all-reduce at the end of this layer names as what the rank reads next (ReduceExtras::next_read).
  const LayerWeights* next_layer = nullptr;
};

// x [N, hidden] F32 -> [N, hidden] F32 after one decoder layer.
using LayerForward = Tensor (*)(const StepContext& step, const LayerWeights& w, int layer, const Tensor& x);

// A Hugging Face config.json as an architecture's read_hf sees it.
struct HfConfig {
  const nlohmann::json& json;
  const nlohmann::json* rope_local;  // rope_parameters.sliding_attention (transformers >= 5), or null
};

// A 1-D F32 per-layer tensor of a random model beyond the Llama set, and the size it has.
struct LayerVector {
  enum class Size { Hidden, QDim, KvDim, HeadDim };
  const char* name;  // canonical suffix, "attn_q.bias"
  Size size;
};

struct Architecture {
  const char* name;  // GGUF general.architecture and ModelConfig::arch
  // config.json model_type values that are this architecture.
  std::vector<std::string> hf_model_types;
  // Hugging Face per-layer suffixes ("self_attn.q_proj.weight") -> canonical suffixes ("attn_q.weight").
  std::vector<std::pair<std::string, std::string>> hf_layer_names;
  LayerForward layer;

  // ---- ModelConfig (model_config.cpp calls these; null: nothing to do) ----
  // The family's fixed traits, applied after the file's keys: activation, embedding scale, tied embeddings,
  // biases, fused projections, extra norms.
  void (*traits)(ModelConfig& c) = nullptr;
  // Keys beyond the common ones: from GGUF metadata (prefix "<name>.") and from config.json (after the rope keys).
  void (*read_gguf)(const gguf::File& file, const std::string& prefix, ModelConfig& c) = nullptr;
  void (*read_hf)(const HfConfig& config, ModelConfig& c) = nullptr;
  // Whether layer i uses the sliding window when the model has one; pattern is the file's sliding_window_pattern
  // (6 when absent). Null: every layer.
  bool (*layer_slides)(int layer, int pattern) = nullptr;
  // llama.cpp's converter permutes the q and k rows of some families so that rotation pairs are adjacent: their
  // GGUF files rotate in RopeMode::Normal. Hugging Face files always use Neox.
  RopeMode gguf_rope_mode = RopeMode::Neox;
  // Norms multiply by (1 + w) in Hugging Face weights (GGUF files store 1 + w).
  bool hf_norm_weight_plus_one = false;
  // config.json may wrap the text model's config in "text_config" (a multimodal model_type); it is then read as
  // hf_model_types[0].
  bool hf_nested_text_config = false;

  // ---- prompts ----
  // The built-in chat template family for models whose file brings no template (prompt.cpp).
  std::string (*chat_family)(const Tokenizer& tokenizer) = nullptr;

  // ---- random-weight models (model_files.cpp) ----
  std::vector<ShapePreset> shape_presets;
  std::vector<LayerVector> random_layer_vectors;  // written as ones, after attn_v
};

// The registry: every architecture, in one list (architecture.cpp).
const std::vector<const Architecture*>& architectures();
// By name; throws Unsupported listing the known names.
const Architecture& architecture(const std::string& name);
// By name or by config.json model_type; null when unknown.
const Architecture* find_architecture(const std::string& name);
const Architecture* find_hf_architecture(const std::string& model_type);
// "llama, mistral, ..." and the config.json model types, for error messages.
std::string architecture_names();
std::string hf_model_type_names();

// config.json values as model_config.cpp reads them: absent or null -> fallback.
int hf_int(const nlohmann::json& j, const char* key, int fallback);
double hf_float(const nlohmann::json& j, const char* key, double fallback);
// read_hf of the families whose config.json sliding_window applies to them as it is.
void hf_read_sliding_window(const HfConfig& config, ModelConfig& c);

// The standard Hugging Face names shared by every Llama-like family (attention and MLP projections).
std::vector<std::pair<std::string, std::string>> llama_like_hf_names();

// Layer wirings.
// Pre-norm: x += attn(norm(x)); x += mlp(norm(x))  (Llama, Mistral, Qwen2, Phi-3, Gemma)
Tensor pre_norm_layer(const StepContext& step, const LayerWeights& w, int layer, const Tensor& x);
// Sandwich: x += post_norm(attn(norm(x))); x += post_norm(mlp(norm(x)))  (Gemma 2, Gemma 3)
Tensor sandwich_norm_layer(const StepContext& step, const LayerWeights& w, int layer, const Tensor& x);

// Each architecture file defines one of these; architecture.cpp lists them.
const Architecture& llama_architecture();
const Architecture& mistral_architecture();
const Architecture& qwen2_architecture();
const Architecture& phi3_architecture();
const Architecture& gemma_architecture();
const Architecture& gemma2_architecture();
const Architecture& gemma3_architecture();

}  // namespace rbee::llm
