// The OpenAI chat shape of a choice's output when tools are in play: content and tool_calls (ids, arguments as
// JSON text), finish_reason "tool_calls", and, while streaming, the deltas clients accumulate:
// {"index": i, "id", "type": "function", "function": {"name", "arguments": ""}} to open call i, then
// {"index": i, "function": {"arguments": "..."}} pieces.
//   auto      the model's own format, parsed by llm::ToolCallParser (calls appear as each one completes)
//   named     the whole output is the arguments of the named function (streamed piece by piece)
//   required  the output is a JSON array of {"name", "parameters"} (each call appears once its object closes)
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "rbee/llm/tool_calls.h"
#include "server/llm/requests.h"

namespace rbee::server::llm_api {

class ToolStream {
 public:
  ToolStream(ToolChoice choice, llm::ToolFormat format, std::string tool_name);
  struct Out {
    std::string content;
    nlohmann::json tool_calls = nlohmann::json::array();  // deltas
  };
  Out feed(const std::string& text);
  Out finish();
  bool called() const { return calls_ > 0; }

 private:
  void add_call(Out& out, const llm::ToolCall& call);
  ToolChoice choice_;
  std::string tool_name_;
  llm::ToolCallParser parser_;
  int calls_ = 0;
  // required: scanning the JSON array for complete elements
  std::string pending_;
  int depth_ = 0;
  bool in_string_ = false, escape_ = false;
  size_t element_start_ = std::string::npos;
};

// The message of a finished choice: {"role": "assistant", "content": text or null, "tool_calls"?}; `called` tells
// whether any call was found.
nlohmann::json tool_message(ToolChoice choice, llm::ToolFormat format, const std::string& tool_name,
                            const std::string& text, bool& called);

// "call_" + 24 random hex digits.
std::string tool_call_id();

}  // namespace rbee::server::llm_api
