#include "rbee/llm/prompt.h"

#include "llm/models/architecture.h"
#include "rbee/core/error.h"

namespace rbee::llm {

std::string chat_family(const ModelConfig& config, const Tokenizer& tokenizer) {
  const Architecture& arch = architecture(config.arch);
  RBEE_ASSERT(arch.chat_family != nullptr, "architecture {} has no chat family", arch.name);
  return arch.chat_family(tokenizer);
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

std::vector<TokenId> text_tokens(const Model& model, const std::string& text, bool parse_special, bool add_special) {
  return model.tokenizer().encode(text, add_special, parse_special);
}

namespace {
std::string strip(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}
}  // namespace

std::string render_chat(const Model& model, const ChatPrompt& chat) {
  const Tokenizer& tok = model.tokenizer();
  const std::string bos = tok.bos_id() >= 0 ? tok.token_text(tok.bos_id()) : "";
  const std::string eos = tok.eos_id() >= 0 ? tok.token_text(tok.eos_id()) : "";
  const std::string family = chat_family(model.config(), tok);
  const std::string& source = chat.template_source.empty() ? model.config().chat_template : chat.template_source;
  nlohmann::ordered_json extra = chat.extra.is_object() ? chat.extra : nlohmann::ordered_json::object();
  if (!chat.tools.is_null()) extra["tools"] = chat.tools;
  RBEE_CHECK(chat.messages.is_array() && !chat.messages.empty(), "messages: must be a non-empty array");
  if (!chat.continue_final_message) {
    return apply_chat_template(source, family, chat.messages, chat.add_generation_prompt, bos, eos, extra);
  }
  const nlohmann::ordered_json& last = chat.messages.back();
  RBEE_CHECK(last.value("role", "") == "assistant",
             "messages: continuing the final message needs it to be the assistant's, got \"{}\"",
             last.value("role", ""));
  const std::string content = last.contains("content") && last["content"].is_string() ? last["content"].get<std::string>()
                                                                                      : std::string();
  if (strip(content).empty()) {
    // Nothing to continue: the same as opening the assistant's turn after the messages before it.
    nlohmann::ordered_json before = chat.messages;
    before.erase(before.size() - 1);
    RBEE_CHECK(!before.empty(), "messages: an empty assistant message alone leaves nothing to answer");
    return apply_chat_template(source, family, before, true, bos, eos, extra);
  }
  const std::string rendered =
      apply_chat_template(source, family, chat.messages, false, bos, eos, extra);
  // As transformers does: the last occurrence of the stripped content; cut after it (keeping trailing spaces the
  // template kept).
  const std::string stripped = strip(content);
  const size_t at = rendered.rfind(stripped);
  RBEE_CHECK(at != std::string::npos,
             "messages: the chat template does not show the final assistant message as it is, so it cannot be "
             "continued");
  const size_t left = content.find_first_not_of(" \t\r\n");
  const std::string lstripped = content.substr(left);
  if (rendered.compare(at, lstripped.size(), lstripped) == 0) return rendered.substr(0, at + lstripped.size());
  return rendered.substr(0, at + stripped.size());
}

std::vector<TokenId> chat_tokens(const Model& model, const ChatPrompt& chat) {
  return model.tokenizer().encode(render_chat(model, chat), /*add_special=*/false, /*parse_special=*/true);
}

}  // namespace rbee::llm
