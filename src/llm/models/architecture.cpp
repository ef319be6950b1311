#include "llm/models/architecture.h"

#include "rbee/core/error.h"

namespace rbee::llm {

std::vector<std::pair<std::string, std::string>> llama_like_hf_names() {
  return {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
}

const Architecture& architecture(const std::string& name) {
  for (const Architecture* a : {&llama_architecture(), &mistral_architecture(), &qwen2_architecture(),
                                &phi3_architecture(), &gemma_architecture(), &gemma2_architecture(),
                                &gemma3_architecture()}) {
    if (name == a->name) return *a;
  }
  RBEE_THROW(ErrorCode::Unsupported, "architecture '{}' is not supported", name);
}

}  // namespace rbee::llm
