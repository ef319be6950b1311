// Methods of str, dict and list that templates call (`s.strip()`, `d.items()`, `xs.index(x)`), as bound
// method values. Mutating methods (dict.update, list.append, ...) do not exist here, as in HF's immutable
// sandbox, where calling them raises a SecurityError.
#include <unordered_map>

#include "llm/chat/args.h"
#include "llm/chat/library.h"
#include "llm/chat/ops.h"
#include "llm/chat/py_format.h"
#include "llm/chat/str_methods.h"
#include "llm/chat/utf8.h"

namespace rbee::llm::jinja {

namespace {

using MethodFn = Value (*)(const Value& self, const CallArgs& args);

// How markupsafe's Markup treats a str method: which arguments it escapes and whether the result is Markup.
enum class MarkupMode { Plain, EscapeArgs, WrapList, Partition, Join };

MarkupMode markup_mode(std::string_view method) {
  static const std::unordered_map<std::string_view, MarkupMode> kModes = {
      {"capitalize", MarkupMode::EscapeArgs}, {"title", MarkupMode::EscapeArgs},
      {"lower", MarkupMode::EscapeArgs},      {"upper", MarkupMode::EscapeArgs},
      {"replace", MarkupMode::EscapeArgs},    {"ljust", MarkupMode::EscapeArgs},
      {"rjust", MarkupMode::EscapeArgs},      {"lstrip", MarkupMode::EscapeArgs},
      {"rstrip", MarkupMode::EscapeArgs},     {"center", MarkupMode::EscapeArgs},
      {"strip", MarkupMode::EscapeArgs},      {"swapcase", MarkupMode::EscapeArgs},
      {"zfill", MarkupMode::EscapeArgs},      {"removeprefix", MarkupMode::EscapeArgs},
      {"removesuffix", MarkupMode::EscapeArgs}, {"format", MarkupMode::EscapeArgs},
      {"split", MarkupMode::WrapList},        {"rsplit", MarkupMode::WrapList},
      {"splitlines", MarkupMode::WrapList},   {"partition", MarkupMode::Partition},
      {"join", MarkupMode::Join},
  };
  auto it = kModes.find(method);
  return it == kModes.end() ? MarkupMode::Plain : it->second;
}

Value escape_arg(const Value& v) { return v.is_number() || v.is_none() ? v : escape_markup(v); }

class BoundMethod final : public Callable {
 public:
  BoundMethod(Value self, std::string name, MethodFn fn) : self_(std::move(self)), name_(std::move(name)), fn_(fn) {}
  std::string name() const override { return type_name(self_) + "." + name_; }
  Value call(Interpreter&, CallArgs args) const override {
    if (!self_.is_markup()) return fn_(self_, args);
    const MarkupMode mode = markup_mode(name_);
    if (mode == MarkupMode::EscapeArgs || mode == MarkupMode::Partition) {
      for (Value& v : args.positional) v = escape_arg(v);
      for (auto& [k, v] : args.keyword) v = escape_arg(v);
    } else if (mode == MarkupMode::Join && !args.positional.empty()) {
      std::vector<Value> items;
      for (const Value& v : iterate(args.positional[0])) items.push_back(escape_markup(v));
      args.positional[0] = Value::list(std::move(items));
    }
    Value result = fn_(self_, args);
    if (mode == MarkupMode::Plain) return result;
    if (result.is_string()) return Value::markup(result.as_string());
    if (result.is_list()) {
      std::vector<Value> items;
      for (const Value& v : result.as_list().items) items.push_back(v.is_string() ? Value::markup(v.as_string()) : v);
      return result.as_list().is_tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    return result;
  }

 private:
  Value self_;
  std::string name_;
  MethodFn fn_;
};

Value strings(const std::vector<std::string>& parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (const std::string& p : parts) out.push_back(Value::string(p));
  return Value::list(std::move(out));
}

const std::string* optional_chars(const ArgBinder& a, size_t i) {
  const Value* v = a.get(i);
  if (!v || v->is_none()) return nullptr;
  if (!v->is_string()) fail(fmt::format("strip arg must be None or str, not {}", type_name(*v)));
  return &v->as_string();
}

char32_t fill_char(const ArgBinder& a, size_t i) {
  if (!a.has(i)) return ' ';
  const std::string& f = a.string(i);
  if (utf8::length(f) != 1) fail("The fill character must be exactly one character long");
  size_t k = 0;
  return utf8::next(f, k);
}

// ---- str ----

const std::string& s(const Value& self) { return self.as_string(); }

Value m_strip(const Value& self, const CallArgs& args) {
  ArgBinder a("strip", args, {"chars"});
  return Value::string(utf8::strip(s(self), optional_chars(a, 0), true, true));
}
Value m_lstrip(const Value& self, const CallArgs& args) {
  ArgBinder a("lstrip", args, {"chars"});
  return Value::string(utf8::strip(s(self), optional_chars(a, 0), true, false));
}
Value m_rstrip(const Value& self, const CallArgs& args) {
  ArgBinder a("rstrip", args, {"chars"});
  return Value::string(utf8::strip(s(self), optional_chars(a, 0), false, true));
}
Value m_upper(const Value& self, const CallArgs& args) {
  ArgBinder a("upper", args, {});
  return Value::string(utf8::upper(s(self)));
}
Value m_lower(const Value& self, const CallArgs& args) {
  ArgBinder a("lower", args, {});
  return Value::string(utf8::lower(s(self)));
}
Value m_title(const Value& self, const CallArgs& args) {
  ArgBinder a("title", args, {});
  return Value::string(str::title(s(self)));
}
Value m_capitalize(const Value& self, const CallArgs& args) {
  ArgBinder a("capitalize", args, {});
  return Value::string(str::capitalize(s(self)));
}
Value m_swapcase(const Value& self, const CallArgs& args) {
  ArgBinder a("swapcase", args, {});
  return Value::string(str::swapcase(s(self)));
}

// startswith/endswith(prefix) where prefix is a str or a tuple of str.
Value affix_test(const char* name, const Value& self, const CallArgs& args, bool at_start) {
  ArgBinder a(name, args, {"prefix"});
  const Value& p = a.required(0);
  std::vector<Value> options;
  if (p.is_string()) {
    options.push_back(p);
  } else if (p.is_list() && p.as_list().is_tuple) {
    options = p.as_list().items;
  } else {
    fail(fmt::format("{} first arg must be str or a tuple of str, not {}", name, type_name(p)));
  }
  const std::string& str = s(self);
  for (const Value& o : options) {
    if (!o.is_string()) fail(fmt::format("tuple for {} must only contain str, not {}", name, type_name(o)));
    const std::string& x = o.as_string();
    if (x.size() > str.size()) continue;
    if (at_start ? str.compare(0, x.size(), x) == 0 : str.compare(str.size() - x.size(), x.size(), x) == 0)
      return Value::boolean(true);
  }
  return Value::boolean(false);
}
Value m_startswith(const Value& self, const CallArgs& args) { return affix_test("startswith", self, args, true); }
Value m_endswith(const Value& self, const CallArgs& args) { return affix_test("endswith", self, args, false); }

Value m_split(const Value& self, const CallArgs& args) {
  ArgBinder a("split", args, {"sep", "maxsplit"});
  return strings(str::split(s(self), optional_chars(a, 0), a.has(1) ? a.integer(1) : -1));
}
Value m_rsplit(const Value& self, const CallArgs& args) {
  ArgBinder a("rsplit", args, {"sep", "maxsplit"});
  return strings(str::rsplit(s(self), optional_chars(a, 0), a.has(1) ? a.integer(1) : -1));
}
Value m_splitlines(const Value& self, const CallArgs& args) {
  ArgBinder a("splitlines", args, {"keepends"});
  return strings(str::splitlines(s(self), a.has(0) && a.flag(0)));
}
Value m_replace(const Value& self, const CallArgs& args) {
  ArgBinder a("replace", args, {"old", "new", "count"});
  return Value::string(str::replace(s(self), a.string(0), a.string(1), a.has(2) ? a.integer(2) : -1));
}
Value m_join(const Value& self, const CallArgs& args) {
  ArgBinder a("join", args, {"iterable"});
  std::string out;
  size_t i = 0;
  for (const Value& item : iterate(a.required(0))) {
    if (!item.is_string())
      fail(fmt::format("sequence item {}: expected str instance, {} found", i, type_name(item)));
    if (i++) out += s(self);
    out += item.as_string();
    check_string_size(out.size());
  }
  return Value::string(std::move(out));
}
Value m_format(const Value& self, const CallArgs& args) { return Value::string(str_format(s(self), args)); }
Value m_find(const Value& self, const CallArgs& args) {
  ArgBinder a("find", args, {"sub"});
  return Value::integer(str::find(s(self), a.string(0)));
}
Value m_rfind(const Value& self, const CallArgs& args) {
  ArgBinder a("rfind", args, {"sub"});
  return Value::integer(str::rfind(s(self), a.string(0)));
}
Value m_index(const Value& self, const CallArgs& args) {
  ArgBinder a("index", args, {"sub"});
  const int64_t i = str::find(s(self), a.string(0));
  if (i < 0) fail("substring not found");
  return Value::integer(i);
}
Value m_count(const Value& self, const CallArgs& args) {
  ArgBinder a("count", args, {"sub"});
  return Value::integer(str::count(s(self), a.string(0)));
}
Value m_center(const Value& self, const CallArgs& args) {
  ArgBinder a("center", args, {"width", "fillchar"});
  return Value::string(str::center(s(self), a.integer(0), fill_char(a, 1)));
}
Value m_ljust(const Value& self, const CallArgs& args) {
  ArgBinder a("ljust", args, {"width", "fillchar"});
  return Value::string(str::ljust(s(self), a.integer(0), fill_char(a, 1)));
}
Value m_rjust(const Value& self, const CallArgs& args) {
  ArgBinder a("rjust", args, {"width", "fillchar"});
  return Value::string(str::rjust(s(self), a.integer(0), fill_char(a, 1)));
}
Value m_zfill(const Value& self, const CallArgs& args) {
  ArgBinder a("zfill", args, {"width"});
  return Value::string(str::zfill(s(self), a.integer(0)));
}
Value m_removeprefix(const Value& self, const CallArgs& args) {
  ArgBinder a("removeprefix", args, {"prefix"});
  const std::string& p = a.string(0);
  return Value::string(s(self).rfind(p, 0) == 0 ? s(self).substr(p.size()) : s(self));
}
Value m_removesuffix(const Value& self, const CallArgs& args) {
  ArgBinder a("removesuffix", args, {"suffix"});
  const std::string& x = a.string(0);
  const std::string& str = s(self);
  const bool has = !x.empty() && x.size() <= str.size() && str.compare(str.size() - x.size(), x.size(), x) == 0;
  return Value::string(has ? str.substr(0, str.size() - x.size()) : str);
}
Value m_partition(const Value& self, const CallArgs& args) {
  ArgBinder a("partition", args, {"sep"});
  const std::string& sep = a.string(0);
  if (sep.empty()) fail("empty separator");
  const size_t hit = s(self).find(sep);
  if (hit == std::string::npos) return Value::tuple({self, Value::string(""), Value::string("")});
  return Value::tuple({Value::string(s(self).substr(0, hit)), Value::string(sep),
                       Value::string(s(self).substr(hit + sep.size()))});
}

// is*() predicates: true when non-empty and every character passes.
template <bool (*Pred)(char32_t)>
Value all_chars(const Value& self, const CallArgs& args) {
  ArgBinder a("is...", args, {});
  const std::string& str = s(self);
  if (str.empty()) return Value::boolean(false);
  for (size_t i = 0; i < str.size();)
    if (!Pred(utf8::next(str, i))) return Value::boolean(false);
  return Value::boolean(true);
}
bool is_alnum(char32_t c) { return utf8::is_alpha(c) || utf8::is_digit(c); }
Value m_islower(const Value& self, const CallArgs& args) {
  ArgBinder a("islower", args, {});
  bool cased = false;
  for (size_t i = 0; i < s(self).size();) {
    const char32_t c = utf8::next(s(self), i);
    if (utf8::is_upper(c)) return Value::boolean(false);
    cased = cased || utf8::is_lower(c);
  }
  return Value::boolean(cased);
}
Value m_isupper(const Value& self, const CallArgs& args) {
  ArgBinder a("isupper", args, {});
  bool cased = false;
  for (size_t i = 0; i < s(self).size();) {
    const char32_t c = utf8::next(s(self), i);
    if (utf8::is_lower(c)) return Value::boolean(false);
    cased = cased || utf8::is_upper(c);
  }
  return Value::boolean(cased);
}

// ---- dict ----

Value m_items(const Value& self, const CallArgs& args) {
  ArgBinder a("items", args, {});
  std::vector<Value> out;
  for (const auto& [k, v] : self.as_dict().entries()) out.push_back(Value::tuple({k, v}));
  return Value::list(std::move(out));
}
Value m_keys(const Value& self, const CallArgs& args) {
  ArgBinder a("keys", args, {});
  std::vector<Value> out;
  for (const auto& [k, v] : self.as_dict().entries()) out.push_back(k);
  return Value::list(std::move(out));
}
Value m_values(const Value& self, const CallArgs& args) {
  ArgBinder a("values", args, {});
  std::vector<Value> out;
  for (const auto& [k, v] : self.as_dict().entries()) out.push_back(v);
  return Value::list(std::move(out));
}
Value m_get(const Value& self, const CallArgs& args) {
  ArgBinder a("get", args, {"key", "default"});
  const Value* v = self.as_dict().find(a.required(0));
  return v ? *v : a.get_or(1, Value::none());
}
Value m_copy(const Value& self, const CallArgs& args) {
  ArgBinder a("copy", args, {});
  return self;  // values are immutable, a shared copy is indistinguishable
}

// ---- list ----

Value m_list_index(const Value& self, const CallArgs& args) {
  ArgBinder a("index", args, {"value"});
  const auto& items = self.as_list().items;
  for (size_t i = 0; i < items.size(); ++i)
    if (equals(items[i], a.required(0))) return Value::integer(static_cast<int64_t>(i));
  fail(fmt::format("{} is not in list", repr(a.required(0))));
}
Value m_list_count(const Value& self, const CallArgs& args) {
  ArgBinder a("count", args, {"value"});
  int64_t n = 0;
  for (const Value& v : self.as_list().items) n += equals(v, a.required(0)) ? 1 : 0;
  return Value::integer(n);
}

}  // namespace

Value find_method(const Value& receiver, std::string_view name) {
  static const std::unordered_map<std::string_view, MethodFn> kStr = {
      {"strip", m_strip},
      {"lstrip", m_lstrip},
      {"rstrip", m_rstrip},
      {"upper", m_upper},
      {"lower", m_lower},
      {"casefold", m_lower},
      {"title", m_title},
      {"capitalize", m_capitalize},
      {"swapcase", m_swapcase},
      {"startswith", m_startswith},
      {"endswith", m_endswith},
      {"split", m_split},
      {"rsplit", m_rsplit},
      {"splitlines", m_splitlines},
      {"replace", m_replace},
      {"join", m_join},
      {"format", m_format},
      {"find", m_find},
      {"rfind", m_rfind},
      {"index", m_index},
      {"count", m_count},
      {"center", m_center},
      {"ljust", m_ljust},
      {"rjust", m_rjust},
      {"zfill", m_zfill},
      {"removeprefix", m_removeprefix},
      {"removesuffix", m_removesuffix},
      {"partition", m_partition},
      {"isdigit", all_chars<utf8::is_digit>},
      {"isdecimal", all_chars<utf8::is_digit>},
      {"isnumeric", all_chars<utf8::is_digit>},
      {"isalpha", all_chars<utf8::is_alpha>},
      {"isalnum", all_chars<is_alnum>},
      {"isspace", all_chars<utf8::is_space>},
      {"islower", m_islower},
      {"isupper", m_isupper},
  };
  static const std::unordered_map<std::string_view, MethodFn> kDict = {
      {"items", m_items}, {"keys", m_keys}, {"values", m_values}, {"get", m_get}, {"copy", m_copy},
  };
  static const std::unordered_map<std::string_view, MethodFn> kList = {
      {"index", m_list_index}, {"count", m_list_count}, {"copy", m_copy},
  };
  const std::unordered_map<std::string_view, MethodFn>* table = nullptr;
  if (receiver.is_string()) table = &kStr;
  if (receiver.is_dict()) table = &kDict;
  if (receiver.is_list()) table = &kList;
  if (!table) return Value();
  auto it = table->find(name);
  if (it == table->end()) return Value();
  return Value::callable(std::make_shared<BoundMethod>(receiver, std::string(name), it->second));
}

}  // namespace rbee::llm::jinja
