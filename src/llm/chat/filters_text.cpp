// String filters: trim, upper, lower, capitalize, title, replace, indent, center, truncate, wordcount, escape,
// format, string, safe. Each converts its input with str() first, as Jinja's soft_str does; those that
// markupsafe implements as Markup methods keep a Markup input Markup.
#include "llm/chat/args.h"
#include "llm/chat/filters_impl.h"
#include "llm/chat/ops.h"
#include "llm/chat/py_format.h"
#include "llm/chat/str_methods.h"
#include "llm/chat/utf8.h"

namespace rbee::llm::jinja::filters {

Value trim(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("trim", args, {"chars"});
  const Value chars = a.get_or(0, Value::none());
  if (!chars.is_none() && !chars.is_string()) fail("trim() argument 'chars' must be str or None");
  return same_kind(in, utf8::strip(to_str(in), chars.is_string() ? &chars.as_string() : nullptr, true, true));
}

Value upper(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("upper", args, {});
  return same_kind(in, utf8::upper(to_str(in)));
}

Value lower(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("lower", args, {});
  return same_kind(in, utf8::lower(to_str(in)));
}

Value capitalize(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("capitalize", args, {});
  return same_kind(in, str::capitalize(to_str(in)));
}

// Jinja's title: split on runs of [-\s({[<], upper-case the first character of every piece, lower-case the rest.
Value title(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("title", args, {});
  const std::vector<char32_t> cps = utf8::decode(to_str(in));
  auto is_sep = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || utf8::is_space(c);
  };
  std::string out;
  size_t i = 0;
  while (i < cps.size()) {
    const bool sep = is_sep(cps[i]);
    size_t j = i;
    while (j < cps.size() && is_sep(cps[j]) == sep) ++j;
    for (size_t k = i; k < j; ++k) {
      if (k == i) {
        if (cps[k] == 0xDF) {
          out += "Ss";  // Python's title case of U+00DF
        } else {
          utf8::append(out, utf8::to_upper(cps[k]));
        }
      } else {
        utf8::append(out, utf8::to_lower(cps[k]));
      }
    }
    i = j;
  }
  return Value::string(std::move(out));
}

Value replace(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("replace", args, {"old", "new", "count"});
  const Value count = a.get_or(2, Value::none());
  if (!count.is_none() && !count.is_integral()) fail("replace() argument 'count' must be int or None");
  return Value::string(str::replace(to_str(in), to_str(a.required(0)), to_str(a.required(1)),
                                    count.is_none() ? -1 : count.as_int()));
}

Value indent(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("indent", args, {"width", "first", "blank"});
  const Value width = a.get_or(0, Value::integer(4));
  std::string indention;
  if (width.is_string()) {
    indention = width.as_string();
  } else if (width.is_integral()) {
    if (width.as_int() > 0) indention.assign(static_cast<size_t>(std::min<int64_t>(width.as_int(), 4096)), ' ');
  } else {
    fail("indent() argument 'width' must be int or str");
  }
  const bool first = a.has(1) && a.flag(1);
  const bool blank = a.has(2) && a.flag(2);
  const std::vector<std::string> lines = str::splitlines(to_str(in) + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "\n";
    if (i > 0 && (blank || !lines[i].empty())) out += indention;
    out += lines[i];
    check_string_size(out.size());
  }
  if (first) out = indention + out;
  return same_kind(in, std::move(out));
}

Value center(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("center", args, {"width"});
  return same_kind(in, str::center(to_str(in), a.has(0) ? a.integer(0) : 80, ' '));
}

Value truncate(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("truncate", args, {"length", "killwords", "end", "leeway"});
  const int64_t len = a.has(0) ? a.integer(0) : 255;
  const bool killwords = a.has(1) && a.flag(1);
  const std::string end = a.has(2) ? a.string(2) : "...";
  const int64_t leeway = a.has(3) && !a.get(3)->is_none() ? a.integer(3) : 5;
  const auto end_len = static_cast<int64_t>(utf8::length(end));
  if (len < end_len) fail(fmt::format("expected length >= {}, got {}", end_len, len));
  if (leeway < 0) fail(fmt::format("expected leeway >= 0, got {}", leeway));
  const std::string s = to_str(in);
  const std::vector<char32_t> cps = utf8::decode(s);
  if (static_cast<int64_t>(cps.size()) <= len + leeway) return Value::string(s);
  std::vector<char32_t> head(cps.begin(), cps.begin() + (len - end_len));
  std::string result = utf8::encode(head);
  if (!killwords) {
    const size_t space = result.rfind(' ');
    if (space != std::string::npos) result.resize(space);
  }
  return Value::string(result + end);
}

Value wordcount(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("wordcount", args, {});
  int64_t n = 0;
  bool in_word = false;
  const std::string s = to_str(in);
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::next(s, i);
    const bool word = c == '_' || utf8::is_digit(c) || utf8::is_alpha(c);
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value::integer(n);
}

Value escape(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("escape", args, {});
  return escape_markup(in);
}

Value forceescape(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("forceescape", args, {});
  return Value::markup(html_escape(to_str(in)));
}

Value safe(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("safe", args, {});
  return in.is_markup() ? in : Value::markup(to_str(in));
}

Value format(Interpreter&, const Value& in, CallArgs& args) {
  if (!args.positional.empty() && !args.keyword.empty())
    fail("format() can't handle positional and keyword arguments at the same time");
  if (!args.keyword.empty()) {
    DictData d;
    for (auto& [k, v] : args.keyword) d.set(Value::string(k), v);
    return binary_op(BinaryOp::Mod, in.is_markup() ? in : Value::string(to_str(in)), Value::dict(std::move(d)));
  }
  return binary_op(BinaryOp::Mod, in.is_markup() ? in : Value::string(to_str(in)), Value::tuple(args.positional));
}

Value string(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("string", args, {});
  return in.is_string() ? in : Value::string(to_str(in));  // soft_str keeps Markup
}

}  // namespace rbee::llm::jinja::filters
