// JSON Schema -> GBNF. Each schema becomes a GBNF expression; named pieces become rules (shared by identical
// bodies; $ref targets get one rule each, made before their body so recursion works).
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <optional>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

#include "rbee/core/error.h"
#include "rbee/llm/grammar.h"

namespace rbee::llm::grammar {

namespace {

using ojson = nlohmann::ordered_json;

// A GBNF string literal for raw bytes.
std::string lit(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) out += fmt::format("\\x{:02X}", c);
    else out += (char)c;
  }
  return out + "\"";
}

constexpr const char* kWs = R"(( " " | "\n" [ \t]{0,20} )?)";
constexpr const char* kStringChar = R"([^"\\\x00-\x1F\x7F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ))";
constexpr int64_t kMaxDigits = 15;  // integers and integer parts stay within what a double holds exactly

const std::set<std::string>& ignored_keywords() {
  static const std::set<std::string> k = {"title", "description", "default", "examples", "$schema", "$id",
                                          "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                          "definitions", "strict", "name", "contentMediaType", "contentEncoding"};
  return k;
}
const std::set<std::string>& known_keywords() {
  static const std::set<std::string> k = {
      "type", "properties", "required", "additionalProperties", "enum", "const", "anyOf", "oneOf", "allOf", "$ref",
      "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format", "minimum",
      "maximum", "exclusiveMinimum", "exclusiveMaximum", "nullable"};
  return k;
}

// Decimal digit strings for the integers in [lo, hi] (0 <= lo <= hi, same number of digits, leading zeros
// allowed inside), as GBNF. Linear in the digits: at most one recursion on each side.
std::string same_length_range(const std::string& lo, const std::string& hi) {
  if (lo == hi) return lit(lo);
  const size_t rest = lo.size() - 1;
  const char l0 = lo[0], h0 = hi[0];
  if (rest == 0) return fmt::format("[{}-{}]", l0, h0);
  if (l0 == h0) return "(" + lit(lo.substr(0, 1)) + " " + same_length_range(lo.substr(1), hi.substr(1)) + ")";
  const std::string nines(rest, '9'), zeros(rest, '0');
  const bool lo_full = lo.substr(1) == zeros, hi_full = hi.substr(1) == nines;
  std::vector<std::string> alts;
  if (!lo_full) alts.push_back(lit(std::string(1, l0)) + " " + same_length_range(lo.substr(1), nines));
  const char first = lo_full ? l0 : (char)(l0 + 1), last = hi_full ? h0 : (char)(h0 - 1);
  if (first <= last) alts.push_back(fmt::format("[{}-{}] [0-9]{{{}}}", first, last, rest));
  if (!hi_full) alts.push_back(lit(std::string(1, h0)) + " " + same_length_range(zeros, hi.substr(1)));
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

// Non-negative integers in [lo, hi] without leading zeros; hi < 0 means unbounded (then at most kMaxDigits).
std::string nonneg_range(int64_t lo, int64_t hi) {
  std::vector<std::string> alts;
  const int lo_digits = (int)std::to_string(lo).size();
  const int hi_digits = hi < 0 ? (int)kMaxDigits : (int)std::to_string(hi).size();
  for (int d = lo_digits; d <= hi_digits; ++d) {
    const int64_t first = d == 1 ? 0 : (int64_t)std::pow(10, d - 1);
    const int64_t last = d >= 18 ? std::numeric_limits<int64_t>::max() : (int64_t)std::pow(10, d) - 1;
    const int64_t a = std::max(lo, first);
    const int64_t b = hi < 0 ? last : std::min(hi, last);
    if (a > b) continue;
    if (hi < 0 && d == hi_digits && a == first) {
      alts.push_back(fmt::format("[1-9] [0-9]{{{}}}", d - 1));
      continue;
    }
    alts.push_back(same_length_range(std::to_string(a), std::to_string(b)));
  }
  RBEE_ASSERT(!alts.empty(), "empty integer range [{}, {}]", lo, hi);
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

class Converter {
 public:
  explicit Converter(const ojson& root) : root_(root) {}

  std::string run() {
    const std::string top = visit(root_, "");
    std::string out = "root ::= " + top + "\n";
    for (const auto& name : order_) out += name + " ::= " + rules_[name] + "\n";
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    RBEE_THROW(ErrorCode::InvalidArgument, "json_schema: at {}: {}", path.empty() ? "/" : path, what);
  }

  std::string rule(const std::string& hint, const std::string& body) {
    auto it = by_body_.find(body);
    if (it != by_body_.end()) return it->second;
    std::string name;
    for (char c : hint) name += std::isalnum((unsigned char)c) ? (char)std::tolower((unsigned char)c) : '-';
    if (name.empty() || !std::isalpha((unsigned char)name[0])) name = "r-" + name;
    std::string unique = name;
    for (int i = 2; rules_.count(unique); ++i) unique = fmt::format("{}-{}", name, i);
    rules_[unique] = body;
    order_.push_back(unique);
    by_body_[body] = unique;
    return unique;
  }

  std::string ws() { return rule("ws", kWs); }
  std::string string_char() { return rule("char", kStringChar); }
  std::string any_string() { return rule("string", "\"\\\"\" " + string_char() + "* \"\\\"\""); }
  std::string any_number() {
    return rule("number", R"("-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?)");
  }
  std::string any_integer() { return rule("integer", R"("-"? ( "0" | [1-9] [0-9]{0,15} ))"); }
  std::string any_value() {
    if (rules_.count("value")) return "value";
    rules_["value"] = "";  // reserved: object and array refer back to it
    order_.push_back("value");
    const std::string w = ws();
    const std::string member = any_string() + " \":\" " + w + " value";
    const std::string obj = rule("object", "\"{\" " + w + " ( " + member + " ( \",\" " + w + " " + member + " )* )? \"}\"");
    const std::string arr = rule("array", "\"[\" " + w + " ( value ( \",\" " + w + " value )* )? \"]\"");
    rules_["value"] = obj + " | " + arr + " | " + any_string() + " | " + any_number() + " | \"true\" | \"false\" | \"null\"";
    return "value";
  }

  std::string visit(const ojson& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(path, "the schema false accepts nothing");
      return any_value();
    }
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (!known_keywords().count(it.key()) && !ignored_keywords().count(it.key())) {
        fail(path, fmt::format("keyword \"{}\" is not supported (the output could not be guaranteed to validate)",
                               it.key()));
      }
    }
    if (s.contains("nullable") && s["nullable"].is_boolean() && s["nullable"].get<bool>()) {
      ojson inner = s;
      inner.erase("nullable");
      return "( " + visit(inner, path) + " | \"null\" )";
    }
    if (s.contains("$ref")) return visit_ref(s, path);
    if (s.contains("const")) return lit(s["const"].dump());
    if (s.contains("enum")) {
      const ojson& e = s["enum"];
      if (!e.is_array() || e.empty()) fail(path + "/enum", "must be a non-empty array");
      std::string out = "(";
      for (size_t i = 0; i < e.size(); ++i) out += (i ? " | " : " ") + lit(e[i].dump());
      return out + " )";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const ojson& list = s[key];
      if (!list.is_array() || list.empty()) fail(path + "/" + key, "must be a non-empty array of schemas");
      std::string out = "(";
      for (size_t i = 0; i < list.size(); ++i) out += (i ? " | " : " ") + visit(list[i], fmt::format("{}/{}/{}", path, key, i));
      return out + " )";
    }
    if (s.contains("allOf")) return visit(merge_all_of(s, path), path);
    if (s.contains("type") && s["type"].is_array()) {
      const ojson& types = s["type"];
      if (types.empty()) fail(path + "/type", "must not be empty");
      std::string out = "(";
      for (size_t i = 0; i < types.size(); ++i) {
        ojson one = s;
        one["type"] = types[i];
        out += (i ? " | " : " ") + visit(one, path);
      }
      return out + " )";
    }
    std::string type = s.contains("type") ? (s["type"].is_string() ? s["type"].get<std::string>() : "") : "";
    if (s.contains("type") && type.empty()) fail(path + "/type", "must be a string or an array of strings");
    if (type.empty()) {
      if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) type = "object";
      else if (s.contains("items") || s.contains("prefixItems")) type = "array";
      else if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength")) type = "string";
      else return any_value();
    }
    if (type == "object") return visit_object(s, path);
    if (type == "array") return visit_array(s, path);
    if (type == "string") return visit_string(s, path);
    if (type == "integer" || type == "number") return visit_number(s, path, type == "integer");
    if (type == "boolean") return "( \"true\" | \"false\" )";
    if (type == "null") return "\"null\"";
    fail(path + "/type", "unknown type \"" + type + "\"");
  }

  std::string visit_ref(const ojson& s, const std::string& path) {
    if (!s["$ref"].is_string()) fail(path + "/$ref", "must be a string");
    const std::string ref = s["$ref"].get<std::string>();
    auto it = refs_.find(ref);
    if (it != refs_.end()) return it->second;
    if (ref.rfind("#", 0) != 0) fail(path + "/$ref", "only references inside the schema (#/...) are supported");
    const ojson* target = resolve(ref, path + "/$ref");
    // The rule's name exists before its body, so a schema may refer to itself.
    std::string name;
    const std::string hint = "ref-" + (ref.size() > 1 ? ref.substr(ref.find_last_of('/') + 1) : std::string("root"));
    for (char c : hint) name += std::isalnum((unsigned char)c) ? (char)std::tolower((unsigned char)c) : '-';
    std::string unique = name;
    for (int i = 2; rules_.count(unique); ++i) unique = fmt::format("{}-{}", name, i);
    rules_[unique] = "";
    order_.push_back(unique);
    refs_[ref] = unique;
    rules_[unique] = visit(*target, ref.substr(1));
    return unique;
  }

  // The schema a "#/a/b" reference points at (JSON pointer, ~0 and ~1 unescaped).
  const ojson* resolve(const std::string& ref, const std::string& where) const {
    if (ref.rfind("#", 0) != 0) fail(where, "only references inside the schema (#/...) are supported");
    const ojson* target = &root_;
    size_t at = 1;
    while (at < ref.size()) {
      if (ref[at] != '/') fail(where, "bad JSON pointer \"" + ref + "\"");
      std::string part;
      size_t i = at + 1;
      for (; i < ref.size() && ref[i] != '/'; ++i) {
        if (ref[i] == '~' && i + 1 < ref.size() && (ref[i + 1] == '0' || ref[i + 1] == '1')) {
          part.push_back(ref[i + 1] == '1' ? '/' : '~');
          ++i;
        } else {
          part.push_back(ref[i]);
        }
      }
      if (!target->is_object() || !target->contains(part)) fail(where, "\"" + ref + "\" points nowhere");
      target = &(*target)[part];
      at = i;
    }
    return target;
  }

  ojson merge_all_of(const ojson& s, const std::string& path) {
    const ojson& list = s["allOf"];
    if (!list.is_array() || list.empty()) fail(path + "/allOf", "must be a non-empty array of schemas");
    ojson merged = s;
    merged.erase("allOf");
    if (list.size() == 1 && s.size() == 1) return list[0];
    // Objects only: properties and required lists are combined.
    ojson props = merged.value("properties", ojson::object());
    ojson required = merged.value("required", ojson::array());
    for (size_t i = 0; i < list.size(); ++i) {
      const ojson* part = &list[i];
      if (part->is_object() && part->contains("$ref") && (*part)["$ref"].is_string()) {
        part = resolve((*part)["$ref"].get<std::string>(), fmt::format("{}/allOf/{}/$ref", path, i));
      }
      const std::string at = fmt::format("{}/allOf/{}", path, i);
      if (!part->is_object() || (part->contains("type") && (*part)["type"] != "object") ||
          part->contains("anyOf") || part->contains("oneOf") || part->contains("allOf")) {
        fail(at, "allOf is supported for object schemas only (their properties are merged)");
      }
      if (part->contains("properties")) {
        for (auto it = (*part)["properties"].begin(); it != (*part)["properties"].end(); ++it) props[it.key()] = it.value();
      }
      if (part->contains("required")) {
        for (const auto& r : (*part)["required"]) required.push_back(r);
      }
    }
    merged["type"] = "object";
    merged["properties"] = props;
    merged["required"] = required;
    return merged;
  }

  std::string visit_object(const ojson& s, const std::string& path) {
    const std::string w = ws();
    std::vector<std::pair<std::string, std::string>> props;  // (key, value expression)
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail(path + "/required", "must be an array of property names");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) fail(path + "/required", "must be an array of property names");
        required.insert(r.get<std::string>());
      }
    }
    std::set<std::string> listed;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) fail(path + "/properties", "must be an object");
      for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it) {
        props.push_back({it.key(), visit(it.value(), path + "/properties/" + it.key())});
        listed.insert(it.key());
      }
    }
    for (const auto& r : required) {
      if (!listed.count(r)) props.push_back({r, any_value()});  // required but not described: any value
    }
    // Extra keys only for a map-like object without listed properties (a listed key typed again would break it).
    std::string extra;
    if (props.empty() && s.contains("additionalProperties")) {
      const ojson& ap = s["additionalProperties"];
      if (!(ap.is_boolean() && !ap.get<bool>())) {
        extra = any_string() + " \":\" " + w + " " + visit(ap, path + "/additionalProperties");
      }
    } else if (props.empty() && !s.contains("properties")) {
      extra = any_string() + " \":\" " + w + " " + any_value();  // {"type": "object"}: any object
    }
    const size_t n = props.size();
    // tail[i][first]: the members from i on; `first`: nothing written yet (no comma before the next one).
    std::vector<std::array<std::string, 2>> tail(n + 1);
    const std::string sep = "\",\" " + w + " ";
    tail[n][1] = extra.empty() ? "" : "( " + extra + " ( " + sep + extra + " )* )?";
    tail[n][0] = extra.empty() ? "" : "( " + sep + extra + " )*";
    for (size_t k = n; k-- > 0;) {
      const auto& [key, value] = props[k];
      const std::string member = lit(nlohmann::json(key).dump()) + " \":\" " + w + " " + value;
      for (int first = 0; first < 2; ++first) {
        const std::string take = (first ? "" : sep) + member + (tail[k + 1][0].empty() ? "" : " " + tail[k + 1][0]);
        std::string body = take;
        if (!required.count(key)) {
          const std::string& skip = tail[k + 1][first];
          body = "( " + take + (skip.empty() ? " )?" : " | " + skip + " )");
        }
        tail[k][first] = rule(fmt::format("{}-{}", path.empty() ? "obj" : path.substr(path.find_last_of('/') + 1), key),
                              body);
      }
    }
    return "( \"{\" " + w + " " + tail[0][1] + " \"}\" )";
  }

  static int64_t count(const ojson& s, const char* key, const std::string& path, Converter* self) {
    if (!s.contains(key)) return -1;
    if (!s[key].is_number_integer() || s[key].get<int64_t>() < 0) self->fail(path + "/" + key, "must be a non-negative integer");
    return s[key].get<int64_t>();
  }

  std::string visit_array(const ojson& s, const std::string& path) {
    const std::string w = ws();
    const std::string sep = "\",\" " + w + " ";
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) fail(path + "/prefixItems", "must be an array of schemas");
      for (size_t i = 0; i < s["prefixItems"].size(); ++i) {
        prefix.push_back(visit(s["prefixItems"][i], fmt::format("{}/prefixItems/{}", path, i)));
      }
    }
    std::string item = any_value();
    bool more = true;
    if (s.contains("items")) {
      const ojson& it = s["items"];
      if (it.is_boolean() && !it.get<bool>()) more = false;
      else if (it.is_array()) fail(path + "/items", "an array of schemas is prefixItems (draft 2020-12)");
      else item = visit(it, path + "/items");
    }
    const int64_t min = std::max<int64_t>(count(s, "minItems", path, this), 0);
    int64_t max = count(s, "maxItems", path, this);
    if (max >= 0 && max < min) fail(path + "/maxItems", "is below minItems");
    if (max > 10000) max = -1;
    if (min > 10000) fail(path + "/minItems", "above 10000 is not supported");
    const int64_t np = (int64_t)prefix.size();
    if (!more && min > np) fail(path + "/minItems", "needs more items than the schema allows");
    // from(k, first): elements k, k+1, ... once k are written (`first`: none yet, so no comma before the next).
    std::function<std::string(int64_t, bool)> from = [&](int64_t k, bool first) -> std::string {
      if (max >= 0 && k >= max) return "";
      const std::string comma = first ? "" : sep;
      if (k >= np) {
        if (!more) return "";
        const int64_t rmin = std::max<int64_t>(0, min - k);
        const int64_t rmax = max < 0 ? -1 : max - k;
        const std::string upto = rmax < 0 ? "," : fmt::format(",{}", rmax - 1);
        if (!first) {
          return rmax < 0 ? fmt::format("( {}{} ){{{},}}", sep, item, rmin)
                          : fmt::format("( {}{} ){{{},{}}}", sep, item, rmin, rmax);
        }
        if (rmin == 0) {
          return rmax == 1 ? "( " + item + " )?"
                           : fmt::format("( {} ( {}{} ){{0{}}} )?", item, sep, item, upto);
        }
        return fmt::format("{} ( {}{} ){{{}{}}}", item, sep, item, rmin - 1,
                           rmax < 0 ? std::string(",") : fmt::format(",{}", rmax - 1));
      }
      const std::string next = from(k + 1, false);
      const std::string take = comma + prefix[(size_t)k] + (next.empty() ? "" : " " + next);
      return k >= min ? "( " + take + " )?" : take;
    };
    const std::string body = from(0, true);
    return "( \"[\" " + w + " " + (body.empty() ? "" : body + " ") + "\"]\" )";
  }

  std::string visit_string(const ojson& s, const std::string& path) {
    const int64_t min = std::max<int64_t>(count(s, "minLength", path, this), 0);
    const int64_t max = count(s, "maxLength", path, this);
    if (max >= 0 && max < min) fail(path + "/maxLength", "is below minLength");
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) fail(path + "/pattern", "must be a string");
      if (s.contains("minLength") || s.contains("maxLength")) {
        fail(path, "pattern together with minLength/maxLength is not supported (put the length in the pattern)");
      }
      return "( \"\\\"\" " + regex_to_gbnf(s["pattern"].get<std::string>(), path + "/pattern") + " \"\\\"\" )";
    }
    if (s.contains("format") && s["format"].is_string()) {
      const std::string f = s["format"].get<std::string>();
      const std::string date = R"([0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ))";
      const std::string time =
          R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))";
      std::string body;
      if (f == "date") body = date;
      else if (f == "time") body = time;
      else if (f == "date-time") body = date + " \"T\" " + time;
      else if (f == "uuid") body = R"([0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12})";
      if (!body.empty()) {
        if (s.contains("minLength") || s.contains("maxLength")) fail(path, "format together with a length is not supported");
        return "( \"\\\"\" " + rule(f, body) + " \"\\\"\" )";
      }
      // Other formats are annotations (validators do not check them by default): a plain string.
    }
    if (min == 0 && max < 0) return any_string();
    if (min > 10000 || max > 10000) fail(path, "string lengths above 10000 are not supported");
    const std::string c = string_char();
    const std::string reps = max < 0 ? fmt::format("{{{},}}", min) : fmt::format("{{{},{}}}", min, max);
    return "( \"\\\"\" ( " + c + " )" + reps + " \"\\\"\" )";
  }

  // Bounds as integers: a fractional bound is rounded inwards, an exclusive one moved by one.
  std::string visit_number(const ojson& s, const std::string& path, bool integer) {
    auto bound = [&](const char* key) -> std::optional<double> {
      if (!s.contains(key)) return std::nullopt;
      if (!s[key].is_number()) fail(path + "/" + key, "must be a number");
      return s[key].get<double>();
    };
    std::optional<double> lo = bound("minimum"), hi = bound("maximum");
    if (auto x = bound("exclusiveMinimum")) lo = lo ? std::max(*lo, *x + 1e-300) : *x + 1e-300;
    if (auto x = bound("exclusiveMaximum")) hi = hi ? std::min(*hi, *x - 1e-300) : *x - 1e-300;
    std::optional<int64_t> L, H;
    const double limit = 1e15;
    if (lo) {
      double v = std::ceil(*lo);
      if (s.contains("exclusiveMinimum") && v == s["exclusiveMinimum"].get<double>()) v += 1;
      if (std::fabs(v) > limit) fail(path + "/minimum", "bounds beyond 1e15 are not supported");
      L = (int64_t)v;
    }
    if (hi) {
      double v = std::floor(*hi);
      if (s.contains("exclusiveMaximum") && v == s["exclusiveMaximum"].get<double>()) v -= 1;
      if (std::fabs(v) > limit) fail(path + "/maximum", "bounds beyond 1e15 are not supported");
      H = (int64_t)v;
    }
    if (!L && !H) return integer ? any_integer() : any_number();
    if (L && H && *L > *H) fail(path, "no integer-bounded value lies between minimum and maximum");
    const std::string frac = "( \".\" [0-9]{1,16} )?";
    const std::string zero_frac = "( \".\" \"0\"{1,16} )?";  // the bound itself: 3, 3.0, 3.00 ...
    std::vector<std::string> alts;
    // Non-negative values n[.f] with max(L, 0) <= value <= H.
    if (!H || *H >= 0) {
      const int64_t a = L ? std::max<int64_t>(*L, 0) : 0;
      if (integer) {
        alts.push_back(nonneg_range(a, H ? *H : -1));
      } else if (!H) {
        alts.push_back(nonneg_range(a, -1) + " " + frac);
      } else {
        if (*H > a) alts.push_back(nonneg_range(a, *H - 1) + " " + frac);
        alts.push_back(lit(std::to_string(*H)) + " " + zero_frac);
      }
    }
    // Negative values -(n[.f]) with L <= value <= min(H, -1) (integers) or < 0 (numbers).
    if (!L || *L < 0) {
      const int64_t top = L ? -*L : -1;  // n <= top (n == top: no fraction for numbers)
      if (integer) {
        const int64_t low = H && *H < 0 ? -*H : 1;
        if (!L || low <= top) alts.push_back("\"-\" " + nonneg_range(low, L ? top : -1));
      } else {
        const int64_t low = H && *H < 0 ? -*H : 0;
        if (!L) {
          alts.push_back("\"-\" " + nonneg_range(low, -1) + " " + frac);
        } else if (low <= top) {
          if (top > low) alts.push_back("\"-\" " + nonneg_range(low, top - 1) + " " + frac);
          else if (low > 0) {}  // only n == top remains
          if (top > 0) alts.push_back("\"-\" " + lit(std::to_string(top)) + " " + zero_frac);
        }
      }
    }
    if (alts.empty()) fail(path, "no value lies between minimum and maximum");
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
    return out + " )";
  }

  // A regular expression (ECMA-262 subset) as GBNF over the JSON text of the string's characters: '"', '\' and
  // control characters are written escaped; classes never produce them unescaped.
  std::string regex_to_gbnf(const std::string& re, const std::string& path) {
    size_t i = 0;
    auto bad = [&](const std::string& what) { fail(path, fmt::format("regular expression at {}: {}", i, what)); };
    if (i < re.size() && re[i] == '^') ++i;
    std::function<std::string()> alternatives;
    auto char_json = [&](uint32_t cp) -> std::string {
      std::string u;
      if (cp == '"') return lit("\\\"");
      if (cp == '\\') return lit("\\\\");
      if (cp == '\n') return lit("\\n");
      if (cp == '\t') return lit("\\t");
      if (cp == '\r') return lit("\\r");
      if (cp < 0x20) return lit(fmt::format("\\u{:04x}", cp));
      if (cp < 0x80) return lit(std::string(1, (char)cp));
      // UTF-8 of cp
      std::string b;
      if (cp < 0x800) {
        b += (char)(0xC0 | (cp >> 6));
        b += (char)(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        b += (char)(0xE0 | (cp >> 12));
        b += (char)(0x80 | ((cp >> 6) & 0x3F));
        b += (char)(0x80 | (cp & 0x3F));
      } else {
        b += (char)(0xF0 | (cp >> 18));
        b += (char)(0x80 | ((cp >> 12) & 0x3F));
        b += (char)(0x80 | ((cp >> 6) & 0x3F));
        b += (char)(0x80 | (cp & 0x3F));
      }
      return lit(b);
    };
    auto read_cp = [&]() -> uint32_t {
      const unsigned char c = (unsigned char)re[i];
      const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (len == 0 || i + (size_t)len > re.size()) bad("invalid UTF-8");
      uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
      for (int k = 1; k < len; ++k) cp = (cp << 6) | ((unsigned char)re[i + (size_t)k] & 0x3F);
      i += (size_t)len;
      return cp;
    };
    // GBNF class text for code-point ranges, without '"', '\' and controls (which would need escapes).
    auto class_text = [&](std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) -> std::string {
      std::vector<std::pair<uint32_t, uint32_t>> forbidden = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}};
      auto esc = [](uint32_t cp) { return fmt::format("\\U{:08X}", cp); };
      std::string out = negated ? "[^" : "[";
      if (negated) {
        for (auto [a, b] : ranges) out += esc(a) + "-" + esc(b);
        for (auto [a, b] : forbidden) out += esc(a) + "-" + esc(b);
        return out + "]";
      }
      // Positive: subtract the forbidden code points.
      std::string body;
      for (auto [a, b] : ranges) {
        std::vector<std::pair<uint32_t, uint32_t>> parts = {{a, b}};
        for (auto [fa, fb] : forbidden) {
          std::vector<std::pair<uint32_t, uint32_t>> next;
          for (auto [pa, pb] : parts) {
            if (fb < pa || fa > pb) {
              next.push_back({pa, pb});
              continue;
            }
            if (pa < fa) next.push_back({pa, fa - 1});
            if (pb > fb) next.push_back({fb + 1, pb});
          }
          parts = std::move(next);
        }
        for (auto [pa, pb] : parts) body += esc(pa) + "-" + esc(pb);
      }
      if (body.empty()) return "";
      return out + body + "]";
    };
    auto positive_class = [&](const std::vector<std::pair<uint32_t, uint32_t>>& ranges) -> std::string {
      // The plain part as a class, '"' and '\' (when in range) as their escapes.
      std::vector<std::string> alts;
      const std::string cls = class_text(ranges, false);
      if (!cls.empty()) alts.push_back(cls);
      for (uint32_t special : {(uint32_t)'"', (uint32_t)'\\', (uint32_t)'\n', (uint32_t)'\t'}) {
        for (auto [a, b] : ranges)
          if (special >= a && special <= b) {
            alts.push_back(char_json(special));
            break;
          }
      }
      if (alts.empty()) bad("a character class that matches nothing usable");
      if (alts.size() == 1) return alts[0];
      std::string out = "(";
      for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : " ") + alts[k];
      return out + " )";
    };
    auto escape_class = [&](char e, std::vector<std::pair<uint32_t, uint32_t>>& ranges) -> bool {
      switch (e) {
        case 'd': ranges.push_back({'0', '9'}); return true;
        case 'w':
          ranges.push_back({'a', 'z'});
          ranges.push_back({'A', 'Z'});
          ranges.push_back({'0', '9'});
          ranges.push_back({'_', '_'});
          return true;
        case 's': ranges.push_back({' ', ' '}); return true;
        default: return false;
      }
    };
    auto escaped_char = [&](char e) -> uint32_t {
      switch (e) {
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        case 'f': return '\f';
        case 'v': return '\v';
        case '0': return 0;
        default:
          if (std::isalnum((unsigned char)e)) bad(fmt::format("escape \\{} is not supported", e));
          return (uint32_t)(unsigned char)e;
      }
    };
    auto atom = [&]() -> std::string {
      const char c = re[i];
      if (c == '(') {
        ++i;
        if (i < re.size() && re[i] == '?') {
          if (i + 1 < re.size() && re[i + 1] == ':') i += 2;
          else if (i + 1 < re.size() && re[i + 1] == '<' && i + 2 < re.size() && re[i + 2] != '=' && re[i + 2] != '!') {
            const size_t close = re.find('>', i);
            if (close == std::string::npos) bad("unterminated group name");
            i = close + 1;
          } else {
            bad("lookaround assertions are not supported");
          }
        }
        std::string inner = alternatives();
        if (i >= re.size() || re[i] != ')') bad("expected )");
        ++i;
        return "( " + inner + " )";
      }
      if (c == '[') {
        ++i;
        bool negated = false;
        if (i < re.size() && re[i] == '^') {
          negated = true;
          ++i;
        }
        std::vector<std::pair<uint32_t, uint32_t>> ranges;
        bool first = true;
        while (true) {
          if (i >= re.size()) bad("unterminated character class");
          if (re[i] == ']' && !first) {
            ++i;
            break;
          }
          first = false;
          uint32_t lo;
          if (re[i] == '\\') {
            if (i + 1 >= re.size()) bad("unfinished escape");
            const char e = re[i + 1];
            i += 2;
            if (escape_class(e, ranges)) continue;
            if (e == 'D' || e == 'W' || e == 'S') bad("negated class escapes inside [] are not supported");
            lo = escaped_char(e);
          } else {
            lo = read_cp();
          }
          uint32_t hi = lo;
          if (i + 1 < re.size() && re[i] == '-' && re[i + 1] != ']') {
            ++i;
            if (re[i] == '\\') {
              if (i + 1 >= re.size()) bad("unfinished escape");
              hi = escaped_char(re[i + 1]);
              i += 2;
            } else {
              hi = read_cp();
            }
            if (hi < lo) bad("character range out of order");
          }
          ranges.push_back({lo, hi});
        }
        if (negated) return class_text(ranges, true);
        return positive_class(ranges);
      }
      if (c == '.') {
        ++i;
        return class_text({}, true);
      }
      if (c == '\\') {
        if (i + 1 >= re.size()) bad("unfinished escape");
        const char e = re[i + 1];
        i += 2;
        std::vector<std::pair<uint32_t, uint32_t>> ranges;
        if (escape_class(e, ranges)) return positive_class(ranges);
        if (e == 'D' || e == 'W' || e == 'S') {
          escape_class((char)std::tolower(e), ranges);
          return class_text(ranges, true);
        }
        if (e == 'b' || e == 'B') bad("word boundaries are not supported");
        if (std::isdigit((unsigned char)e) && e != '0') bad("back-references are not supported");
        return char_json(escaped_char(e));
      }
      if (c == '^' || c == '$') bad("anchors are only supported at the ends");
      if (c == '*' || c == '+' || c == '?' || c == '{') bad("nothing to repeat");
      return char_json(read_cp());
    };
    auto sequence = [&]() -> std::string {
      std::string out;
      while (i < re.size() && re[i] != '|' && re[i] != ')') {
        if (re[i] == '$' && i + 1 == re.size()) {
          ++i;
          break;
        }
        std::string a = atom();
        if (i < re.size() && (re[i] == '*' || re[i] == '+' || re[i] == '?' || re[i] == '{')) {
          std::string q;
          if (re[i] == '{') {
            const size_t close = re.find('}', i);
            if (close == std::string::npos) bad("unterminated {m,n}");
            q = re.substr(i, close - i + 1);
            for (char d : q.substr(1, q.size() - 2))
              if (!std::isdigit((unsigned char)d) && d != ',') bad("bad repetition " + q);
            i = close + 1;
          } else {
            q = std::string(1, re[i++]);
          }
          if (i < re.size() && re[i] == '?') ++i;  // lazy: same language
          a = "( " + a + " )" + q;
        }
        out += (out.empty() ? "" : " ") + a;
      }
      return out.empty() ? "\"\"" : out;
    };
    alternatives = [&]() -> std::string {
      std::string out = sequence();
      while (i < re.size() && re[i] == '|') {
        ++i;
        out += " | " + sequence();
      }
      return out;
    };
    std::string body = alternatives();
    if (i != re.size()) bad("unbalanced )");
    return "( " + body + " )";
  }

  const ojson& root_;
  std::map<std::string, std::string> rules_;
  std::vector<std::string> order_;
  std::map<std::string, std::string> by_body_;
  std::map<std::string, std::string> refs_;
};

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) { return Converter(schema).run(); }

std::string json_object_gbnf() {
  return json_schema_to_gbnf(nlohmann::ordered_json{{"type", "object"}});
}

}  // namespace rbee::llm::grammar
