// Tool calling: which format a chat template teaches its model for tool calls, whether the template shows tools
// to the model at all, and parsers that split a model's output into content and tool calls, all at once or as
// the text streams.
//
// Formats (from the models' documentation; tests/data/tool_calls/README.md names each source):
//   Hermes   Qwen2.5, Qwen3, Hermes 2 Pro / 3, SmolLM3: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>,
//            one block per call, content may come before them.
//   Llama3   Llama 3.1 / 3.2 / 3.3 JSON tool calling: the message is {"name": ..., "parameters": {...}} (optionally
//            after <|python_tag|>), several calls separated by ';'.
//   Mistral  Mistral v3 tokenizer: [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}, ...]; the v11
//            form [TOOL_CALLS]name[ARGS]{...} too.
//   Json     a template with tools but no known marker: Hermes blocks or Llama-style JSON, whichever parses.
// The parsers see special tokens as text (the worker decodes tool-call output without skipping them).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rbee::llm {

enum class ToolFormat { Hermes, Llama3, Mistral, Json };
const char* tool_format_name(ToolFormat format);  // "hermes", "llama3", "mistral", "json"

// The format a chat template's source asks for (its markers), else Json.
ToolFormat detect_tool_format(std::string_view template_source);

// True when rendering a conversation with a tool differs from rendering it without (the template shows tools to
// the model). A template that fails to render either way has no tool support.
bool template_supports_tools(std::string_view template_source, const std::string& bos_token,
                             const std::string& eos_token);

struct ToolCall {
  std::string id;         // the model's own id (Mistral), else empty
  std::string name;
  std::string arguments;  // JSON text of an object
};

struct ToolOutput {
  std::string content;
  std::vector<ToolCall> calls;
};

// Splits a whole output.
ToolOutput parse_tool_output(ToolFormat format, std::string_view text);

// The same as the text streams: feed() returns content that can no longer become part of a tool call and the
// calls completed so far; finish() returns the rest. Concatenating every result gives parse_tool_output's.
class ToolCallParser {
 public:
  explicit ToolCallParser(ToolFormat format) : format_(format) {}
  ToolOutput feed(std::string_view text);
  ToolOutput finish();
  bool called() const { return called_; }  // any call returned so far

 private:
  enum class Mode { Undecided, Content, Tools };
  ToolFormat format_;
  Mode mode_ = Mode::Undecided;
  std::string buffer_;
  bool called_ = false;
};

}  // namespace rbee::llm
