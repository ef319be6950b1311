// Mistral: a Llama with sliding-window attention on every layer (config.sliding_window, e.g. 4096 for v0.1;
// absent from v0.2 on). The window is applied inside paged_attention. llama.cpp's converter permutes its q and k
// as for Llama.
#include "llm/models/architecture.h"

namespace rbee::llm {

const Architecture& mistral_architecture() {
  static const Architecture arch{
      .name = "mistral",
      .hf_model_types = {"mistral"},
      .hf_layer_names = llama_like_hf_names(),
      .layer = pre_norm_layer,
      .read_hf = hf_read_sliding_window,
      .gguf_rope_mode = RopeMode::Normal,
      .chat_family = [](const Tokenizer&) { return std::string("mistral"); },
  };
  return arch;
}

}  // namespace rbee::llm
