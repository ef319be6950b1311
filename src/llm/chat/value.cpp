#include "llm/chat/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "llm/chat/utf8.h"

namespace rbee::llm::jinja {

void fail(std::string message) { throw Error(ErrorCode::InvalidArgument, std::move(message)); }

// ---- construction -------------------------------------------------------------------------------

Value Value::undefined(std::string hint) {
  Value v;
  v.data_ = std::move(hint);
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  v.data_ = std::monostate{};
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.data_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::Int;
  v.data_ = i;
  return v;
}

Value Value::floating(double d) {
  Value v;
  v.kind_ = Kind::Float;
  v.data_ = d;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::String;
  v.data_ = std::move(s);
  return v;
}

Value Value::markup(std::string s) {
  Value v = string(std::move(s));
  v.markup_ = true;
  return v;
}

namespace {
Value make_list(std::vector<Value> items, bool tuple) {
  auto data = std::make_shared<ListData>();
  int depth = 0;
  for (const Value& item : items) depth = std::max(depth, item.depth());
  if (depth + 1 > kMaxNesting) fail(fmt::format("values nest deeper than {} levels", kMaxNesting));
  data->items = std::move(items);
  data->is_tuple = tuple;
  data->depth = depth + 1;
  return Value::list_from(std::move(data));
}
}  // namespace

Value Value::list_from(std::shared_ptr<const ListData> data) {
  Value v;
  v.kind_ = Kind::List;
  v.data_ = std::move(data);
  return v;
}

Value Value::list(std::vector<Value> items) { return make_list(std::move(items), false); }
Value Value::tuple(std::vector<Value> items) { return make_list(std::move(items), true); }

Value Value::dict(DictData d) {
  Value v;
  v.kind_ = Kind::Dict;
  v.data_ = std::make_shared<const DictData>(std::move(d));
  return v;
}

Value Value::ns(std::shared_ptr<NamespaceData> n) {
  Value v;
  v.kind_ = Kind::Namespace;
  v.data_ = std::move(n);
  return v;
}

Value Value::object(std::shared_ptr<const Object> o) {
  Value v;
  v.kind_ = Kind::Object;
  v.data_ = std::move(o);
  return v;
}

Value Value::callable(std::shared_ptr<const Callable> c) {
  Value v;
  v.kind_ = Kind::Callable;
  v.data_ = std::move(c);
  return v;
}

int64_t Value::as_int() const { return kind_ == Kind::Bool ? (as_bool() ? 1 : 0) : std::get<int64_t>(data_); }

double Value::as_number() const {
  if (kind_ == Kind::Float) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

const void* Value::identity() const {
  switch (kind_) {
    case Kind::List:
      return std::get<std::shared_ptr<const ListData>>(data_).get();
    case Kind::Dict:
      return std::get<std::shared_ptr<const DictData>>(data_).get();
    case Kind::Namespace:
      return std::get<std::shared_ptr<NamespaceData>>(data_).get();
    case Kind::Object:
      return std::get<std::shared_ptr<const Object>>(data_).get();
    case Kind::Callable:
      return std::get<std::shared_ptr<const Callable>>(data_).get();
    default:
      return nullptr;
  }
}

int Value::depth() const {
  if (kind_ == Kind::List) return as_list().depth;
  if (kind_ == Kind::Dict) return as_dict().depth();
  return 0;
}

void check_storable_in_namespace(const Value& v) {
  if (v.is_namespace()) fail("a namespace cannot be stored inside a namespace");
  if (v.is_list())
    for (const Value& item : v.as_list().items) check_storable_in_namespace(item);
  if (v.is_dict())
    for (const auto& [k, item] : v.as_dict().entries()) check_storable_in_namespace(item);
}

// ---- dict ---------------------------------------------------------------------------------------

const Value* DictData::find(const Value& key) const {
  auto it = index_.find(hash_key(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

const Value* DictData::find(std::string_view key) const {
  std::string k = "s";
  k += key;
  auto it = index_.find(k);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void DictData::set(const Value& key, Value value) {
  const int depth = std::max(key.depth(), value.depth()) + 1;
  if (depth > kMaxNesting) fail(fmt::format("values nest deeper than {} levels", kMaxNesting));
  depth_ = std::max(depth_, depth);
  auto [it, inserted] = index_.emplace(hash_key(key), entries_.size());
  if (inserted) {
    entries_.emplace_back(key, std::move(value));
  } else {
    entries_[it->second].second = std::move(value);
  }
}

// ---- Python semantics -----------------------------------------------------------------------------

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return "Undefined";
    case Value::Kind::None:
      return "NoneType";
    case Value::Kind::Bool:
      return "bool";
    case Value::Kind::Int:
      return "int";
    case Value::Kind::Float:
      return "float";
    case Value::Kind::String:
      return "str";
    case Value::Kind::List:
      return v.as_list().is_tuple ? "tuple" : "list";
    case Value::Kind::Dict:
      return "dict";
    case Value::Kind::Namespace:
      return "Namespace";
    case Value::Kind::Object:
      return "object";
    case Value::Kind::Callable:
      return "function";
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return false;
    case Value::Kind::Bool:
      return v.as_bool();
    case Value::Kind::Int:
      return v.as_int() != 0;
    case Value::Kind::Float:
      return v.as_number() != 0.0;
    case Value::Kind::String:
      return !v.as_string().empty();
    case Value::Kind::List:
      return !v.as_list().items.empty();
    case Value::Kind::Dict:
      return v.as_dict().size() != 0;
    default:
      return true;
  }
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_number() == b.as_number();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
      return a.as_string() == b.as_string();
    case Value::Kind::List: {
      const ListData& x = a.as_list();
      const ListData& y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i])) return false;
      return true;
    }
    case Value::Kind::Dict: {
      const DictData& x = a.as_dict();
      const DictData& y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.entries()) {
        const Value* other = y.find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_undefined()) fail(a.undefined_hint());
  if (b.is_undefined()) fail(b.undefined_hint());
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
    const double x = a.as_number();
    const double y = b.as_number();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i])) return compare(x[i], y[i]);
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  fail(fmt::format("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b)));
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);  // shortest round-trip digits: "-1.5e+16"
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exp = std::stoi(sci.substr(e_pos + 1));
  std::string sign;
  if (!mantissa.empty() && mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits.push_back(c);
  if (exp < -4 || exp >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
    return out;
  }
  std::string out = sign;
  if (exp >= 0) {
    const size_t int_len = static_cast<size_t>(exp) + 1;
    std::string int_part = digits.substr(0, std::min(int_len, digits.size()));
    while (int_part.size() < int_len) int_part.push_back('0');
    const std::string frac = digits.size() > int_len ? digits.substr(int_len) : "0";
    out += int_part + "." + frac;
  } else {
    out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  }
  return out;
}

namespace {

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = utf8::next(s, i);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp >= 0x110000) {  // an invalid byte: Python would hold a surrogate escape here
      out += fmt::format("\\udc{:02x}", static_cast<unsigned>(cp - 0x110000));
    } else if (utf8::is_printable(cp)) {
      utf8::append(out, cp);
    } else if (cp < 0x100) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(cp));
    } else if (cp < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<unsigned>(cp));
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return "";
    case Value::Kind::String:
      return v.as_string();
    default:
      return repr(v);
  }
}

std::string repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return "Undefined";
    case Value::Kind::None:
      return "None";
    case Value::Kind::Bool:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::Int:
      return std::to_string(v.as_int());
    case Value::Kind::Float:
      return float_repr(v.as_number());
    case Value::Kind::String:
      return v.is_markup() ? "Markup(" + string_repr(v.as_string()) + ")" : string_repr(v.as_string());
    case Value::Kind::List: {
      const ListData& l = v.as_list();
      std::string out = l.is_tuple ? "(" : "[";
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        out += repr(l.items[i]);
      }
      if (l.is_tuple && l.items.size() == 1) out += ",";
      out += l.is_tuple ? ")" : "]";
      return out;
    }
    case Value::Kind::Dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, item] : v.as_dict().entries()) {
        if (!first) out += ", ";
        first = false;
        out += repr(k) + ": " + repr(item);
      }
      return out + "}";
    }
    case Value::Kind::Namespace: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& [k, item] : v.as_namespace().attrs.entries()) {
        if (!first) out += ", ";
        first = false;
        out += repr(k) + ": " + repr(item);
      }
      return out + "}>";
    }
    case Value::Kind::Object:
      return v.as_object().repr();
    case Value::Kind::Callable:
      return "<function " + v.as_callable().name() + ">";
  }
  return "";
}

std::string hash_key(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return "u";
    case Value::Kind::None:
      return "n";
    case Value::Kind::Bool:
    case Value::Kind::Int:
      return "i" + std::to_string(v.as_int());
    case Value::Kind::Float: {
      const double d = v.as_number();
      if (std::nearbyint(d) == d && std::fabs(d) < 9.0e18) return "i" + std::to_string(static_cast<int64_t>(d));
      return "f" + float_repr(d);
    }
    case Value::Kind::String:
      return "s" + v.as_string();
    case Value::Kind::List: {
      if (!v.as_list().is_tuple) fail("unhashable type: 'list'");
      std::string out = "t(";
      for (const Value& item : v.as_list().items) {
        const std::string k = hash_key(item);
        out += std::to_string(k.size()) + ":" + k;
      }
      return out + ")";
    }
    case Value::Kind::Object:
    case Value::Kind::Callable:
      return fmt::format("p{}", v.identity());
    default:
      fail("unhashable type: '" + type_name(v) + "'");
  }
}

}  // namespace rbee::llm::jinja
