// Sequence filters: length, first, last, list, join, items, dictsort, sort, unique, reverse, sum, min, max,
// batch, map, select, reject, selectattr, rejectattr.
#include <algorithm>
#include <unordered_set>

#include "llm/chat/args.h"
#include "llm/chat/filters_impl.h"
#include "llm/chat/interpreter.h"
#include "llm/chat/library.h"
#include "llm/chat/ops.h"
#include "llm/chat/utf8.h"

namespace rbee::llm::jinja::filters {

Value lookup_path(const Value& item, const Value& path, const Value* fallback) {
  std::vector<Value> parts;
  if (path.is_string()) {
    for (const std::string& p : str_split_dots(path.as_string())) {
      const bool digits = !p.empty() && p.size() < 18 && std::all_of(p.begin(), p.end(), [](char c) {
        return c >= '0' && c <= '9';
      });
      parts.push_back(digits ? Value::integer(std::stoll(p)) : Value::string(p));
    }
  } else if (!path.is_none()) {
    parts.push_back(path);
  }
  Value v = item;
  for (const Value& part : parts) {
    v = get_item(v, part);
    if (fallback && v.is_undefined()) v = *fallback;
  }
  return v;
}

std::vector<std::string> str_split_dots(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    out.push_back(s.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) return out;
    start = dot + 1;
  }
}

Value ignore_case(const Value& v) { return v.is_string() ? Value::string(utf8::lower(v.as_string())) : v; }

Value length(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("length", args, {});
  return Value::integer(jinja::length(in));
}

Value first(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("first", args, {});
  std::vector<Value> items = iterate(in);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value last(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("last", args, {});
  std::vector<Value> items = iterate(in);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value list(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("list", args, {});
  return Value::list(iterate(in));
}

Value join(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("join", args, {"d", "attribute"});
  const std::string sep = a.has(0) ? to_str(*a.get(0)) : "";
  const Value attribute = a.get_or(1, Value::none());
  std::string out;
  bool first_item = true;
  for (const Value& item : iterate(in)) {
    if (!first_item) out += sep;
    first_item = false;
    out += to_str(attribute.is_none() ? item : lookup_path(item, attribute));
    check_string_size(out.size());
  }
  return Value::string(std::move(out));
}

Value items(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("items", args, {});
  if (in.is_undefined()) return Value::list({});
  if (!in.is_dict()) fail("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, v] : in.as_dict().entries()) out.push_back(Value::tuple({k, v}));
  return Value::list(std::move(out));
}

namespace {

// Python's sorted(values, key=key, reverse=reverse): stable, equal keys keep their order either way.
std::vector<Value> sorted_by(std::vector<Value> values, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(values.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return reverse ? compare(keys[y], keys[x]) < 0 : compare(keys[x], keys[y]) < 0;
  });
  std::vector<Value> out;
  out.reserve(values.size());
  for (size_t i : order) out.push_back(std::move(values[i]));
  return out;
}

// A comma-separated list of attribute paths ("age,name") gives a tuple key, like make_multi_attrgetter.
Value sort_key(const Value& item, const Value& attribute, bool case_sensitive) {
  if (attribute.is_none()) return case_sensitive ? item : ignore_case(item);
  std::vector<Value> parts;
  if (attribute.is_string()) {
    std::string spec = attribute.as_string();
    size_t start = 0;
    while (true) {
      const size_t comma = spec.find(',', start);
      const std::string one = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      const Value v = lookup_path(item, Value::string(one));
      parts.push_back(case_sensitive ? v : ignore_case(v));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  } else {
    const Value v = lookup_path(item, attribute);
    parts.push_back(case_sensitive ? v : ignore_case(v));
  }
  return Value::list(std::move(parts));
}

}  // namespace

Value dictsort(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!in.is_dict()) fail(fmt::format("dictsort() needs a mapping, got {}", type_name(in)));
  const bool case_sensitive = a.has(0) && a.flag(0);
  const std::string by = a.has(1) ? a.string(1) : "key";
  if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
  const bool rev = a.has(2) && a.flag(2);
  std::vector<Value> pairs;
  std::vector<Value> keys;
  for (const auto& [k, v] : in.as_dict().entries()) {
    pairs.push_back(Value::tuple({k, v}));
    const Value& key = by == "key" ? k : v;
    keys.push_back(case_sensitive ? key : ignore_case(key));
  }
  return Value::list(sorted_by(std::move(pairs), keys, rev));
}

Value sort(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("sort", args, {"reverse", "case_sensitive", "attribute"});
  const bool rev = a.has(0) && a.flag(0);
  const bool case_sensitive = a.has(1) && a.flag(1);
  const Value attribute = a.get_or(2, Value::none());
  std::vector<Value> values = iterate(in);
  std::vector<Value> keys;
  for (const Value& v : values) keys.push_back(sort_key(v, attribute, case_sensitive));
  return Value::list(sorted_by(std::move(values), keys, rev));
}

Value unique(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("unique", args, {"case_sensitive", "attribute"});
  const bool case_sensitive = a.has(0) && a.flag(0);
  const Value attribute = a.get_or(1, Value::none());
  std::unordered_set<std::string> seen;
  std::vector<Value> out;
  for (const Value& item : iterate(in)) {
    Value key = attribute.is_none() ? item : lookup_path(item, attribute);
    if (!case_sensitive) key = ignore_case(key);
    if (seen.insert(hash_key(key)).second) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value reverse(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("reverse", args, {});
  if (in.is_string()) {
    std::vector<char32_t> cps = utf8::decode(in.as_string());
    std::reverse(cps.begin(), cps.end());
    return same_kind(in, utf8::encode(cps));
  }
  std::vector<Value> items = iterate(in);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value sum(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("sum", args, {"attribute", "start"});
  const Value attribute = a.get_or(0, Value::none());
  Value total = a.get_or(1, Value::integer(0));
  for (const Value& item : iterate(in))
    total = binary_op(BinaryOp::Add, total, attribute.is_none() ? item : lookup_path(item, attribute));
  return total;
}

namespace {
Value min_or_max(const char* name, const Value& in, CallArgs& args, bool want_max) {
  ArgBinder a(name, args, {"case_sensitive", "attribute"});
  const bool case_sensitive = a.has(0) && a.flag(0);
  const Value attribute = a.get_or(1, Value::none());
  std::vector<Value> items = iterate(in);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& v) {
    Value k = attribute.is_none() ? v : lookup_path(v, attribute);
    return case_sensitive ? k : ignore_case(k);
  };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    const int c = compare(k, best_key);
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}
}  // namespace

Value min(Interpreter&, const Value& in, CallArgs& args) { return min_or_max("min", in, args, false); }
Value max(Interpreter&, const Value& in, CallArgs& args) { return min_or_max("max", in, args, true); }

Value batch(Interpreter&, const Value& in, CallArgs& args) {
  ArgBinder a("batch", args, {"linecount", "fill_with"});
  const int64_t n = a.integer(0);
  if (n <= 0) fail("batch() linecount must be positive");
  const Value fill = a.get_or(1, Value::none());
  std::vector<Value> out;
  std::vector<Value> row;
  for (const Value& item : iterate(in)) {
    if (static_cast<int64_t>(row.size()) == n) {
      out.push_back(Value::list(std::move(row)));
      row.clear();
    }
    row.push_back(item);
  }
  if (!row.empty()) {
    if (!fill.is_none())
      while (static_cast<int64_t>(row.size()) < n) row.push_back(fill);
    out.push_back(Value::list(std::move(row)));
  }
  return Value::list(std::move(out));
}

Value map(Interpreter& interp, const Value& in, CallArgs& args) {
  std::vector<Value> out;
  if (args.positional.empty()) {
    // map(attribute='x', default=...)
    const Value* attribute = nullptr;
    const Value* fallback = nullptr;
    for (const auto& [k, v] : args.keyword) {
      if (k == "attribute") {
        attribute = &v;
      } else if (k == "default") {
        fallback = &v;
      } else {
        fail(fmt::format("map() got an unexpected keyword argument '{}'", k));
      }
    }
    if (!attribute) fail("map requires a filter argument");
    const bool use_default = fallback && !fallback->is_none();
    for (const Value& item : iterate(in)) out.push_back(lookup_path(item, *attribute, use_default ? fallback : nullptr));
    return Value::list(std::move(out));
  }
  // map('filter', *args, **kwargs)
  if (!args.positional[0].is_string()) fail("map() filter name must be a string");
  const std::string name = args.positional[0].as_string();
  const FilterFn fn = find_filter(name);
  if (!fn) fail(fmt::format("no filter named '{}'", name));
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : iterate(in)) {
    interp.tick();
    CallArgs call = rest;
    out.push_back(fn(interp, item, call));
  }
  return Value::list(std::move(out));
}

namespace {

// Jinja's select_or_reject: with lookup_attr the first argument is an attribute path; the next is a test name
// (none: truthiness); the rest go to the test.
Value select_or_reject(Interpreter& interp, const char* name, const Value& in, CallArgs& args, bool keep,
                       bool lookup_attr) {
  size_t off = 0;
  Value attribute;
  if (lookup_attr) {
    if (args.positional.empty()) fail("Missing parameter for attribute name");
    attribute = args.positional[0];
    off = 1;
  }
  TestFn test = nullptr;
  CallArgs test_args;
  if (args.positional.size() > off) {
    if (!args.positional[off].is_string()) fail(fmt::format("{}() test name must be a string", name));
    test = find_test(args.positional[off].as_string());
    if (!test) fail(fmt::format("no test named '{}'", args.positional[off].as_string()));
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(off + 1), args.positional.end());
    test_args.keyword = args.keyword;
  } else if (!args.keyword.empty()) {
    fail(fmt::format("{}() got keyword arguments but no test name", name));
  }
  std::vector<Value> out;
  if (!truthy(in)) return Value::list(std::move(out));
  for (const Value& item : iterate(in)) {
    interp.tick();
    const Value subject = lookup_attr ? lookup_path(item, attribute) : item;
    bool result;
    if (test) {
      CallArgs call = test_args;
      result = test(interp, subject, call);
    } else {
      result = truthy(subject);
    }
    if (result == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

}  // namespace

Value select(Interpreter& in_, const Value& in, CallArgs& args) {
  return select_or_reject(in_, "select", in, args, true, false);
}
Value reject(Interpreter& in_, const Value& in, CallArgs& args) {
  return select_or_reject(in_, "reject", in, args, false, false);
}
Value selectattr(Interpreter& in_, const Value& in, CallArgs& args) {
  return select_or_reject(in_, "selectattr", in, args, true, true);
}
Value rejectattr(Interpreter& in_, const Value& in, CallArgs& args) {
  return select_or_reject(in_, "rejectattr", in, args, false, true);
}

}  // namespace rbee::llm::jinja::filters
