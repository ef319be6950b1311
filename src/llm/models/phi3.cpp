// Phi-3: a pre-norm decoder whose q, k and v projections are one fused qkv matrix [(Hq + 2 Hkv) * D, hidden]
// and whose gate and up projections are one fused gate_up matrix [2 I, hidden] (gate rows first).
// Sliding window from config.sliding_window; partial rotary through partial_rotary_factor.
#include "llm/models/architecture.h"

namespace rbee::llm {

const Architecture& phi3_architecture() {
  static const Architecture arch{
      .name = "phi3",
      .hf_model_types = {"phi3"},
      .hf_layer_names =
          {
              {"input_layernorm.weight", "attn_norm.weight"},
              {"self_attn.qkv_proj.weight", "attn_qkv.weight"},
              {"self_attn.o_proj.weight", "attn_output.weight"},
              {"post_attention_layernorm.weight", "ffn_norm.weight"},
              {"mlp.gate_up_proj.weight", "ffn_up.weight"},
              {"mlp.down_proj.weight", "ffn_down.weight"},
          },
      .layer = pre_norm_layer,
      .traits =
          [](ModelConfig& c) {
            c.fused_qkv = true;
            c.fused_gate_up = true;
          },
      .read_hf = hf_read_sliding_window,
      .chat_family = [](const Tokenizer&) { return std::string("phi3"); },
  };
  return arch;
}

}  // namespace rbee::llm
