// Python's text formatting as templates reach it: json.dumps (HF's `tojson`), `"%s" % x` and str.format().
#pragma once

#include <optional>
#include <string>

#include "llm/chat/value.h"

namespace rbee::llm::jinja {

// json.dumps(v, ensure_ascii=..., indent=..., separators=..., sort_keys=...).
struct JsonOptions {
  std::optional<std::string> indent;  // per-level indent text; absent = single line
  bool ensure_ascii = false;          // HF's tojson default (Jinja's own would escape; HF overrides it)
  std::string item_sep = ", ";        // Python's default: ", " without indent, "," with indent
  std::string key_sep = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& options);

// `format % args` (printf-style): args is a tuple (several values), a dict (for %(name)s) or one value.
std::string percent_format(const std::string& format, const Value& args);

// format.format(*positional, **keyword) with Python's field syntax and the common format specs.
std::string str_format(const std::string& format, const CallArgs& args);

}  // namespace rbee::llm::jinja
