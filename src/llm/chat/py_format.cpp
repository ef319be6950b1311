#include "llm/chat/py_format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "llm/chat/ops.h"
#include "llm/chat/utf8.h"

namespace rbee::llm::jinja {

// ---- json.dumps ---------------------------------------------------------------------------------------

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = utf8::next(s, i);
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (cp < 0x20 || (ensure_ascii && cp >= 0x7F && cp < 0x110000)) {
      if (cp >= 0x10000) {
        const char32_t v = cp - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
      }
    } else if (cp >= 0x110000 && ensure_ascii) {
      out += fmt::format("\\udc{:02x}", static_cast<unsigned>(cp - 0x110000));  // a raw byte, surrogate-escaped
    } else {
      utf8::append(out, cp);
    }
  }
  out.push_back('"');
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return float_repr(d);
}

std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::String:
      return k.as_string();
    case Value::Kind::Bool:
      return k.as_bool() ? "true" : "false";
    case Value::Kind::Int:
      return std::to_string(k.as_int());
    case Value::Kind::Float:
      return json_float(k.as_number());
    case Value::Kind::None:
      return "null";
    default:
      fail(fmt::format("keys must be str, int, float, bool or None, not {}", type_name(k)));
  }
}

void json_value(std::string& out, const Value& v, const JsonOptions& o, int level) {
  check_string_size(out.size());
  auto newline = [&](int lvl) {
    if (!o.indent) return;
    out.push_back('\n');
    for (int i = 0; i < lvl; ++i) out += *o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::None:
      out += "null";
      return;
    case Value::Kind::Bool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::Int:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::Float:
      out += json_float(v.as_number());
      return;
    case Value::Kind::String:
      json_string(out, v.as_string(), o.ensure_ascii);
      return;
    case Value::Kind::List: {
      const auto& items = v.as_list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_sep;
        newline(level + 1);
        json_value(out, items[i], o, level + 1);
      }
      newline(level);
      out.push_back(']');
      return;
    }
    case Value::Kind::Dict: {
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& e : v.as_dict().entries()) entries.push_back(&e);
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) { return compare(a->first, b->first) < 0; });
      out.push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += o.item_sep;
        newline(level + 1);
        json_string(out, json_key(entries[i]->first), o.ensure_ascii);
        out += o.key_sep;
        json_value(out, entries[i]->second, o, level + 1);
      }
      newline(level);
      out.push_back('}');
      return;
    }
    default:
      fail(fmt::format("Object of type {} is not JSON serializable", type_name(v)));
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  json_value(out, v, options, 0);
  check_string_size(out.size());
  return out;
}

// ---- shared padding helpers ------------------------------------------------------------------------

namespace {

// Pads `s` to `width` code points with `fill`; align is '<', '>', '^' or '=' (after the sign, for numbers).
std::string pad(const std::string& s, int64_t width, char32_t fill, char align) {
  const auto len = static_cast<int64_t>(utf8::length(s));
  if (width <= len) return s;
  if (width > static_cast<int64_t>(kMaxStringBytes)) check_string_size(static_cast<size_t>(width));
  const int64_t total = width - len;
  std::string fill_s;
  utf8::append(fill_s, fill);
  auto fills = [&](int64_t n) {
    std::string f;
    for (int64_t i = 0; i < n; ++i) f += fill_s;
    return f;
  };
  if (align == '<') return s + fills(total);
  if (align == '^') return fills(total / 2) + s + fills(total - total / 2);
  if (align == '=') {
    const size_t sign_len = (!s.empty() && (s[0] == '-' || s[0] == '+' || s[0] == ' ')) ? 1 : 0;
    return s.substr(0, sign_len) + fills(total) + s.substr(sign_len);
  }
  return fills(total) + s;
}

std::string truncate_chars(const std::string& s, int64_t n) {
  const std::vector<size_t> b = utf8::boundaries(s);
  if (n < 0 || static_cast<size_t>(n) + 1 >= b.size()) return s;
  return s.substr(0, b[static_cast<size_t>(n)]);
}

std::string c_format(const std::string& spec, double d) {
  char buf[512];
  const int n = std::snprintf(buf, sizeof(buf), spec.c_str(), d);
  if (n < 0 || n >= static_cast<int>(sizeof(buf))) fail("formatted number is too long");
  return std::string(buf, static_cast<size_t>(n));
}

std::string c_format_int(const std::string& spec, long long v) {
  char buf[512];
  const int n = std::snprintf(buf, sizeof(buf), spec.c_str(), v);
  if (n < 0 || n >= static_cast<int>(sizeof(buf))) fail("formatted number is too long");
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace

// ---- printf-style % -------------------------------------------------------------------------------

std::string percent_format(const std::string& format, const Value& args) {
  std::vector<Value> positional;
  const DictData* mapping = nullptr;
  if (args.is_list() && args.as_list().is_tuple) {
    positional = args.as_list().items;
  } else {
    if (args.is_dict()) mapping = &args.as_dict();
    positional.push_back(args);
  }
  size_t next_arg = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < format.size();) {
    if (format[i] != '%') {
      out.push_back(format[i++]);
      continue;
    }
    ++i;
    if (i >= format.size()) fail("incomplete format");
    const Value* arg = nullptr;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string::npos) fail("incomplete format key");
      if (!mapping) fail("format requires a mapping");
      arg = mapping->find(std::string_view(format).substr(i + 1, close - i - 1));
      if (!arg) fail(fmt::format("KeyError: '{}'", format.substr(i + 1, close - i - 1)));
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < format.size() && std::string_view("-+ #0").find(format[i]) != std::string_view::npos)
      flags.push_back(format[i++]);
    std::string width;
    while (i < format.size() && utf8::is_digit(static_cast<unsigned char>(format[i]))) width.push_back(format[i++]);
    std::string precision;
    bool has_precision = false;
    if (i < format.size() && format[i] == '.') {
      has_precision = true;
      ++i;
      while (i < format.size() && utf8::is_digit(static_cast<unsigned char>(format[i])))
        precision.push_back(format[i++]);
    }
    if (i >= format.size()) fail("incomplete format");
    if (width.size() > 6 || precision.size() > 6) fail("format width or precision is too large");
    const char type = format[i++];
    if (type == '%') {
      out.push_back('%');
      continue;
    }
    if (!arg) {
      if (next_arg >= positional.size()) fail("not enough arguments for format string");
      arg = &positional[next_arg++];
    }
    std::string c_spec = "%";
    c_spec += flags;
    c_spec += width;
    if (has_precision) {
      c_spec.push_back('.');
      c_spec += precision.empty() ? std::string("0") : precision;
    }
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        std::string s = type == 's' ? to_str(*arg) : repr(*arg);
        if (has_precision) s = truncate_chars(s, precision.empty() ? 0 : std::stoll(precision));
        const int64_t w = width.empty() ? 0 : std::stoll(width);
        out += pad(s, w, ' ', flags.find('-') != std::string::npos ? '<' : '>');
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o':
      case 'c': {
        if (arg->is_undefined()) fail(arg->undefined_hint());
        if (!arg->is_number())
          fail(fmt::format("%{} format: a real number is required, not {}", type, type_name(*arg)));
        if (type == 'c') {
          if (!arg->is_integral() || arg->as_int() < 0 || arg->as_int() > 0x10FFFF) fail("%c arg not in range");
          utf8::append(out, static_cast<char32_t>(arg->as_int()));
          break;
        }
        if (!arg->is_integral() && (type == 'x' || type == 'X' || type == 'o'))
          fail(fmt::format("%{} format: an integer is required, not float", type));
        const double d = arg->as_number();
        if (!arg->is_integral() && !(std::fabs(d) < 9.2e18)) fail("cannot convert float to integer");
        const long long v = arg->is_integral() ? arg->as_int() : static_cast<long long>(d);
        const char t = type == 'i' || type == 'u' ? 'd' : type;
        out += c_format_int(c_spec + "ll" + t, v);
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
        if (arg->is_undefined()) fail(arg->undefined_hint());
        if (!arg->is_number()) fail(fmt::format("must be real number, not {}", type_name(*arg)));
        out += c_format(c_spec + type, arg->as_number());
        break;
      default:
        fail(fmt::format("unsupported format character '{}'", type));
    }
    check_string_size(out.size());
  }
  if (!used_mapping && !mapping && next_arg < positional.size())
    fail("not all arguments converted during string formatting");
  return out;
}

// ---- str.format -------------------------------------------------------------------------------------

namespace {

struct Spec {
  char32_t fill = ' ';
  char align = 0;
  char sign = '-';
  bool alternate = false;
  bool zero = false;
  int64_t width = 0;
  char grouping = 0;
  int64_t precision = -1;
  char type = 0;
};

Spec parse_spec(const std::string& s) {
  Spec spec;
  const std::vector<char32_t> c = utf8::decode(s);
  size_t i = 0;
  auto is_align = [](char32_t ch) { return ch == '<' || ch == '>' || ch == '^' || ch == '='; };
  if (c.size() >= 2 && is_align(c[1])) {
    spec.fill = c[0];
    spec.align = static_cast<char>(c[1]);
    i = 2;
  } else if (!c.empty() && is_align(c[0])) {
    spec.align = static_cast<char>(c[0]);
    i = 1;
  }
  if (i < c.size() && (c[i] == '+' || c[i] == '-' || c[i] == ' ')) spec.sign = static_cast<char>(c[i++]);
  if (i < c.size() && c[i] == '#') {
    spec.alternate = true;
    ++i;
  }
  if (i < c.size() && c[i] == '0') {
    spec.zero = true;
    ++i;
  }
  auto number = [&]() {
    int64_t v = 0;
    int digits = 0;
    while (i < c.size() && utf8::is_digit(c[i])) {
      if (++digits > 6) fail("format width or precision is too large");
      v = v * 10 + (c[i++] - '0');
    }
    return digits ? v : -1;
  };
  const int64_t w = number();
  if (w >= 0) spec.width = w;
  if (i < c.size() && (c[i] == ',' || c[i] == '_')) spec.grouping = static_cast<char>(c[i++]);
  if (i < c.size() && c[i] == '.') {
    ++i;
    spec.precision = number();
    if (spec.precision < 0) fail("format specifier missing precision");
  }
  if (i < c.size()) spec.type = static_cast<char>(c[i++]);
  if (i != c.size()) fail(fmt::format("invalid format specifier '{}'", s));
  return spec;
}

std::string group_digits(const std::string& digits, char sep) {
  std::string out;
  const size_t n = digits.size();
  for (size_t i = 0; i < n; ++i) {
    if (i && (n - i) % 3 == 0) out.push_back(sep);
    out.push_back(digits[i]);
  }
  return out;
}

std::string format_value(const Value& v, const std::string& spec_text) {
  if (spec_text.empty()) return to_str(v);
  const Spec spec = parse_spec(spec_text);
  if (v.is_string() || (!v.is_number() && (spec.type == 0 || spec.type == 's'))) {
    if (spec.type != 0 && spec.type != 's') fail(fmt::format("unknown format code '{}' for str", spec.type));
    std::string s = to_str(v);
    if (spec.precision >= 0) s = truncate_chars(s, spec.precision);
    return pad(s, spec.width, spec.fill, spec.align ? spec.align : '<');
  }
  if (!v.is_number()) fail(fmt::format("unsupported format string passed to {}.__format__", type_name(v)));
  std::string body;
  bool negative = false;
  const char type = spec.type;
  if (v.is_integral() && (type == 0 || type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b')) {
    const int64_t i = v.as_int();
    negative = i < 0;
    const uint64_t mag = negative ? 0 - static_cast<uint64_t>(i) : static_cast<uint64_t>(i);
    if (type == 'x' || type == 'X' || type == 'o' || type == 'b') {
      const int base = type == 'o' ? 8 : (type == 'b' ? 2 : 16);
      const char* digits = type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
      uint64_t m = mag;
      do {
        body.insert(body.begin(), digits[m % static_cast<uint64_t>(base)]);
        m /= static_cast<uint64_t>(base);
      } while (m);
      if (spec.grouping) body = group_digits(body, spec.grouping);
      if (spec.alternate) {
        std::string prefix(1, '0');
        prefix.push_back(type);  // 0x, 0X, 0o, 0b
        body.insert(0, prefix);
      }
    } else {
      body = std::to_string(mag);
      if (spec.grouping) body = group_digits(body, spec.grouping);
    }
  } else {
    double d = v.as_number();
    if (type != 0 && std::string_view("eEfFgG%").find(type) == std::string_view::npos)
      fail(fmt::format("unknown format code '{}' for {}", type, type_name(v)));
    negative = std::signbit(d) && !std::isnan(d);
    d = std::fabs(d);
    if (type == 0 && spec.precision < 0) {
      body = v.is_integral() ? std::to_string(v.as_int() < 0 ? -v.as_int() : v.as_int()) : float_repr(d);
    } else {
      const int64_t prec = spec.precision >= 0 ? spec.precision : 6;
      const char t = type == 0 ? 'g' : (type == '%' ? 'f' : type);
      std::string c_spec = spec.alternate ? "%#." : "%.";
      c_spec += std::to_string(prec);
      c_spec.push_back(t);
      body = c_format(c_spec, type == '%' ? d * 100 : d);
      if (spec.grouping) {
        const size_t dot = body.find_first_not_of("0123456789");
        body = group_digits(body.substr(0, dot), spec.grouping) + (dot == std::string::npos ? "" : body.substr(dot));
      }
      if (type == '%') body += "%";
    }
  }
  std::string sign = negative ? "-" : (spec.sign == '+' ? "+" : (spec.sign == ' ' ? " " : ""));
  if (spec.zero && !spec.align) return pad(sign + body, spec.width, '0', '=');
  return pad(sign + body, spec.width, spec.fill, spec.align ? spec.align : '>');
}

}  // namespace

std::string str_format(const std::string& format, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  bool used_auto = false;
  bool used_manual = false;
  for (size_t i = 0; i < format.size();) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out.push_back('}');
        i += 2;
        continue;
      }
      fail("single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      ++i;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out.push_back('{');
      i += 2;
      continue;
    }
    // Field: {name[.attr|[key]]*[!conv][:spec]}; the spec may not hold nested fields here.
    size_t j = i + 1;
    int nesting = 1;
    while (j < format.size() && nesting) {
      if (format[j] == '{') ++nesting;
      if (format[j] == '}') --nesting;
      if (nesting) ++j;
    }
    if (j >= format.size()) fail("expected '}' before end of string");
    const std::string field = format.substr(i + 1, j - i - 1);
    i = j + 1;
    size_t name_end = field.find_first_of(".[!:");
    std::string head = field.substr(0, name_end);
    Value value;
    if (head.empty()) {
      if (used_manual) fail("cannot switch from manual field specification to automatic field numbering");
      used_auto = true;
      if (auto_index >= args.positional.size()) fail(fmt::format("Replacement index {} out of range", auto_index));
      value = args.positional[auto_index++];
    } else if (std::all_of(head.begin(), head.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      if (used_auto) fail("cannot switch from automatic field numbering to manual field specification");
      used_manual = true;
      const size_t k = head.size() > 6 ? SIZE_MAX : std::stoul(head);
      if (k >= args.positional.size()) fail(fmt::format("Replacement index {} out of range", head));
      value = args.positional[k];
    } else {
      const Value* found = nullptr;
      for (const auto& [k, v] : args.keyword)
        if (k == head) found = &v;
      if (!found) fail(fmt::format("KeyError: '{}'", head));
      value = *found;
    }
    size_t p = name_end == std::string::npos ? field.size() : name_end;
    while (p < field.size() && (field[p] == '.' || field[p] == '[')) {
      if (field[p] == '.') {
        const size_t e = field.find_first_of(".[!:", p + 1);
        value = get_attr(value, field.substr(p + 1, (e == std::string::npos ? field.size() : e) - p - 1));
        p = e == std::string::npos ? field.size() : e;
      } else {
        const size_t e = field.find(']', p);
        if (e == std::string::npos) fail("missing ']' in format string");
        const std::string key = field.substr(p + 1, e - p - 1);
        const bool numeric = !key.empty() && key.size() < 10 &&
                             std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
        value = get_item(value, numeric ? Value::integer(std::stoll(key)) : Value::string(key));
        p = e + 1;
      }
      if (value.is_undefined()) fail(value.undefined_hint());
    }
    char conversion = 0;
    if (p < field.size() && field[p] == '!') {
      if (p + 1 >= field.size()) fail("end of string while looking for conversion specifier");
      conversion = field[p + 1];
      p += 2;
    }
    std::string spec;
    if (p < field.size()) {
      if (field[p] != ':') fail("expected ':' after conversion specifier");
      spec = field.substr(p + 1);
    }
    if (conversion == 'r' || conversion == 'a') {
      value = Value::string(repr(value));
    } else if (conversion == 's') {
      value = Value::string(to_str(value));
    } else if (conversion) {
      fail(fmt::format("Unknown conversion specifier {}", conversion));
    }
    out += format_value(value, spec);
    check_string_size(out.size());
  }
  return out;
}

}  // namespace rbee::llm::jinja
