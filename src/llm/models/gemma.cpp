// Gemma: pre-norm decoder with GeGLU (tanh-approximated GELU) MLP, embeddings scaled by sqrt(hidden), norms
// that multiply by (1 + w) (folded into the weights at load for Hugging Face files; GGUF stores 1 + w),
// tied embeddings, head_dim from the config (256).
#include "llm/models/architecture.h"

namespace rbee::llm {

const Architecture& gemma_architecture() {
  static const Architecture arch{"gemma", llama_like_hf_names(), pre_norm_layer};
  return arch;
}

}  // namespace rbee::llm
