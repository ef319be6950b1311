#include "server/llm/tool_stream.h"

#include "server/util.h"

namespace rbee::server::llm_api {

std::string tool_call_id() {
  std::string id = random_id("call");
  id[4] = '_';
  return id;
}

ToolStream::ToolStream(ToolChoice choice, llm::ToolFormat format, std::string tool_name)
    : choice_(choice), tool_name_(std::move(tool_name)), parser_(format) {}

void ToolStream::add_call(Out& out, const llm::ToolCall& call) {
  const int index = calls_++;
  out.tool_calls.push_back({{"index", index},
                            {"id", call.id.empty() ? tool_call_id() : call.id},
                            {"type", "function"},
                            {"function", {{"name", call.name}, {"arguments", ""}}}});
  out.tool_calls.push_back({{"index", index}, {"function", {{"arguments", call.arguments}}}});
}

ToolStream::Out ToolStream::feed(const std::string& text) {
  Out out;
  switch (choice_) {
    case ToolChoice::None: out.content = text; break;
    case ToolChoice::Auto: {
      llm::ToolOutput o = parser_.feed(text);
      out.content = std::move(o.content);
      for (const auto& c : o.calls) add_call(out, c);
      break;
    }
    case ToolChoice::Named:
      if (calls_ == 0) {
        calls_ = 1;
        out.tool_calls.push_back({{"index", 0},
                                  {"id", tool_call_id()},
                                  {"type", "function"},
                                  {"function", {{"name", tool_name_}, {"arguments", ""}}}});
      }
      if (!text.empty()) out.tool_calls.push_back({{"index", 0}, {"function", {{"arguments", text}}}});
      break;
    case ToolChoice::Required:
      // The grammar makes the text a JSON array of objects: an element ends where its braces close.
      for (char c : text) {
        pending_ += c;
        if (in_string_) {
          if (escape_) escape_ = false;
          else if (c == '\\') escape_ = true;
          else if (c == '"') in_string_ = false;
          continue;
        }
        if (c == '"') in_string_ = true;
        else if (c == '{' || c == '[') {
          if (c == '{' && depth_ == 1) element_start_ = pending_.size() - 1;
          ++depth_;
        } else if (c == '}' || c == ']') {
          --depth_;
          if (c == '}' && depth_ == 1 && element_start_ != std::string::npos) {
            const nlohmann::ordered_json e = nlohmann::ordered_json::parse(pending_.substr(element_start_), nullptr, false);
            if (e.is_object() && e.contains("name")) {
              llm::ToolCall call;
              call.name = e["name"].get<std::string>();
              call.arguments = e.contains("parameters") ? e["parameters"].dump() : "{}";
              add_call(out, call);
            }
            element_start_ = std::string::npos;
          }
        }
      }
      break;
  }
  return out;
}

ToolStream::Out ToolStream::finish() {
  Out out;
  if (choice_ == ToolChoice::Auto) {
    llm::ToolOutput o = parser_.finish();
    out.content = std::move(o.content);
    for (const auto& c : o.calls) add_call(out, c);
  }
  return out;
}

nlohmann::json tool_message(ToolChoice choice, llm::ToolFormat format, const std::string& tool_name,
                            const std::string& text, bool& called) {
  ToolStream s(choice, format, tool_name);
  ToolStream::Out a = s.feed(text), b = s.finish();
  const std::string content = a.content + b.content;
  called = s.called();
  nlohmann::json msg = {{"role", "assistant"}};
  msg["content"] = called && content.empty() ? nlohmann::json(nullptr) : nlohmann::json(content);
  if (!called) return msg;
  // Collapse the deltas into whole calls.
  nlohmann::json calls = nlohmann::json::array();
  for (const auto* deltas : {&a.tool_calls, &b.tool_calls}) {
    for (const auto& d : *deltas) {
      const size_t i = d["index"].get<size_t>();
      if (d.contains("id")) {
        calls.push_back({{"id", d["id"]}, {"type", "function"},
                         {"function", {{"name", d["function"]["name"]}, {"arguments", ""}}}});
      }
      calls[i]["function"]["arguments"] = calls[i]["function"]["arguments"].get<std::string>() +
                                          d["function"]["arguments"].get<std::string>();
    }
  }
  msg["tool_calls"] = std::move(calls);
  return msg;
}

}  // namespace rbee::server::llm_api
