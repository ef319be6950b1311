// Python semantics of the operators and protocols a template uses: arithmetic, `in`, len(), iteration,
// subscripts and slices (on code points for strings), and Jinja's attribute/item lookup rules.
#pragma once

#include <string_view>
#include <vector>

#include "llm/chat/ast.h"
#include "llm/chat/value.h"

namespace rbee::llm::jinja {

// Largest string a template may build (output included); past it rendering fails instead of exhausting memory.
inline constexpr size_t kMaxStringBytes = size_t{64} << 20;
void check_string_size(size_t bytes);

// +, -, *, /, //, %, ** and ~ (And/Or short-circuit and are evaluated by the interpreter).
Value binary_op(BinaryOp op, const Value& a, const Value& b);
Value negate(const Value& v);
Value unary_plus(const Value& v);

// Python `item in container`.
bool contains(const Value& container, const Value& item);
// len(v); throws for values without a length.
int64_t length(const Value& v);
// The items a for loop visits: list items, dict keys, string characters; Undefined is empty.
std::vector<Value> iterate(const Value& v);

// Jinja's obj.name: methods of str/dict/list first, then dict items, namespace and object attributes.
// Missing attributes are Undefined; any lookup on Undefined fails with its hint.
Value get_attr(const Value& obj, std::string_view name);
// Jinja's obj[key]: items first, then (for string keys) attributes.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] for lists, tuples and strings; null parts take Python's defaults.
Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step);

// markupsafe's escape: & < > " ' become entities.
std::string html_escape(std::string_view s);
// markupsafe.escape(v): a Markup value stays as it is; anything else is str()-ed, escaped and marked up.
Value escape_markup(const Value& v);
// `result` as Markup when `like` is Markup (str methods and filters that markupsafe keeps as Markup).
Value same_kind(const Value& like, std::string result);

// The list of code points of a string as one-character strings.
std::vector<Value> string_chars(const std::string& s);

}  // namespace rbee::llm::jinja
