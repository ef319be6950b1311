// The filter registry, plus the conversion filters: default, int, float, abs, round, tojson, attr.
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "llm/chat/args.h"
#include "llm/chat/filters_impl.h"
#include "llm/chat/library.h"
#include "llm/chat/ops.h"
#include "llm/chat/py_format.h"
#include "llm/chat/utf8.h"

namespace rbee::llm::jinja {

namespace filters {

Value default_(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("default", args, {"default_value", "boolean"});
  const bool boolean = a.has(1) && a.flag(1);
  if (in.is_undefined() || (boolean && !truthy(in))) return a.get_or(0, Value::string(""));
  return in;
}

namespace {

// Digits of `s` in `base` with Python's single underscores between digits; false if malformed.
bool parse_digits(std::string_view s, int base, int64_t& out) {
  if (s.empty()) return false;
  uint64_t v = 0;
  bool prev_digit = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_') {
      if (!prev_digit || i + 1 == s.size()) return false;
      prev_digit = false;
      continue;
    }
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') {
      d = (c | 0x20) - 'a' + 10;
    } else {
      return false;
    }
    if (d >= base) return false;
    if (v > (static_cast<uint64_t>(INT64_MAX) - static_cast<uint64_t>(d)) / static_cast<uint64_t>(base))
      fail("int() result does not fit in 64 bits");
    v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
    prev_digit = true;
  }
  out = static_cast<int64_t>(v);
  return true;
}

// Python's int(s, base) for base 0 or 2..36.
bool parse_py_int(const std::string& raw, int64_t base, int64_t& out) {
  std::string s = utf8::strip(raw, nullptr, true, true);
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.erase(0, 1);
  }
  int b = static_cast<int>(base);
  if (s.size() >= 2 && s[0] == '0') {
    const char p = static_cast<char>(s[1] | 0x20);
    const int prefixed = p == 'x' ? 16 : (p == 'o' ? 8 : (p == 'b' ? 2 : 0));
    if (prefixed && (b == 0 || b == prefixed)) {
      b = prefixed;
      s.erase(0, 2);
      if (!s.empty() && s[0] == '_') s.erase(0, 1);
    }
  }
  if (b == 0) {
    b = 10;
    if (s.size() > 1 && s[0] == '0' && s.find_first_not_of("0_") != std::string::npos) return false;
  }
  if (b < 2 || b > 36) fail("int() base must be >= 2 and <= 36, or 0");
  int64_t v;
  if (!parse_digits(s, b, v)) return false;
  out = negative ? -v : v;
  return true;
}

// Python's float(s): decimal literals with underscores, inf/infinity/nan in any case, surrounding whitespace.
bool parse_py_float(const std::string& raw, double& out) {
  std::string s = utf8::strip(raw, nullptr, true, true);
  std::string lower = utf8::lower(s);
  size_t i = (!lower.empty() && (lower[0] == '+' || lower[0] == '-')) ? 1 : 0;
  const std::string body = lower.substr(i);
  if (body == "inf" || body == "infinity" || body == "nan") {
    const double v = body == "nan" ? std::nan("") : HUGE_VAL;
    out = (i && lower[0] == '-') ? -v : v;
    return true;
  }
  std::string clean = lower.substr(0, i);
  bool digits = false;
  bool prev_digit = false;
  bool seen_dot = false;
  bool seen_exp = false;
  for (; i < lower.size(); ++i) {
    const char c = lower[i];
    if (c >= '0' && c <= '9') {
      digits = prev_digit = true;
      clean.push_back(c);
    } else if (c == '_') {
      if (!prev_digit || i + 1 >= lower.size() || !(lower[i + 1] >= '0' && lower[i + 1] <= '9')) return false;
    } else if (c == '.' && !seen_dot && !seen_exp) {
      seen_dot = true;
      prev_digit = false;
      clean.push_back(c);
    } else if (c == 'e' && digits && !seen_exp) {
      seen_exp = true;
      digits = prev_digit = false;
      clean.push_back(c);
      if (i + 1 < lower.size() && (lower[i + 1] == '+' || lower[i + 1] == '-')) clean.push_back(lower[++i]);
    } else {
      return false;
    }
  }
  if (!digits) return false;
  out = std::strtod(clean.c_str(), nullptr);
  return true;
}

}  // namespace

Value to_int(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("int", args, {"default", "base"});
  const Value fallback = a.get_or(0, Value::integer(0));
  const int64_t base = a.has(1) ? a.integer(1) : 10;
  if (in.is_undefined()) fail(in.undefined_hint());
  if (in.is_integral()) return Value::integer(in.as_int());
  if (in.is_float()) {
    const double d = in.as_number();
    if (std::isnan(d)) fail("cannot convert float NaN to integer");
    if (!(std::fabs(d) < 9.2e18)) fail("int() of this float does not fit in 64 bits");
    return Value::integer(static_cast<int64_t>(d));
  }
  if (in.is_string()) {
    int64_t v;
    if (parse_py_int(in.as_string(), base, v)) return Value::integer(v);
    double d;
    if (parse_py_float(in.as_string(), d) && std::isfinite(d) && std::fabs(d) < 9.2e18)
      return Value::integer(static_cast<int64_t>(d));
  }
  return fallback;
}

Value to_float(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("float", args, {"default"});
  if (in.is_undefined()) fail(in.undefined_hint());
  if (in.is_number()) return Value::floating(in.as_number());
  double d;
  if (in.is_string() && parse_py_float(in.as_string(), d)) return Value::floating(d);
  return a.get_or(0, Value::floating(0.0));
}

Value abs(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("abs", args, {});
  if (in.is_integral()) {
    if (in.as_int() == INT64_MIN) fail("integer overflow in abs()");
    return Value::integer(in.as_int() < 0 ? -in.as_int() : in.as_int());
  }
  if (in.is_float()) return Value::floating(std::fabs(in.as_number()));
  if (in.is_undefined()) fail(in.undefined_hint());
  fail(fmt::format("bad operand type for abs(): '{}'", type_name(in)));
}

Value round(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("round", args, {"precision", "method"});
  const int64_t precision = a.has(0) ? a.integer(0) : 0;
  const std::string method = a.has(1) ? a.string(1) : "common";
  if (method != "common" && method != "ceil" && method != "floor") fail("method must be common, ceil or floor");
  if (in.is_undefined()) fail(in.undefined_hint());
  if (!in.is_number()) fail(fmt::format("type {} doesn't define __round__ method", type_name(in)));
  if (precision > 400 || precision < -400) fail("round() precision is out of range");
  const double x = in.as_number();
  const double scale = std::pow(10.0, static_cast<double>(precision));
  if (method == "ceil") return Value::floating(std::ceil(x * scale) / scale);
  if (method == "floor") return Value::floating(std::floor(x * scale) / scale);
  if (in.is_integral() && precision >= 0) return Value::integer(in.as_int());  // Python keeps ints as ints
  if (!std::isfinite(x)) return Value::floating(x);
  if (precision < 0) {
    const double r = std::nearbyint(x / std::pow(10.0, static_cast<double>(-precision))) *
                     std::pow(10.0, static_cast<double>(-precision));
    return in.is_integral() ? Value::integer(static_cast<int64_t>(r)) : Value::floating(r);
  }
  // Python rounds the exact binary value half-to-even at the decimal digit; printf does the same.
  const int n = std::snprintf(nullptr, 0, "%.*f", static_cast<int>(precision), x);
  std::string buf(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(buf.data(), buf.size(), "%.*f", static_cast<int>(precision), x);
  return Value::floating(std::strtod(buf.c_str(), nullptr));
}

// HF's override: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value tojson(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = a.has(0) && a.flag(0);
  const Value indent = a.get_or(1, Value::none());
  if (indent.is_string()) {
    o.indent = indent.as_string();
  } else if (indent.is_integral()) {
    o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(indent.as_int(), 0, 1024)), ' ');
  } else if (!indent.is_none()) {
    fail(fmt::format("tojson() indent must be an int, a str or None, not {}", type_name(indent)));
  }
  const Value separators = a.get_or(2, Value::none());
  if (!separators.is_none()) {
    if (!separators.is_list() || separators.as_list().items.size() != 2 ||
        !separators.as_list().items[0].is_string() || !separators.as_list().items[1].is_string())
      fail("tojson() separators must be a pair of strings");
    o.item_sep = separators.as_list().items[0].as_string();
    o.key_sep = separators.as_list().items[1].as_string();
  } else if (o.indent) {
    o.item_sep.assign(1, ',');  // json.dumps drops the space after "," when indenting
  }
  o.sort_keys = a.has(3) && a.flag(3);
  return Value::string(to_json(in, o));
}

Value attr(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("attr", args, {"name"});
  const std::string& name = a.string(0);
  switch (in.kind()) {
    case Value::Kind::Undefined:
      fail(in.undefined_hint());
    case Value::Kind::Dict:
    case Value::Kind::String:
    case Value::Kind::List: {
      Value m = find_method(in, name);
      if (!m.is_undefined()) return m;
      return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(in), name));
    }
    case Value::Kind::Namespace:
    case Value::Kind::Object:
      return get_attr(in, name);
    default:
      return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(in), name));
  }
}

}  // namespace filters

FilterFn find_filter(std::string_view name) {
  static const std::unordered_map<std::string_view, FilterFn> kFilters = {
      {"abs", filters::abs},           {"attr", filters::attr},
      {"batch", filters::batch},       {"capitalize", filters::capitalize},
      {"center", filters::center},     {"count", filters::length},
      {"d", filters::default_},        {"default", filters::default_},
      {"dictsort", filters::dictsort}, {"e", filters::escape},
      {"escape", filters::escape},     {"forceescape", filters::forceescape},
      {"first", filters::first},       {"float", filters::to_float},
      {"format", filters::format},     {"indent", filters::indent},
      {"int", filters::to_int},        {"items", filters::items},
      {"join", filters::join},         {"last", filters::last},
      {"length", filters::length},     {"list", filters::list},
      {"lower", filters::lower},       {"map", filters::map},
      {"max", filters::max},           {"min", filters::min},
      {"reject", filters::reject},     {"rejectattr", filters::rejectattr},
      {"replace", filters::replace},   {"reverse", filters::reverse},
      {"round", filters::round},       {"safe", filters::safe},
      {"select", filters::select},     {"selectattr", filters::selectattr},
      {"sort", filters::sort},         {"string", filters::string},
      {"sum", filters::sum},           {"title", filters::title},
      {"tojson", filters::tojson},     {"trim", filters::trim},
      {"truncate", filters::truncate}, {"unique", filters::unique},
      {"upper", filters::upper},       {"wordcount", filters::wordcount},
  };
  auto it = kFilters.find(name);
  return it == kFilters.end() ? nullptr : it->second;
}

}  // namespace rbee::llm::jinja
