// apply_chat_template: the model's template first, the family's built-in one when it fails.
#include "rbee/core/error.h"
#include "rbee/core/log.h"
#include "rbee/llm/chat_template.h"

namespace rbee::llm {

nlohmann::ordered_json chat_template_context(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                             const std::string& bos_token, const std::string& eos_token,
                                             const nlohmann::json& extra_context) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) {
    nlohmann::ordered_json msg = nlohmann::ordered_json::object();
    msg["role"] = m.role;
    msg["content"] = m.content;
    list.push_back(std::move(msg));
  }
  // extra_context's keys keep their (sorted) order in the ordered copy.
  return chat_template_context(list, add_generation_prompt, bos_token, eos_token,
                               nlohmann::ordered_json(extra_context));
}

nlohmann::ordered_json chat_template_context(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                             const std::string& bos_token, const std::string& eos_token,
                                             const nlohmann::ordered_json& extra_context) {
  RBEE_CHECK(messages.is_array(), "chat template messages must be a JSON array, got {}", messages.type_name());
  RBEE_CHECK(extra_context.is_object() || extra_context.is_null(),
             "chat template extra_context must be a JSON object, got {}", extra_context.type_name());
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = messages;
  ctx["tools"] = nullptr;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = add_generation_prompt;
  ctx["bos_token"] = bos_token;
  ctx["eos_token"] = eos_token;
  if (extra_context.is_object())
    for (auto it = extra_context.begin(); it != extra_context.end(); ++it) ctx[it.key()] = it.value();
  return ctx;
}

namespace {
std::string render_with_fallback(std::string_view template_source, std::string_view family_fallback,
                                 const nlohmann::ordered_json& ctx, const ChatRenderOptions& options) {
  std::string model_error;
  if (template_source.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    RBEE_CHECK(!family_fallback.empty(), "the model has no chat template and no fallback family was given");
    model_error = "the model has no chat template";
  } else {
    try {
      return ChatTemplate::parse(template_source).render(ctx, options);
    } catch (const Error& e) {
      if (family_fallback.empty()) throw;
      model_error = e.what();
    }
  }
  log::warn("chat template: {}; using the built-in '{}' template instead", model_error, family_fallback);
  try {
    return ChatTemplate::parse(builtin_chat_template(family_fallback)).render(ctx, options);
  } catch (Error& e) {
    e.add_context(fmt::format("built-in '{}' chat template, used because {}", family_fallback, model_error));
    throw;
  }
}
}  // namespace

std::string apply_chat_template(std::string_view template_source, std::string_view family_fallback,
                                const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                const std::string& bos_token, const std::string& eos_token,
                                const nlohmann::json& extra_context, const ChatRenderOptions& options) {
  return render_with_fallback(template_source, family_fallback,
                              chat_template_context(messages, add_generation_prompt, bos_token, eos_token, extra_context),
                              options);
}

std::string apply_chat_template(std::string_view template_source, std::string_view family_fallback,
                                const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const std::string& bos_token, const std::string& eos_token,
                                const nlohmann::ordered_json& extra_context, const ChatRenderOptions& options) {
  return render_with_fallback(template_source, family_fallback,
                              chat_template_context(messages, add_generation_prompt, bos_token, eos_token, extra_context),
                              options);
}

}  // namespace rbee::llm
