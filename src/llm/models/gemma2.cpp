// Gemma 2: Gemma plus "sandwich" norms (after attention and after the MLP too), attention logit soft-capping
// (50) and final logit soft-capping (30), query scale from query_pre_attn_scalar, and a sliding window on
// even layers alternating with global attention.
#include "llm/models/architecture.h"

namespace rbee::llm {

void gemma_traits(ModelConfig& c);                   // gemma.cpp
std::string gemma_chat_family(const Tokenizer& t);  // gemma.cpp

std::vector<std::pair<std::string, std::string>> gemma2_hf_names() {
  return {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"post_attention_layernorm.weight", "post_attention_norm.weight"},
      {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
      {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
}

const Architecture& gemma2_architecture() {
  static const Architecture arch{
      .name = "gemma2",
      .hf_model_types = {"gemma2"},
      .hf_layer_names = gemma2_hf_names(),
      .layer = sandwich_norm_layer,
      .traits =
          [](ModelConfig& c) {
            gemma_traits(c);
            c.post_norms = true;
          },
      .read_hf = hf_read_sliding_window,
      .layer_slides = [](int layer, int) { return layer % 2 == 0; },  // even layers are local
      .hf_norm_weight_plus_one = true,
      .chat_family = gemma_chat_family,
  };
  return arch;
}

}  // namespace rbee::llm
