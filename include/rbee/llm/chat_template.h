// Chat templates: renders a model's own `tokenizer.chat_template` (a Jinja template) with a small Jinja
// interpreter that covers what the official templates of Llama 3.x, Qwen2.5, SmolLM2, Mistral, Gemma and
// Phi-3 use. When a template cannot be parsed or rendered, a built-in template for the model family is used
// instead and that fact is logged.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace rbee::llm {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", "tool"
  std::string content;
};

class ChatTemplate {
 public:
  // Parses the template; throws Error(InvalidArgument) with line and column on a syntax error.
  static ChatTemplate parse(std::string_view source);
  // Renders with the variables of `context` (messages, add_generation_prompt, bos_token, eos_token, ...).
  // raise_exception() in the template throws Error(InvalidArgument) with its message.
  std::string render(const nlohmann::json& context) const;

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

 private:
  struct Impl;
  explicit ChatTemplate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Built-in fallback templates by family: "chatml" (Qwen2, SmolLM2), "llama3", "llama2", "mistral", "gemma",
// "phi3". Returns the Jinja source.
std::string builtin_chat_template(std::string_view family);

// Renders `messages` through the model's template source (or, if it fails, the family's built-in one).
std::string apply_chat_template(std::string_view template_source, std::string_view family_fallback,
                                const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                const std::string& bos_token, const std::string& eos_token);

}  // namespace rbee::llm
