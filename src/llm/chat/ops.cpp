#include "llm/chat/ops.h"

#include <cmath>

#include "llm/chat/library.h"
#include "llm/chat/py_format.h"
#include "llm/chat/utf8.h"

namespace rbee::llm::jinja {

void check_string_size(size_t bytes) {
  if (bytes > kMaxStringBytes) fail(fmt::format("chat template output exceeds {} bytes", kMaxStringBytes));
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

Value escape_markup(const Value& v) { return v.is_markup() ? v : Value::markup(html_escape(to_str(v))); }

Value same_kind(const Value& like, std::string result) {
  return like.is_markup() ? Value::markup(std::move(result)) : Value::string(std::move(result));
}

namespace {

[[noreturn]] void unsupported(const char* op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail(a.undefined_hint());
  if (b.is_undefined()) fail(b.undefined_hint());
  if (std::string_view(op) == "+" && a.is_string())
    fail(fmt::format("can only concatenate str (not \"{}\") to str", type_name(b)));
  fail(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b)));
}

Value checked_int(bool overflow, int64_t r) {
  if (overflow) fail("integer overflow in chat template arithmetic");
  return Value::integer(r);
}

Value repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<uint64_t>(n) > kMaxStringBytes / s.size()) check_string_size(kMaxStringBytes + 1);
    const size_t total = s.size() * static_cast<size_t>(n);
    std::string out;
    out.reserve(total);
    if (!s.empty() && n > 0) out = s;
    while (!out.empty() && out.size() * 2 <= total) out += out;  // doubling: O(log n) appends
    out.append(out, 0, total - out.size());
    return same_kind(seq, std::move(out));
  }
  const ListData& l = seq.as_list();
  if (!l.items.empty() && static_cast<uint64_t>(n) > (kMaxStringBytes / 16) / l.items.size())
    fail("list repetition is too large");
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), l.items.begin(), l.items.end());
  return l.is_tuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

double py_floor_mod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

Value binary_op(BinaryOp op, const Value& a, const Value& b) {
  switch (op) {
    case BinaryOp::Concat: {
      std::string s = to_str(a);
      const std::string t = to_str(b);
      check_string_size(s.size() + t.size());
      s += t;
      return Value::string(std::move(s));
    }
    case BinaryOp::Add:
      if (a.is_integral() && b.is_integral()) {
        int64_t r = 0;
        const bool overflow = __builtin_add_overflow(a.as_int(), b.as_int(), &r);
        return checked_int(overflow, r);
      }
      if (a.is_number() && b.is_number()) return Value::floating(a.as_number() + b.as_number());
      if (a.is_string() && b.is_string()) {
        check_string_size(a.as_string().size() + b.as_string().size());
        if (a.is_markup() || b.is_markup())  // Markup.__add__/__radd__ escape the plain side
          return Value::markup(escape_markup(a).as_string() + escape_markup(b).as_string());
        return Value::string(a.as_string() + b.as_string());
      }
      if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
        std::vector<Value> items = a.as_list().items;
        items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
        return a.as_list().is_tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
      }
      unsupported("+", a, b);
    case BinaryOp::Sub:
      if (a.is_integral() && b.is_integral()) {
        int64_t r = 0;
        const bool overflow = __builtin_sub_overflow(a.as_int(), b.as_int(), &r);
        return checked_int(overflow, r);
      }
      if (a.is_number() && b.is_number()) return Value::floating(a.as_number() - b.as_number());
      unsupported("-", a, b);
    case BinaryOp::Mul:
      if (a.is_integral() && b.is_integral()) {
        int64_t r = 0;
        const bool overflow = __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
        return checked_int(overflow, r);
      }
      if (a.is_number() && b.is_number()) return Value::floating(a.as_number() * b.as_number());
      if ((a.is_string() || a.is_list()) && b.is_integral()) return repeat(a, b.as_int());
      if (a.is_integral() && (b.is_string() || b.is_list())) return repeat(b, a.as_int());
      unsupported("*", a, b);
    case BinaryOp::Div:
      if (a.is_number() && b.is_number()) {
        if (b.as_number() == 0) fail("division by zero");
        return Value::floating(a.as_number() / b.as_number());
      }
      unsupported("/", a, b);
    case BinaryOp::FloorDiv:
      if (a.is_integral() && b.is_integral()) {
        const int64_t x = a.as_int();
        const int64_t y = b.as_int();
        if (y == 0) fail("integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) fail("integer overflow in chat template arithmetic");
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
        return Value::integer(q);
      }
      if (a.is_number() && b.is_number()) {
        if (b.as_number() == 0) fail("float floor division by zero");
        return Value::floating(std::floor(a.as_number() / b.as_number()));
      }
      unsupported("//", a, b);
    case BinaryOp::Mod:
      if (a.is_markup()) {  // Markup % args escapes every argument that is not already Markup or a number
        auto esc = [](const Value& v) { return v.is_number() ? v : escape_markup(v); };
        Value args = b;
        if (b.is_list() && b.as_list().is_tuple) {
          std::vector<Value> items;
          for (const Value& v : b.as_list().items) items.push_back(esc(v));
          args = Value::tuple(std::move(items));
        } else if (b.is_dict()) {
          DictData d;
          for (const auto& [k, v] : b.as_dict().entries()) d.set(k, esc(v));
          args = Value::dict(std::move(d));
        } else {
          args = esc(b);
        }
        return Value::markup(percent_format(a.as_string(), args));
      }
      if (a.is_string()) return Value::string(percent_format(a.as_string(), b));
      if (a.is_integral() && b.is_integral()) {
        const int64_t x = a.as_int();
        const int64_t y = b.as_int();
        if (y == 0) fail("integer division or modulo by zero");
        if (y == -1) return Value::integer(0);
        int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value::integer(m);
      }
      if (a.is_number() && b.is_number()) {
        if (b.as_number() == 0) fail("float modulo");
        return Value::floating(py_floor_mod(a.as_number(), b.as_number()));
      }
      unsupported("%", a, b);
    case BinaryOp::Pow:
      if (a.is_integral() && b.is_integral() && b.as_int() >= 0) {
        int64_t result = 1;
        int64_t base = a.as_int();
        int64_t e = b.as_int();
        bool overflow = false;
        while (e > 0 && !overflow) {  // square-and-multiply; stops at the first overflow
          if (e & 1) overflow = __builtin_mul_overflow(result, base, &result);
          e >>= 1;
          if (e > 0 && !overflow) overflow = __builtin_mul_overflow(base, base, &base);
        }
        return checked_int(overflow, result);  // overflow is computed before result is read
      }
      if (a.is_number() && b.is_number()) {
        if (a.as_number() == 0 && b.as_number() < 0) fail("0.0 cannot be raised to a negative power");
        return Value::floating(std::pow(a.as_number(), b.as_number()));
      }
      unsupported("**", a, b);
    case BinaryOp::And:
    case BinaryOp::Or:
      break;
  }
  fail("internal error: logical operator reached binary_op");
}

Value negate(const Value& v) {
  if (v.is_integral()) {
    if (v.as_int() == INT64_MIN) fail("integer overflow in chat template arithmetic");
    return Value::integer(-v.as_int());
  }
  if (v.is_float()) return Value::floating(-v.as_number());
  if (v.is_undefined()) fail(v.undefined_hint());
  fail(fmt::format("bad operand type for unary -: '{}'", type_name(v)));
}

Value unary_plus(const Value& v) {
  if (v.is_integral()) return Value::integer(v.as_int());
  if (v.is_float()) return v;
  if (v.is_undefined()) fail(v.undefined_hint());
  fail(fmt::format("bad operand type for unary +: '{}'", type_name(v)));
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::String:
      if (!item.is_string())
        fail(fmt::format("'in <string>' requires string as left operand, not {}", type_name(item)));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::List:
      for (const Value& v : container.as_list().items)
        if (equals(v, item)) return true;
      return false;
    case Value::Kind::Dict:
      return container.as_dict().find(item) != nullptr;
    case Value::Kind::Undefined:
      return false;  // Jinja's Undefined iterates as empty
    default:
      fail(fmt::format("argument of type '{}' is not iterable", type_name(container)));
  }
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::String:
      return static_cast<int64_t>(utf8::length(v.as_string()));
    case Value::Kind::List:
      return static_cast<int64_t>(v.as_list().items.size());
    case Value::Kind::Dict:
      return static_cast<int64_t>(v.as_dict().size());
    case Value::Kind::Undefined:
      return 0;
    default:
      fail(fmt::format("object of type '{}' has no len()", type_name(v)));
  }
}

std::vector<Value> string_chars(const std::string& s) {
  std::vector<Value> out;
  for (size_t i = 0; i < s.size();) {
    const size_t from = i;
    utf8::next(s, i);
    out.push_back(Value::string(s.substr(from, i - from)));
  }
  return out;
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::List:
      return v.as_list().items;
    case Value::Kind::Dict: {
      std::vector<Value> keys;
      for (const auto& [k, item] : v.as_dict().entries()) keys.push_back(k);
      return keys;
    }
    case Value::Kind::String:
      return string_chars(v.as_string());
    case Value::Kind::Undefined:
      return {};
    default:
      fail(fmt::format("'{}' object is not iterable", type_name(v)));
  }
}

namespace {

std::string object_desc(const Value& obj) {
  if (obj.is_none()) return "None";
  return type_name(obj) + " object";
}

Value missing_attr(const Value& obj, std::string_view name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_desc(obj), name));
}

}  // namespace

Value get_attr(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::Undefined:
      fail(obj.undefined_hint());
    case Value::Kind::String:
    case Value::Kind::List: {
      Value m = find_method(obj, name);
      return m.is_undefined() ? missing_attr(obj, name) : m;
    }
    case Value::Kind::Dict: {
      Value m = find_method(obj, name);
      if (!m.is_undefined()) return m;
      const Value* v = obj.as_dict().find(name);
      return v ? *v : missing_attr(obj, name);
    }
    case Value::Kind::Namespace: {
      const Value* v = obj.as_namespace().attrs.find(name);
      return v ? *v : missing_attr(obj, name);
    }
    case Value::Kind::Object:
      return obj.as_object().attr(name);
    default:
      return missing_attr(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::Undefined:
      fail(obj.undefined_hint());
    case Value::Kind::List:
    case Value::Kind::String:
      if (key.is_integral()) {
        int64_t i = key.as_int();
        if (obj.is_list()) {
          const auto& items = obj.as_list().items;
          const auto n = static_cast<int64_t>(items.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return items[static_cast<size_t>(i)];
        } else {
          const std::vector<size_t> b = utf8::boundaries(obj.as_string());
          const auto n = static_cast<int64_t>(b.size()) - 1;
          if (i < 0) i += n;
          if (i >= 0 && i < n) {
            const auto k = static_cast<size_t>(i);
            return same_kind(obj, obj.as_string().substr(b[k], b[k + 1] - b[k]));
          }
        }
        return Value::undefined(fmt::format("'{}' has no element {}", object_desc(obj), key.as_int()));
      }
      break;
    case Value::Kind::Dict: {
      const bool hashable = !(key.is_list() && !key.as_list().is_tuple) && !key.is_dict() && !key.is_namespace();
      if (hashable) {
        const Value* v = obj.as_dict().find(key);
        if (v) return *v;
      }
      break;
    }
    default:
      break;
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined(fmt::format("'{}' has no element {}", object_desc(obj), repr(key)));
}

Value get_slice(const Value& obj, const Value* start_v, const Value* stop_v, const Value* step_v) {
  if (obj.is_undefined()) fail(obj.undefined_hint());
  auto as_index = [](const Value* v, bool& given) -> int64_t {
    given = v && !v->is_none();
    if (!given) return 0;
    if (!v->is_integral()) fail("slice indices must be integers or None");
    return v->as_int();
  };
  bool has_start, has_stop, has_step;
  const int64_t start_in = as_index(start_v, has_start);
  const int64_t stop_in = as_index(stop_v, has_stop);
  const int64_t step_in = as_index(step_v, has_step);
  const int64_t st = has_step ? step_in : 1;
  if (st == 0) fail("slice step cannot be zero");
  if (!obj.is_list() && !obj.is_string())
    return Value::undefined(fmt::format("'{}' cannot be sliced", object_desc(obj)));

  std::vector<size_t> bounds;
  int64_t n;
  if (obj.is_list()) {
    n = static_cast<int64_t>(obj.as_list().items.size());
  } else {
    bounds = utf8::boundaries(obj.as_string());
    n = static_cast<int64_t>(bounds.size()) - 1;
  }
  // CPython's PySlice_AdjustIndices.
  const int64_t lower = st > 0 ? 0 : -1;
  const int64_t upper = st > 0 ? n : n - 1;
  auto adjust = [&](bool given, int64_t v, int64_t def) {
    if (!given) return def;
    if (v < 0) {
      v += n;
      if (v < lower) v = lower;
    } else if (v > upper) {
      v = upper;
    }
    return v;
  };
  const int64_t start = adjust(has_start, start_in, st > 0 ? lower : upper);
  const int64_t stop = adjust(has_stop, stop_in, st > 0 ? upper : lower);

  std::vector<int64_t> picks;
  for (int64_t i = start; st > 0 ? i < stop : i > stop; i += st) picks.push_back(i);
  if (obj.is_list()) {
    std::vector<Value> out;
    out.reserve(picks.size());
    for (int64_t i : picks) out.push_back(obj.as_list().items[static_cast<size_t>(i)]);
    return obj.as_list().is_tuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  const std::string& s = obj.as_string();
  std::string out;
  for (int64_t i : picks) {
    const auto k = static_cast<size_t>(i);
    out.append(s, bounds[k], bounds[k + 1] - bounds[k]);
  }
  return same_kind(obj, std::move(out));
}

}  // namespace rbee::llm::jinja
