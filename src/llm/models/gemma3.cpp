// Gemma 3 (text): Gemma 2's sandwich norms without soft-capping, plus RMS norms on each query and key head
// (q_norm / k_norm), and a local/global pattern: five sliding-window layers (rope base 10 000) then one
// global layer (rope base 1e6, with the model's rope scaling).
#include "llm/models/architecture.h"

namespace rbee::llm {

std::vector<std::pair<std::string, std::string>> gemma2_hf_names();

const Architecture& gemma3_architecture() {
  static const Architecture arch = [] {
    Architecture a{"gemma3", gemma2_hf_names(), sandwich_norm_layer};
    a.hf_layer_names.insert(a.hf_layer_names.end(), {{"self_attn.q_norm.weight", "attn_q_norm.weight"},
                                                      {"self_attn.k_norm.weight", "attn_k_norm.weight"}});
    return a;
  }();
  return arch;
}

}  // namespace rbee::llm
