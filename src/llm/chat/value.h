// The value type of the chat-template interpreter: what a Jinja expression evaluates to.
//
// It mirrors the Python objects a Hugging Face chat template sees: Jinja's Undefined, None, bool, int, float,
// str (UTF-8 here), list/tuple, dict (insertion-ordered, like Python's), Jinja's namespace, plus callables
// (macros, globals, bound methods) and attribute objects (`loop`). Lists and dicts are immutable once built, as
// in HF's ImmutableSandboxedEnvironment, so copies share them; a namespace is the only mutable value.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "rbee/core/error.h"

namespace rbee::llm::jinja {

class Value;
class Interpreter;

// Containers record how deeply they nest so that recursive walks (printing, comparing, freeing) stay bounded:
// building one deeper than kMaxNesting is an error.
inline constexpr int kMaxNesting = 600;

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;  // Python tuple: prints as (a, b) and is never equal to a list
  int depth = 1;
};

// An insertion-ordered map with Python's key semantics (1 == 1.0 == True; lists are unhashable).
class DictData {
 public:
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  // Inserts, or replaces the value of an existing key in place (keeping its position).
  void set(const Value& key, Value value);
  size_t size() const { return entries_.size(); }
  const std::vector<std::pair<Value, Value>>& entries() const { return entries_; }
  int depth() const { return depth_; }

 private:
  std::vector<std::pair<Value, Value>> entries_;
  int depth_ = 1;
  std::unordered_map<std::string, size_t> index_;  // hash_key(key) -> position in entries_
};

struct NamespaceData;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Something a template can call: a macro, a global function, a bound method.
class Callable {
 public:
  virtual ~Callable() = default;
  virtual std::string name() const = 0;
  virtual Value call(Interpreter& interp, CallArgs args) const = 0;
};

// An object whose attributes are computed on demand (the `loop` variable).
class Object {
 public:
  virtual ~Object() = default;
  virtual Value attr(std::string_view name) const = 0;
  virtual std::string repr() const = 0;
};

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Object, Callable };

  Value() : kind_(Kind::Undefined), data_(std::string()) {}
  // `hint` is the message used when the undefined value is misused, e.g. "'x' is undefined".
  static Value undefined(std::string hint);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double d);
  static Value string(std::string s);
  // A markupsafe.Markup string (what `|safe` and `|escape` return): `+`, `%` and most str methods HTML-escape
  // their plain-string operands when combined with it, exactly as Python does in HF's templates.
  static Value markup(std::string s);
  static Value list(std::vector<Value> items);
  static Value list_from(std::shared_ptr<const ListData> data);  // data->depth must be set
  static Value tuple(std::vector<Value> items);
  static Value dict(DictData d);
  static Value ns(std::shared_ptr<NamespaceData> n);
  static Value object(std::shared_ptr<const Object> o);
  static Value callable(std::shared_ptr<const Callable> c);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_markup() const { return kind_ == Kind::String && markup_; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }
  bool is_object() const { return kind_ == Kind::Object; }
  bool is_callable() const { return kind_ == Kind::Callable; }
  // bool, int or float (Python's bool is an int).
  bool is_number() const { return kind_ == Kind::Bool || kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_integral() const { return kind_ == Kind::Bool || kind_ == Kind::Int; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const;    // Bool or Int
  double as_number() const;  // Bool, Int or Float
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const std::string& undefined_hint() const { return std::get<std::string>(data_); }
  const ListData& as_list() const { return *std::get<std::shared_ptr<const ListData>>(data_); }
  const DictData& as_dict() const { return *std::get<std::shared_ptr<const DictData>>(data_); }
  NamespaceData& as_namespace() const { return *std::get<std::shared_ptr<NamespaceData>>(data_); }
  const Object& as_object() const { return *std::get<std::shared_ptr<const Object>>(data_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(data_); }
  // Address of the shared payload of a container value (Python's `is` for containers), else nullptr.
  const void* identity() const;
  // Container nesting depth: 0 for scalars, 1 for a flat list or dict.
  int depth() const;

 private:
  Kind kind_;
  bool markup_ = false;
  std::variant<std::monostate, bool, int64_t, double, std::string, std::shared_ptr<const ListData>,
               std::shared_ptr<const DictData>, std::shared_ptr<NamespaceData>, std::shared_ptr<const Object>,
               std::shared_ptr<const Callable>>
      data_;
};

struct NamespaceData {
  DictData attrs;
};

// Throws the interpreter's runtime error (rbee::Error, InvalidArgument).
[[noreturn]] void fail(std::string message);
// Throws when `v` is or holds a namespace: storing one in a namespace could make a reference cycle.
void check_storable_in_namespace(const Value& v);

// Python's type name of the value ("str", "int", "dict", "NoneType", ...), for error messages.
std::string type_name(const Value& v);
// Python truthiness (Undefined is false).
bool truthy(const Value& v);
// Python ==.
bool equals(const Value& a, const Value& b);
// Python ordering for <, <=, >, >=: negative, zero or positive; throws for types Python cannot order.
int compare(const Value& a, const Value& b);
// str(v) as Jinja prints it: strings as-is, Undefined as "", everything else as Python's str().
std::string to_str(const Value& v);
// Python's repr(v).
std::string repr(const Value& v);
// Python's repr of a float ("1.0", "1e-05", "1e+16", "inf").
std::string float_repr(double d);
// A string that is equal for equal dict keys; throws "unhashable type" for lists, dicts and namespaces.
std::string hash_key(const Value& v);

// Converts JSON (nlohmann::json or nlohmann::ordered_json) to a Value; objects keep their key order.
template <class Json>
Value from_json(const Json& j, int depth = 0) {
  if (depth > 512) fail("render context is nested more than 512 levels deep");
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::floating(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::floating(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      DictData d;
      for (auto it = j.begin(); it != j.end(); ++it) d.set(Value::string(it.key()), from_json(it.value(), depth + 1));
      return Value::dict(std::move(d));
    }
    default:
      fail("render context holds a JSON value of unsupported type (binary or discarded)");
  }
}

}  // namespace rbee::llm::jinja
