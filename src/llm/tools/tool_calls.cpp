#include "rbee/llm/tool_calls.h"

#include <nlohmann/json.hpp>

#include "rbee/core/error.h"
#include "rbee/llm/chat_template.h"

namespace rbee::llm {

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";

std::string_view ltrim(std::string_view s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  return a == std::string_view::npos ? std::string_view() : s.substr(a);
}
std::string_view trim(std::string_view s) {
  s = ltrim(s);
  const size_t b = s.find_last_not_of(" \t\r\n");
  return b == std::string_view::npos ? std::string_view() : s.substr(0, b + 1);
}

// One call from a JSON object {"name", "arguments" | "parameters", "id"?}; false when it is not one.
bool call_from_json(const nlohmann::ordered_json& j, ToolCall& out) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  out.name = j["name"].get<std::string>();
  const nlohmann::ordered_json* args = nullptr;
  if (j.contains("arguments")) args = &j["arguments"];
  else if (j.contains("parameters")) args = &j["parameters"];
  if (!args || args->is_null()) {
    out.arguments = "{}";
  } else if (args->is_string()) {
    // Arguments already as JSON text (some models write them so): kept if they parse.
    try {
      out.arguments = nlohmann::ordered_json::parse(args->get<std::string>()).dump();
    } catch (const nlohmann::json::exception&) {
      return false;
    }
  } else if (args->is_object()) {
    out.arguments = args->dump();
  } else {
    return false;
  }
  if (j.contains("id") && j["id"].is_string()) out.id = j["id"].get<std::string>();
  return true;
}

bool parse_json(std::string_view text, nlohmann::ordered_json& out) {
  try {
    out = nlohmann::ordered_json::parse(text.begin(), text.end());
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

// Llama 3.x: one JSON object, or several separated by ';' (split where the JSON parses).
bool parse_llama3(std::string_view text, std::vector<ToolCall>& calls) {
  text = trim(text);
  if (text.rfind(kPythonTag, 0) == 0) text = trim(text.substr(kPythonTag.size()));
  if (text.empty() || text[0] != '{') return false;
  std::vector<ToolCall> found;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = start;
    bool ok = false;
    // The shortest prefix up to a ';' (or the end) that parses as a call.
    while (true) {
      const size_t semi = text.find(';', end);
      const size_t stop = semi == std::string_view::npos ? text.size() : semi;
      nlohmann::ordered_json j;
      ToolCall c;
      if (parse_json(trim(text.substr(start, stop - start)), j) && call_from_json(j, c)) {
        found.push_back(std::move(c));
        start = stop + 1;
        ok = true;
        break;
      }
      if (semi == std::string_view::npos) break;
      end = semi + 1;
    }
    if (!ok) return false;
    const std::string_view rest = ltrim(text.substr(std::min(start, text.size())));
    start = text.size() - rest.size();
  }
  calls = std::move(found);
  return !calls.empty();
}

// Mistral: [TOOL_CALLS] then a JSON array, or name[ARGS]{...} per call (v11).
bool parse_mistral(std::string_view text, std::vector<ToolCall>& calls) {
  text = trim(text);
  if (text.rfind(kMistralCalls, 0) != 0) return false;
  std::string_view rest = trim(text.substr(kMistralCalls.size()));
  std::vector<ToolCall> found;
  if (!rest.empty() && rest[0] == '[') {
    nlohmann::ordered_json j;
    if (!parse_json(rest, j) || !j.is_array()) return false;
    for (const auto& e : j) {
      ToolCall c;
      if (!call_from_json(e, c)) return false;
      found.push_back(std::move(c));
    }
  } else {
    // name[ARGS]{...}[TOOL_CALLS]name[ARGS]{...}
    while (!rest.empty()) {
      const size_t args = rest.find(kMistralArgs);
      if (args == std::string_view::npos) return false;
      ToolCall c;
      c.name = std::string(trim(rest.substr(0, args)));
      std::string_view body = rest.substr(args + kMistralArgs.size());
      const size_t next = body.find(kMistralCalls);
      const std::string_view json = trim(next == std::string_view::npos ? body : body.substr(0, next));
      nlohmann::ordered_json j;
      if (c.name.empty() || !parse_json(json, j) || !j.is_object()) return false;
      c.arguments = j.dump();
      found.push_back(std::move(c));
      rest = next == std::string_view::npos ? std::string_view() : trim(body.substr(next + kMistralCalls.size()));
    }
  }
  calls = std::move(found);
  return !calls.empty();
}

// One Hermes block's inside.
bool parse_hermes_block(std::string_view inside, ToolCall& c) {
  nlohmann::ordered_json j;
  return parse_json(trim(inside), j) && call_from_json(j, c);
}

ToolOutput parse_hermes(std::string_view text) {
  ToolOutput out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t open = text.find(kHermesOpen, at);
    if (open == std::string_view::npos) {
      out.content += text.substr(at);
      break;
    }
    const size_t body = open + kHermesOpen.size();
    const size_t close = text.find(kHermesClose, body);
    const std::string_view inside = text.substr(body, close == std::string_view::npos ? std::string_view::npos : close - body);
    ToolCall c;
    if (!parse_hermes_block(inside, c)) {
      out.content += text.substr(at, (close == std::string_view::npos ? text.size() : close + kHermesClose.size()) - at);
      if (close == std::string_view::npos) break;
      at = close + kHermesClose.size();
      continue;
    }
    out.content += text.substr(at, open - at);
    out.calls.push_back(std::move(c));
    if (close == std::string_view::npos) break;
    at = close + kHermesClose.size();
  }
  if (!out.calls.empty()) out.content = std::string(trim(out.content));
  return out;
}

// Longest suffix of `s` that is a proper prefix of `marker`.
size_t partial_suffix(std::string_view s, std::string_view marker) {
  for (size_t len = std::min(s.size(), marker.size() - 1); len > 0; --len) {
    if (s.substr(s.size() - len) == marker.substr(0, len)) return len;
  }
  return 0;
}

}  // namespace

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::Hermes: return "hermes";
    case ToolFormat::Llama3: return "llama3";
    case ToolFormat::Mistral: return "mistral";
    case ToolFormat::Json: return "json";
  }
  return "json";
}

ToolFormat detect_tool_format(std::string_view src) {
  if (src.find(kHermesOpen) != std::string_view::npos) return ToolFormat::Hermes;
  if (src.find(kMistralCalls) != std::string_view::npos) return ToolFormat::Mistral;
  if (src.find(kPythonTag) != std::string_view::npos ||
      (src.find("<|start_header_id|>") != std::string_view::npos && src.find("parameters") != std::string_view::npos)) {
    return ToolFormat::Llama3;
  }
  return ToolFormat::Json;
}

bool template_supports_tools(std::string_view src, const std::string& bos, const std::string& eos) {
  if (src.find_first_not_of(" \t\r\n") == std::string_view::npos) return false;
  const nlohmann::ordered_json messages = nlohmann::ordered_json::array(
      {{{"role", "user"}, {"content", "What is the weather in Paris?"}}});
  const nlohmann::ordered_json tool = {
      {"type", "function"},
      {"function",
       {{"name", "rbee_probe_tool"},
        {"description", "probe"},
        {"parameters",
         {{"type", "object"},
          {"properties", {{"city", {{"type", "string"}, {"description", "the city"}}}}},
          {"required", {"city"}}}}}}};
  std::string with;
  try {
    const ChatTemplate t = ChatTemplate::parse(src);
    with = t.render(chat_template_context(messages, true, bos, eos, nlohmann::ordered_json{{"tools", {tool}}}));
    if (with.find("rbee_probe_tool") == std::string::npos) return false;
    // A template written only for tools may fail without them (Hermes' tool_use one iterates `tools`): still
    // support. One that renders the same either way ignores tools.
    return t.render(chat_template_context(messages, true, bos, eos, nlohmann::ordered_json::object())) != with;
  } catch (const Error&) {
    return !with.empty();
  }
}

ToolOutput parse_tool_output(ToolFormat format, std::string_view text) {
  ToolOutput out;
  switch (format) {
    case ToolFormat::Hermes: return parse_hermes(text);
    case ToolFormat::Llama3:
      if (parse_llama3(text, out.calls)) return out;
      break;
    case ToolFormat::Mistral:
      if (parse_mistral(text, out.calls)) return out;
      if (parse_llama3(text, out.calls)) return out;  // a bare JSON call without the marker
      {
        // A bare JSON array of calls (the marker was not kept).
        nlohmann::ordered_json j;
        const std::string_view t = trim(text);
        if (!t.empty() && t[0] == '[' && parse_json(t, j) && j.is_array() && !j.empty()) {
          std::vector<ToolCall> calls;
          bool ok = true;
          for (const auto& e : j) {
            ToolCall c;
            ok = ok && call_from_json(e, c);
            calls.push_back(std::move(c));
          }
          if (ok) {
            out.calls = std::move(calls);
            return out;
          }
        }
      }
      break;
    case ToolFormat::Json: {
      ToolOutput h = parse_hermes(text);
      if (!h.calls.empty()) return h;
      if (parse_llama3(text, out.calls)) return out;
      break;
    }
  }
  out.calls.clear();
  out.content = std::string(text);
  return out;
}

ToolOutput ToolCallParser::feed(std::string_view text) {
  ToolOutput out;
  if (mode_ == Mode::Content) {
    out.content = std::string(text);
    return out;
  }
  buffer_ += text;
  const bool hermes = format_ == ToolFormat::Hermes || format_ == ToolFormat::Json;
  if (format_ == ToolFormat::Hermes) {
    if (mode_ != Mode::Tools) {
      const size_t open = buffer_.find(kHermesOpen);
      if (open == std::string::npos) {
        const size_t hold = partial_suffix(buffer_, kHermesOpen);
        out.content = buffer_.substr(0, buffer_.size() - hold);
        buffer_.erase(0, buffer_.size() - hold);
        return out;
      }
      out.content = buffer_.substr(0, open);
      buffer_.erase(0, open);
      mode_ = Mode::Tools;
    }
    // Complete blocks at the front become calls as soon as they close.
    while (true) {
      const std::string_view b = ltrim(buffer_);
      if (b.rfind(kHermesOpen, 0) != 0) break;
      const size_t close = b.find(kHermesClose);
      if (close == std::string_view::npos) break;
      ToolCall c;
      if (!parse_hermes_block(b.substr(kHermesOpen.size(), close - kHermesOpen.size()), c)) break;
      out.calls.push_back(std::move(c));
      called_ = true;
      buffer_.erase(0, buffer_.size() - b.size() + close + kHermesClose.size());
    }
    return out;
  }
  (void)hermes;
  if (mode_ == Mode::Undecided) {
    const std::string_view b = ltrim(buffer_);
    if (b.empty()) return out;
    // Could this be the start of a call? Then wait for the whole output.
    bool maybe = b[0] == '{' || b[0] == '[';
    for (std::string_view marker : {kPythonTag, kMistralCalls, kHermesOpen}) {
      const size_t n = std::min(marker.size(), b.size());
      maybe = maybe || b.substr(0, n) == marker.substr(0, n);
    }
    if (maybe) {
      mode_ = Mode::Tools;
      return out;
    }
    mode_ = Mode::Content;
    out.content = std::move(buffer_);
    buffer_.clear();
  }
  return out;
}

ToolOutput ToolCallParser::finish() {
  ToolOutput out;
  if (mode_ == Mode::Content || buffer_.empty()) return out;
  out = parse_tool_output(format_, buffer_);
  buffer_.clear();
  if (!out.calls.empty()) called_ = true;
  return out;
}

}  // namespace rbee::llm
