// Chat templates: renders a model's own `tokenizer.chat_template` (a Jinja template) with our own Jinja
// interpreter (src/llm/chat/), which covers what the official templates of Llama 3.x, Qwen2.5, SmolLM2,
// Mistral, Gemma and Phi-3 use, in Hugging Face's environment (trim_blocks, lstrip_blocks, HF's tojson,
// raise_exception, strftime_now). The output is byte-for-byte what transformers' apply_chat_template gives.
// When a template cannot be parsed or rendered, a built-in template for the model family is used instead and
// that fact is logged.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace rbee::llm {

namespace jinja {
struct Program;
}  // namespace jinja

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", "tool"
  std::string content;
};

struct ChatRenderOptions {
  // The local date and time that strftime_now() formats; unset means the current local time. Fixing it makes
  // templates that print today's date (Granite, gpt-oss, Llama 3.2 without date_string) reproducible.
  std::optional<std::tm> now;
  // Loop iterations plus calls one render may make before it fails: a bound on the work a hostile template
  // can cause. Official templates need about (messages + tools) x a few.
  uint64_t max_steps = 1'000'000;
};

// A parsed template. Parsing once and rendering many times is cheap; render() is const and may run on several
// threads at once.
class ChatTemplate {
 public:
  // Parses the template; throws Error(InvalidArgument) "chat template syntax error at line L, column C: ..."
  // for malformed source, including unknown filters and tests (as Jinja does).
  static ChatTemplate parse(std::string_view source);

  // Renders with the variables of `context`, a JSON object (messages, add_generation_prompt, bos_token,
  // eos_token, tools, date_string, ...). Use ordered_json when the order of object keys matters to the output
  // (a template that prints a dict or iterates its items); nlohmann::json sorts keys.
  // Errors are Error(InvalidArgument): raise_exception(msg) in the template gives message() == msg exactly;
  // runtime errors (undefined variable misused, type errors, limits) add the template position as context.
  std::string render(const nlohmann::json& context, const ChatRenderOptions& options = {}) const;
  std::string render(const nlohmann::ordered_json& context, const ChatRenderOptions& options = {}) const;

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

 private:
  explicit ChatTemplate(std::unique_ptr<jinja::Program> program);
  std::unique_ptr<jinja::Program> program_;
};

// Built-in fallback templates by family: "chatml" (Qwen2, SmolLM2), "llama3", "llama2", "mistral" (the
// [INST] format of Mistral-Nemo), "gemma" (a system message is merged into the first user turn), "phi3".
// Returns the Jinja source; throws Error(NotFound) for another name.
std::string builtin_chat_template(std::string_view family);
std::vector<std::string> builtin_chat_template_families();

// The render context transformers builds for apply_chat_template: messages, tools = null, documents = null,
// add_generation_prompt, bos_token, eos_token, then every key of `extra_context` (which may override them),
// e.g. {"date_string": "26 Jul 2024"} for Llama 3.x.
nlohmann::ordered_json chat_template_context(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                             const std::string& bos_token, const std::string& eos_token,
                                             const nlohmann::json& extra_context = nlohmann::json::object());

// The same context from messages already in JSON (objects with role, content and, for tool use, tool_calls,
// tool_call_id, name), in their key order; `extra_context` keys (tools, template kwargs) are added last.
nlohmann::ordered_json chat_template_context(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                             const std::string& bos_token, const std::string& eos_token,
                                             const nlohmann::ordered_json& extra_context);

// Renders `messages` through the model's template source. If that source is empty, or fails to parse or render
// (raise_exception included), logs a warning and renders the built-in template of `family_fallback` instead;
// with an empty `family_fallback` the model template's error is thrown. Throws Error when the fallback fails too.
std::string apply_chat_template(std::string_view template_source, std::string_view family_fallback,
                                const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                const std::string& bos_token, const std::string& eos_token,
                                const nlohmann::json& extra_context = nlohmann::json::object(),
                                const ChatRenderOptions& options = {});
// The same for messages in JSON (see the chat_template_context overload above).
std::string apply_chat_template(std::string_view template_source, std::string_view family_fallback,
                                const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const std::string& bos_token, const std::string& eos_token,
                                const nlohmann::ordered_json& extra_context, const ChatRenderOptions& options = {});

}  // namespace rbee::llm
