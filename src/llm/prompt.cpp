#include "rbee/llm/prompt.h"

namespace rbee::llm {

std::string chat_family(const ModelConfig& config, const Tokenizer& tokenizer) {
  const std::string& a = config.arch;
  if (a == "qwen2") return "chatml";
  if (a == "phi3") return "phi3";
  if (a == "mistral") return "mistral";
  if (a.rfind("gemma", 0) == 0) return "gemma";
  // Llama family: Llama 3 has header tokens, SmolLM uses ChatML, Llama 2 neither.
  for (TokenId id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.is_special(id)) continue;
    const std::string& t = tokenizer.token_text(id);
    if (t == "<|start_header_id|>") return "llama3";
    if (t == "<|im_start|>") return "chatml";
  }
  return "llama2";
}

std::string render_chat(const Model& model, const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  const Tokenizer& tok = model.tokenizer();
  const std::string bos = tok.bos_id() >= 0 ? tok.token_text(tok.bos_id()) : "";
  const std::string eos = tok.eos_id() >= 0 ? tok.token_text(tok.eos_id()) : "";
  return apply_chat_template(model.config().chat_template, chat_family(model.config(), tok), messages,
                             add_generation_prompt, bos, eos);
}

std::vector<TokenId> chat_tokens(const Model& model, const std::vector<ChatMessage>& messages) {
  return model.tokenizer().encode(render_chat(model, messages, true), /*add_special=*/false, /*parse_special=*/true);
}

std::vector<TokenId> text_tokens(const Model& model, const std::string& text) {
  return model.tokenizer().encode(text, /*add_special=*/true, /*parse_special=*/false);
}

}  // namespace rbee::llm
