// Global functions of HF's chat-template environment: range (with the sandbox's size limit), dict,
// namespace, raise_exception and strftime_now.
#include <ctime>
#include <unordered_map>

#include "llm/chat/args.h"
#include "llm/chat/interpreter.h"
#include "llm/chat/library.h"
#include "llm/chat/ops.h"

namespace rbee::llm::jinja {

namespace {

using GlobalFn = Value (*)(Interpreter& interp, CallArgs& args);

class GlobalFunction final : public Callable {
 public:
  GlobalFunction(std::string_view name, GlobalFn fn) : name_(name), fn_(fn) {}
  std::string name() const override { return std::string(name_); }
  Value call(Interpreter& interp, CallArgs args) const override { return fn_(interp, args); }

 private:
  std::string_view name_;
  GlobalFn fn_;
};

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

Value g_range(Interpreter&, CallArgs& args) {
  if (!args.keyword.empty()) fail("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) fail(fmt::format("range expected 1 to 3 arguments, got {}", p.size()));
  for (const Value& v : p) {
    if (v.is_undefined()) fail(v.undefined_hint());
    if (!v.is_integral())
      fail(fmt::format("'{}' object cannot be interpreted as an integer", type_name(v)));
  }
  const int64_t start = p.size() == 1 ? 0 : p[0].as_int();
  const int64_t stop = p.size() == 1 ? p[0].as_int() : p[1].as_int();
  const int64_t step = p.size() == 3 ? p[2].as_int() : 1;
  if (step == 0) fail("range() arg 3 must not be zero");
  // Length computed in double to avoid overflow; only the sign and magnitude matter for the limit.
  const double len = step > 0 ? (static_cast<double>(stop) - start) / step : (static_cast<double>(start) - stop) / -step;
  if (len > kMaxRange)
    fail(fmt::format("Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange));
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::integer(i));
  return Value::list(std::move(out));
}

// dict(mapping_or_pairs?, **kwargs) and namespace(...) share Python's dict() construction.
DictData build_dict(const char* name, const CallArgs& args) {
  if (args.positional.size() > 1) fail(fmt::format("{} expected at most 1 argument, got {}", name, args.positional.size()));
  DictData d;
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.as_dict().entries()) d.set(k, v);
    } else {
      for (const Value& pair : iterate(src)) {
        const std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2) fail(fmt::format("{} update sequence element has length {}; 2 is required", name, kv.size()));
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : args.keyword) d.set(Value::string(k), v);
  return d;
}

Value g_dict(Interpreter&, CallArgs& args) { return Value::dict(build_dict("dict", args)); }

Value g_namespace(Interpreter&, CallArgs& args) {
  auto ns = std::make_shared<NamespaceData>();
  const DictData attrs = build_dict("namespace", args);
  for (const auto& [k, v] : attrs.entries()) {
    if (k.is_string() && !k.as_string().empty() && k.as_string()[0] == '_')
      fail(fmt::format("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '{}'.",
                       k.as_string()));
    check_storable_in_namespace(v);
    ns->attrs.set(k, v);
  }
  return Value::ns(std::move(ns));
}

// The template's own error: the message is exactly the template's text, so callers can show it to users.
Value g_raise_exception(Interpreter&, CallArgs& args) {
  ArgBinder a("raise_exception", args, {"message"});
  throw Error(ErrorCode::InvalidArgument, to_str(a.required(0)));
}

Value g_strftime_now(Interpreter& interp, CallArgs& args) {
  ArgBinder a("strftime_now", args, {"format"});
  const std::string& format = a.string(0);
  if (format.size() > 256) fail("strftime_now() format is longer than 256 characters");
  const std::tm local = interp.now();
  std::string buf(1024, '\0');
  const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &local);
  if (n == 0 && !format.empty()) fail("strftime_now() result is empty or too long");
  buf.resize(n);
  return Value::string(std::move(buf));
}

}  // namespace

Value find_global(std::string_view name) {
  static const std::unordered_map<std::string_view, Value> kGlobals = [] {
    std::unordered_map<std::string_view, Value> g;
    auto add = [&](std::string_view n, GlobalFn fn) { g[n] = Value::callable(std::make_shared<GlobalFunction>(n, fn)); };
    add("range", g_range);
    add("dict", g_dict);
    add("namespace", g_namespace);
    add("raise_exception", g_raise_exception);
    add("strftime_now", g_strftime_now);
    return g;
  }();
  auto it = kGlobals.find(name);
  return it == kGlobals.end() ? Value() : it->second;
}

}  // namespace rbee::llm::jinja
