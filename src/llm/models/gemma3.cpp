// Gemma 3 (text): Gemma 2's sandwich norms without soft-capping, plus RMS norms on each query and key head
// (q_norm / k_norm), and a local/global pattern: five sliding-window layers (rope base 10 000) then one
// global layer (rope base 1e6, with the model's rope scaling). The multimodal config.json ("gemma3") holds the
// text model's config under text_config.
#include "llm/models/architecture.h"
#include "rbee/formats/gguf.h"

namespace rbee::llm {

void gemma_traits(ModelConfig& c);                   // gemma.cpp
std::string gemma_chat_family(const Tokenizer& t);  // gemma.cpp
std::vector<std::pair<std::string, std::string>> gemma2_hf_names();  // gemma2.cpp

const Architecture& gemma3_architecture() {
  static const Architecture arch = [] {
    Architecture a{
        .name = "gemma3",
        .hf_model_types = {"gemma3_text", "gemma3"},
        .hf_layer_names = gemma2_hf_names(),
        .layer = sandwich_norm_layer,
        .traits =
            [](ModelConfig& c) {
              gemma_traits(c);
              c.post_norms = true;
              c.qk_norm = true;
            },
        // The local layers rotate with their own base (llama.cpp's default when the key is absent: 10000).
        .read_gguf =
            [](const gguf::File& f, const std::string& prefix, ModelConfig& c) {
              c.rope_theta_local = (float)f.get_float(prefix + "rope.freq_base_swa").value_or(10000.0);
            },
        .read_hf =
            [](const HfConfig& config, ModelConfig& c) {
              hf_read_sliding_window(config, c);
              c.rope_theta_local = config.rope_local && config.rope_local->contains("rope_theta")
                                       ? config.rope_local->at("rope_theta").get<float>()
                                       : (float)hf_float(config.json, "rope_local_base_freq", 10000.0);
            },
        // Every pattern-th layer is global.
        .layer_slides = [](int layer, int pattern) { return (layer + 1) % std::max(pattern, 1) != 0; },
        .hf_norm_weight_plus_one = true,
        .hf_nested_text_config = true,
        .chat_family = gemma_chat_family,
        .shape_presets =
            {
                // name, arch, vocab, hidden, layers, heads, kv, ffn, ctx, head_dim, theta, tied, window
                {"tiny-gemma3", "gemma3", 1024, 256, 6, 4, 1, 768, 2048, 64, 1000000.0f, true, 16},
            },
        .random_layer_vectors = {{"attn_q_norm.weight", LayerVector::Size::HeadDim},
                                 {"attn_k_norm.weight", LayerVector::Size::HeadDim},
                                 {"post_attention_norm.weight", LayerVector::Size::Hidden},
                                 {"post_ffw_norm.weight", LayerVector::Size::Hidden}},
    };
    a.hf_layer_names.insert(a.hf_layer_names.end(), {{"self_attn.q_norm.weight", "attn_q_norm.weight"},
                                                      {"self_attn.k_norm.weight", "attn_k_norm.weight"}});
    return a;
  }();
  return arch;
}

}  // namespace rbee::llm
