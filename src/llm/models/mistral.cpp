// Mistral: a Llama with sliding-window attention on every layer (config.sliding_window, e.g. 4096 for v0.1;
// absent from v0.2 on). The window is applied inside paged_attention.
#include "llm/models/architecture.h"

namespace rbee::llm {

const Architecture& mistral_architecture() {
  static const Architecture arch{"mistral", llama_like_hf_names(), pre_norm_layer};
  return arch;
}

}  // namespace rbee::llm
