// Internal: the filter functions, split by theme over filters*.cpp and registered in filters.cpp.
// Each follows the Jinja 3.1 filter of the same name (HF's own `tojson`), with lists where Jinja would return
// a generator (map, select, unique, ...): the rendered text is the same in every use a chat template makes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "llm/chat/ast.h"

namespace rbee::llm::jinja::filters {

// A dotted attribute path ("a.b.0") looked up like Jinja's make_attrgetter; `fallback` replaces Undefined.
Value lookup_path(const Value& item, const Value& path, const Value* fallback = nullptr);
// "a.b.c" -> {"a", "b", "c"}.
std::vector<std::string> str_split_dots(const std::string& s);
// Jinja's ignore_case: strings lowercased, other values unchanged.
Value ignore_case(const Value& v);

// filters_text.cpp
Value trim(Interpreter&, const Value&, CallArgs&);
Value upper(Interpreter&, const Value&, CallArgs&);
Value lower(Interpreter&, const Value&, CallArgs&);
Value capitalize(Interpreter&, const Value&, CallArgs&);
Value title(Interpreter&, const Value&, CallArgs&);
Value replace(Interpreter&, const Value&, CallArgs&);
Value indent(Interpreter&, const Value&, CallArgs&);
Value center(Interpreter&, const Value&, CallArgs&);
Value truncate(Interpreter&, const Value&, CallArgs&);
Value wordcount(Interpreter&, const Value&, CallArgs&);
Value escape(Interpreter&, const Value&, CallArgs&);
Value forceescape(Interpreter&, const Value&, CallArgs&);
Value safe(Interpreter&, const Value&, CallArgs&);
Value format(Interpreter&, const Value&, CallArgs&);
Value string(Interpreter&, const Value&, CallArgs&);

// filters_seq.cpp
Value length(Interpreter&, const Value&, CallArgs&);
Value first(Interpreter&, const Value&, CallArgs&);
Value last(Interpreter&, const Value&, CallArgs&);
Value list(Interpreter&, const Value&, CallArgs&);
Value join(Interpreter&, const Value&, CallArgs&);
Value items(Interpreter&, const Value&, CallArgs&);
Value dictsort(Interpreter&, const Value&, CallArgs&);
Value sort(Interpreter&, const Value&, CallArgs&);
Value unique(Interpreter&, const Value&, CallArgs&);
Value reverse(Interpreter&, const Value&, CallArgs&);
Value sum(Interpreter&, const Value&, CallArgs&);
Value min(Interpreter&, const Value&, CallArgs&);
Value max(Interpreter&, const Value&, CallArgs&);
Value batch(Interpreter&, const Value&, CallArgs&);
Value map(Interpreter&, const Value&, CallArgs&);
Value select(Interpreter&, const Value&, CallArgs&);
Value reject(Interpreter&, const Value&, CallArgs&);
Value selectattr(Interpreter&, const Value&, CallArgs&);
Value rejectattr(Interpreter&, const Value&, CallArgs&);

// filters.cpp
Value default_(Interpreter&, const Value&, CallArgs&);
Value to_int(Interpreter&, const Value&, CallArgs&);
Value to_float(Interpreter&, const Value&, CallArgs&);
Value abs(Interpreter&, const Value&, CallArgs&);
Value round(Interpreter&, const Value&, CallArgs&);
Value tojson(Interpreter&, const Value&, CallArgs&);
Value attr(Interpreter&, const Value&, CallArgs&);

}  // namespace rbee::llm::jinja::filters
