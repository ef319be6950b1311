// Jinja's tests (`x is defined`, `x is string`, ...), with the semantics of jinja2/tests.py.
#include <unordered_map>

#include "llm/chat/args.h"
#include "llm/chat/library.h"
#include "llm/chat/ops.h"
#include "llm/chat/utf8.h"

namespace rbee::llm::jinja {

namespace {

using Args = CallArgs;

void no_args(const char* name, const Args& args) { ArgBinder a(name, args, {}); }

const Value& one_arg(const char* name, const Args& args) {
  ArgBinder a(name, args, {"other"});
  return a.required(0);
}

bool t_defined(Interpreter&, const Value& v, Args& a) { return no_args("defined", a), !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, Args& a) { return no_args("undefined", a), v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, Args& a) { return no_args("none", a), v.is_none(); }
bool t_boolean(Interpreter&, const Value& v, Args& a) { return no_args("boolean", a), v.is_bool(); }
bool t_true(Interpreter&, const Value& v, Args& a) { return no_args("true", a), v.is_bool() && v.as_bool(); }
bool t_false(Interpreter&, const Value& v, Args& a) { return no_args("false", a), v.is_bool() && !v.as_bool(); }
bool t_integer(Interpreter&, const Value& v, Args& a) { return no_args("integer", a), v.is_int(); }
bool t_float(Interpreter&, const Value& v, Args& a) { return no_args("float", a), v.is_float(); }
bool t_number(Interpreter&, const Value& v, Args& a) { return no_args("number", a), v.is_number(); }
bool t_string(Interpreter&, const Value& v, Args& a) { return no_args("string", a), v.is_string(); }
bool t_mapping(Interpreter&, const Value& v, Args& a) { return no_args("mapping", a), v.is_dict(); }
bool t_callable(Interpreter&, const Value& v, Args& a) { return no_args("callable", a), v.is_callable(); }
// Python's iter() succeeds on str, list, tuple, dict, and on Jinja's Undefined (it iterates as empty).
bool t_iterable(Interpreter&, const Value& v, Args& a) {
  no_args("iterable", a);
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
// len() and __getitem__ both exist: str, list, tuple, dict, and Undefined (whose __getitem__ raises later).
bool t_sequence(Interpreter&, const Value& v, Args& a) {
  no_args("sequence", a);
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_escaped(Interpreter&, const Value& v, Args& a) { return no_args("escaped", a), v.is_markup(); }

bool check_lower_upper(const Value& v, bool want_lower) {
  const std::string s = to_str(v);
  bool any_cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::next(s, i);
    if (want_lower ? utf8::is_upper(c) : utf8::is_lower(c)) return false;
    any_cased = any_cased || utf8::is_cased(c);
  }
  return any_cased;
}
bool t_lower(Interpreter&, const Value& v, Args& a) { return no_args("lower", a), check_lower_upper(v, true); }
bool t_upper(Interpreter&, const Value& v, Args& a) { return no_args("upper", a), check_lower_upper(v, false); }

bool t_odd(Interpreter&, const Value& v, Args& a) {
  no_args("odd", a);
  return equals(binary_op(BinaryOp::Mod, v, Value::integer(2)), Value::integer(1));
}
bool t_even(Interpreter&, const Value& v, Args& a) {
  no_args("even", a);
  return equals(binary_op(BinaryOp::Mod, v, Value::integer(2)), Value::integer(0));
}
bool t_divisibleby(Interpreter&, const Value& v, Args& a) {
  ArgBinder b("divisibleby", a, {"num"});
  return equals(binary_op(BinaryOp::Mod, v, b.required(0)), Value::integer(0));
}

bool t_eq(Interpreter&, const Value& v, Args& a) { return equals(v, one_arg("eq", a)); }
bool t_ne(Interpreter&, const Value& v, Args& a) { return !equals(v, one_arg("ne", a)); }
bool t_lt(Interpreter&, const Value& v, Args& a) { return compare(v, one_arg("lt", a)) < 0; }
bool t_le(Interpreter&, const Value& v, Args& a) { return compare(v, one_arg("le", a)) <= 0; }
bool t_gt(Interpreter&, const Value& v, Args& a) { return compare(v, one_arg("gt", a)) > 0; }
bool t_ge(Interpreter&, const Value& v, Args& a) { return compare(v, one_arg("ge", a)) >= 0; }
bool t_in(Interpreter&, const Value& v, Args& a) {
  ArgBinder b("in", a, {"seq"});
  return contains(b.required(0), v);
}
// Python `is`: containers by identity, scalars (None, bools, small values) by value.
bool t_sameas(Interpreter&, const Value& v, Args& a) {
  const Value& other = one_arg("sameas", a);
  if (v.identity() || other.identity()) return v.identity() == other.identity();
  return v.kind() == other.kind() && equals(v, other);
}
bool t_filter(Interpreter&, const Value& v, Args& a) {
  no_args("filter", a);
  return v.is_string() && find_filter(v.as_string()) != nullptr;
}
bool t_test(Interpreter&, const Value& v, Args& a) {
  no_args("test", a);
  return v.is_string() && find_test(v.as_string()) != nullptr;
}

}  // namespace

TestFn find_test(std::string_view name) {
  static const std::unordered_map<std::string_view, TestFn> kTests = {
      {"defined", t_defined},   {"undefined", t_undefined}, {"none", t_none},
      {"boolean", t_boolean},   {"true", t_true},           {"false", t_false},
      {"integer", t_integer},   {"float", t_float},         {"number", t_number},
      {"string", t_string},     {"mapping", t_mapping},     {"iterable", t_iterable},
      {"sequence", t_sequence}, {"callable", t_callable},   {"escaped", t_escaped},
      {"lower", t_lower},       {"upper", t_upper},         {"odd", t_odd},
      {"even", t_even},         {"divisibleby", t_divisibleby},
      {"eq", t_eq},             {"equalto", t_eq},          {"==", t_eq},
      {"ne", t_ne},             {"!=", t_ne},               {"lt", t_lt},
      {"lessthan", t_lt},       {"<", t_lt},                {"le", t_le},
      {"<=", t_le},             {"gt", t_gt},               {"greaterthan", t_gt},
      {">", t_gt},              {"ge", t_ge},               {">=", t_ge},
      {"in", t_in},             {"sameas", t_sameas},       {"filter", t_filter},
      {"test", t_test},
  };
  auto it = kTests.find(name);
  return it == kTests.end() ? nullptr : it->second;
}

}  // namespace rbee::llm::jinja
