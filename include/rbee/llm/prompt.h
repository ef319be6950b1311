// Turning user input into prompt tokens for a model: plain text (with the model's BOS) or a conversation
// rendered through the model's own chat template (or its family's built-in one).
#pragma once

#include <string>
#include <vector>

#include "rbee/llm/chat_template.h"
#include "rbee/llm/model.h"

namespace rbee::llm {

// The built-in template family to fall back on for this model ("chatml", "llama3", "llama2", "mistral",
// "gemma", "phi3").
std::string chat_family(const ModelConfig& config, const Tokenizer& tokenizer);

// Renders messages with the model's chat template; add_generation_prompt opens the assistant's turn.
std::string render_chat(const Model& model, const std::vector<ChatMessage>& messages, bool add_generation_prompt);

// Tokens of a rendered chat (special tokens parsed, no BOS added: the template writes its own).
std::vector<TokenId> chat_tokens(const Model& model, const std::vector<ChatMessage>& messages);
// Tokens of plain text with the model's BOS/EOS policy (add_special). parse_special: text such as
// "<|im_start|>" becomes that special token (what a client sending a hand-written chat prompt means); off, it is
// plain text.
std::vector<TokenId> text_tokens(const Model& model, const std::string& text, bool parse_special = false,
                                 bool add_special = true);

// A conversation as API clients send it, for the model's chat template.
struct ChatPrompt {
  // Message objects {role, content (string or null), tool_calls?, tool_call_id?, name?}; tool_calls' arguments
  // as objects (what templates print with tojson).
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;                                      // null, or the tool definitions
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // more template variables (chat_template_kwargs)
  bool add_generation_prompt = true;  // open the assistant's turn
  // The last message is the assistant's and the model continues it (prefill): the text ends where that message's
  // content ends, without the end-of-turn the template writes after it (Hugging Face's continue_final_message).
  bool continue_final_message = false;
  std::string template_source;  // a template to use instead of the model's (empty: the model's)
};
// Renders it; throws InvalidArgument when the template refuses it or the final message cannot be continued.
std::string render_chat(const Model& model, const ChatPrompt& chat);
std::vector<TokenId> chat_tokens(const Model& model, const ChatPrompt& chat);

}  // namespace rbee::llm
