// Gemma 2: Gemma plus "sandwich" norms (after attention and after the MLP too), attention logit soft-capping
// (50) and final logit soft-capping (30), query scale from query_pre_attn_scalar, and a sliding window on
// even layers alternating with global attention.
#include "llm/models/architecture.h"

namespace rbee::llm {

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
  static const Architecture arch{"gemma2", gemma2_hf_names(), sandwich_norm_layer};
  return arch;
}

}  // namespace rbee::llm
