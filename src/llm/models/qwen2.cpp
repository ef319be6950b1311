// Qwen2 / Qwen2.5: a Llama with biases on the q, k and v projections (not on o), rope theta 1e6, tied
// embeddings on the small models, a sliding window only when config.json sets use_sliding_window, ChatML.
#include "llm/models/architecture.h"

namespace rbee::llm {

const Architecture& qwen2_architecture() {
  static const Architecture arch = [] {
    Architecture a{
        .name = "qwen2",
        .hf_model_types = {"qwen2"},
        .hf_layer_names = llama_like_hf_names(),
        .layer = pre_norm_layer,
        .traits = [](ModelConfig& c) { c.qkv_bias = true; },
        .read_hf =
            [](const HfConfig& config, ModelConfig& c) {
              if (config.json.value("use_sliding_window", false)) hf_read_sliding_window(config, c);
            },
        .chat_family = [](const Tokenizer&) { return std::string("chatml"); },
        .shape_presets =
            {
                // name, arch, vocab, hidden, layers, heads, kv, ffn, ctx, head_dim, theta, tied, window
                {"qwen2.5-1.5b", "qwen2", 151936, 1536, 28, 12, 2, 8960, 32768, 0, 1000000.0f, true, 0},
                {"tiny-qwen2", "qwen2", 1024, 256, 4, 8, 2, 768, 2048, 0, 1000000.0f, true, 0},
            },
        .random_layer_vectors = {{"attn_q.bias", LayerVector::Size::QDim},
                                 {"attn_k.bias", LayerVector::Size::KvDim},
                                 {"attn_v.bias", LayerVector::Size::KvDim}},
    };
    a.hf_layer_names.insert(a.hf_layer_names.end(), {{"self_attn.q_proj.bias", "attn_q.bias"},
                                                      {"self_attn.k_proj.bias", "attn_k.bias"},
                                                      {"self_attn.v_proj.bias", "attn_v.bias"}});
    return a;
  }();
  return arch;
}

}  // namespace rbee::llm
