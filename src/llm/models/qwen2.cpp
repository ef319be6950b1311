// Qwen2 / Qwen2.5: a Llama with biases on the q, k and v projections (not on o), rope theta 1e6, tied
// embeddings on the small models.
#include "llm/models/architecture.h"

namespace rbee::llm {

const Architecture& qwen2_architecture() {
  static const Architecture arch = [] {
    Architecture a{"qwen2", llama_like_hf_names(), pre_norm_layer};
    a.hf_layer_names.insert(a.hf_layer_names.end(), {{"self_attn.q_proj.bias", "attn_q.bias"},
                                                      {"self_attn.k_proj.bias", "attn_k.bias"},
                                                      {"self_attn.v_proj.bias", "attn_v.bias"}});
    return a;
  }();
  return arch;
}

}  // namespace rbee::llm
