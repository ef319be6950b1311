// Llama 2 and Llama 3 (and SmolLM, which is a Llama): pre-norm decoder, SwiGLU MLP, rotary embedding.
// Llama 3.1 scales rotary frequencies ("llama3" rope scaling; in GGUF as the rope_freqs tensor).
// GGUF files store q and k permuted for adjacent-pair rotation, so GGUF Llamas use RopeMode::Normal and
// Hugging Face ones RopeMode::Neox.
#include "llm/models/architecture.h"
#include "rbee/llm/tokenizer.h"

namespace rbee::llm {

namespace {

// The Llama family's chat format shows in its vocabulary: Llama 3 has header tokens, SmolLM uses ChatML,
// Llama 2 neither.
std::string llama_chat_family(const Tokenizer& tokenizer) {
  for (TokenId id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.is_special(id)) continue;
    const std::string& t = tokenizer.token_text(id);
    if (t == "<|start_header_id|>") return "llama3";
    if (t == "<|im_start|>") return "chatml";
  }
  return "llama2";
}

}  // namespace

const Architecture& llama_architecture() {
  static const Architecture arch{
      .name = "llama",
      .hf_model_types = {"llama"},
      .hf_layer_names = llama_like_hf_names(),
      .layer = pre_norm_layer,
      .gguf_rope_mode = RopeMode::Normal,
      .chat_family = llama_chat_family,
      .shape_presets =
          {
              // name, arch, vocab, hidden, layers, heads, kv, ffn, ctx, head_dim, theta, tied, window
              {"llama2-7b", "llama", 32000, 4096, 32, 32, 32, 11008, 4096, 0, 10000.0f, false, 0},
              {"llama2-70b", "llama", 32000, 8192, 80, 64, 8, 28672, 4096, 0, 10000.0f, false, 0},
              {"llama3-8b", "llama", 128256, 4096, 32, 32, 8, 14336, 8192, 0, 500000.0f, false, 0},
              {"llama3.2-1b", "llama", 128256, 2048, 16, 32, 8, 8192, 8192, 64, 500000.0f, true, 0},
              // SmolLM2-135M's shape (the CPU default model's; GPU serving checks without its weights).
              {"smollm2-135m", "llama", 49152, 576, 30, 9, 3, 1536, 8192, 64, 100000.0f, true, 0},
              // Small shape for GPU-versus-CPU checks of the family's code path.
              {"tiny-llama", "llama", 1024, 256, 4, 8, 2, 768, 2048, 0, 10000.0f, false, 0},
          },
  };
  return arch;
}

}  // namespace rbee::llm
