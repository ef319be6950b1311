// The public ChatTemplate: parse once, render with a JSON context.
#include "rbee/llm/chat_template.h"

#include "llm/chat/interpreter.h"
#include "llm/chat/parser.h"

namespace rbee::llm {

ChatTemplate::ChatTemplate(std::unique_ptr<jinja::Program> program) : program_(std::move(program)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

ChatTemplate ChatTemplate::parse(std::string_view source) { return ChatTemplate(jinja::parse_program(source)); }

std::string ChatTemplate::render(const nlohmann::json& context, const ChatRenderOptions& options) const {
  RBEE_CHECK(context.is_object(), "chat template render context must be a JSON object, got {}", context.type_name());
  jinja::Interpreter interp(*program_, jinja::from_json(context));
  interp.set_options(options.now, options.max_steps);
  return interp.render();
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context, const ChatRenderOptions& options) const {
  RBEE_CHECK(context.is_object(), "chat template render context must be a JSON object, got {}", context.type_name());
  jinja::Interpreter interp(*program_, jinja::from_json(context));
  interp.set_options(options.now, options.max_steps);
  return interp.render();
}

}  // namespace rbee::llm
