// Llama 2 and Llama 3 (and SmolLM, which is a Llama): pre-norm decoder, SwiGLU MLP, rotary embedding.
// Llama 3.1 scales rotary frequencies ("llama3" rope scaling; in GGUF as the rope_freqs tensor).
// GGUF files store q and k permuted for adjacent-pair rotation, so GGUF Llamas use RopeMode::Normal and
// Hugging Face ones RopeMode::Neox (see config_from_gguf / config_from_hf).
#include "llm/models/architecture.h"

namespace rbee::llm {

const Architecture& llama_architecture() {
  static const Architecture arch{"llama", llama_like_hf_names(), pre_norm_layer};
  return arch;
}

}  // namespace rbee::llm
