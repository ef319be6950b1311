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
// Tokens of plain text with the model's BOS/EOS policy.
std::vector<TokenId> text_tokens(const Model& model, const std::string& text);

}  // namespace rbee::llm
