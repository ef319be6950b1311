// Gemma: pre-norm decoder with GeGLU (tanh-approximated GELU) MLP, embeddings scaled by sqrt(hidden), norms
// that multiply by (1 + w) (folded into the weights at load for Hugging Face files; GGUF stores 1 + w),
// tied embeddings, head_dim from the config (256). gemma_traits() is shared by Gemma 2 and Gemma 3.
#include <cmath>

#include "llm/models/architecture.h"

namespace rbee::llm {

void gemma_traits(ModelConfig& c) {
  c.activation = Activation::GeluTanh;
  c.embedding_scale = std::sqrt((float)c.hidden_size);
  c.tie_embeddings = true;
}

std::string gemma_chat_family(const Tokenizer&) { return "gemma"; }

const Architecture& gemma_architecture() {
  static const Architecture arch{
      .name = "gemma",
      .hf_model_types = {"gemma"},
      .hf_layer_names = llama_like_hf_names(),
      .layer = pre_norm_layer,
      .traits = gemma_traits,
      .hf_norm_weight_plus_one = true,
      .chat_family = gemma_chat_family,
  };
  return arch;
}

}  // namespace rbee::llm
