// GBNF text -> Rules: a recursive-descent parser over the text, code-point classes lowered to UTF-8 byte
// sequences, repetitions lowered to helper rules, then checks (every rule defined, a root, no left recursion).
#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>

#include "llm/grammar/rules.h"
#include "rbee/core/error.h"
#include "rbee/llm/grammar.h"

namespace rbee::llm::grammar {

namespace {

// Before flattening: an item matches a byte set or a rule.
struct Item {
  bool is_ref = false;
  int32_t rule = -1;
  ByteSet bytes;
};
using Seq = std::vector<Item>;
using Alts = std::vector<Seq>;

Item term(ByteSet b) {
  Item i;
  i.bytes = b;
  return i;
}
Item byte_item(int b) {
  ByteSet s;
  s.add(b);
  return term(s);
}
Item ref(int32_t rule) {
  Item i;
  i.is_ref = true;
  i.rule = rule;
  return i;
}

void utf8_encode(uint32_t cp, std::vector<uint8_t>& out) {
  if (cp < 0x80) {
    out.push_back((uint8_t)cp);
  } else if (cp < 0x800) {
    out.push_back((uint8_t)(0xC0 | (cp >> 6)));
    out.push_back((uint8_t)(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back((uint8_t)(0xE0 | (cp >> 12)));
    out.push_back((uint8_t)(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back((uint8_t)(0x80 | (cp & 0x3F)));
  } else {
    out.push_back((uint8_t)(0xF0 | (cp >> 18)));
    out.push_back((uint8_t)(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back((uint8_t)(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back((uint8_t)(0x80 | (cp & 0x3F)));
  }
}

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// A code-point range as byte-range sequences (the classic split: same encoded length, then aligned blocks).
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  std::vector<std::pair<uint32_t, uint32_t>> todo = {{lo, hi}};
  while (!todo.empty()) {
    auto [s, e] = todo.back();
    todo.pop_back();
    if (s > e) continue;
    if (s <= 0xDFFF && e >= 0xD800) {  // surrogates are not characters
      if (s < 0xD800) todo.push_back({s, 0xD7FF});
      if (e > 0xDFFF) todo.push_back({0xE000, e});
      continue;
    }
    bool split = false;
    for (uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu}) {
      if (s <= edge && e > edge) {
        todo.push_back({s, edge});
        todo.push_back({edge + 1, e});
        split = true;
        break;
      }
    }
    if (split) continue;
    const int n = utf8_length(s);
    for (int i = 1; i < n && !split; ++i) {
      const uint32_t m = (1u << (6 * i)) - 1;
      if ((s & ~m) != (e & ~m)) {
        if ((s & m) != 0) {
          todo.push_back({s, s | m});
          todo.push_back({(s | m) + 1, e});
          split = true;
        } else if ((e & m) != m) {
          todo.push_back({s, (e & ~m) - 1});
          todo.push_back({e & ~m, e});
          split = true;
        }
      }
    }
    if (split) continue;
    std::vector<uint8_t> a, b;
    utf8_encode(s, a);
    utf8_encode(e, b);
    std::vector<std::pair<uint8_t, uint8_t>> seq;
    for (size_t i = 0; i < a.size(); ++i) seq.push_back({a[i], b[i]});
    out.push_back(std::move(seq));
  }
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  std::unique_ptr<Rules> run() {
    skip_space(true);
    while (pos_ < text_.size()) {
      const std::string name = parse_name();
      if (name.empty()) fail("expected a rule name");
      skip_space(false);
      if (text_.substr(pos_, 3) != "::=") fail("expected ::= after the rule name \"" + name + "\"");
      pos_ += 3;
      skip_space(true);
      const int32_t id = rule_id(name);
      if (defined_.count(id)) fail("rule \"" + name + "\" is defined twice");
      defined_.insert(id);
      rules_[(size_t)id] = parse_alternatives(false);
      skip_space(true);
    }
    for (size_t i = 0; i < names_.size(); ++i) {
      if (!defined_.count((int32_t)i)) {
        pos_ = first_use_[i];
        fail("rule \"" + names_[i] + "\" is used but never defined");
      }
    }
    auto root = ids_.find("root");
    if (root == ids_.end()) {
      pos_ = text_.size();
      fail("no \"root\" rule");
    }
    check_left_recursion();
    return flatten(root->second);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    RBEE_THROW(ErrorCode::InvalidArgument, "grammar: line {}, column {}: {}", line, col, what);
  }

  // Spaces, tabs and comments; newlines too when `newlines` (a newline ends a rule unless inside parentheses).
  void skip_space(bool newlines) {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  static bool name_char(char c) { return std::isalnum((unsigned char)c) || c == '-' || c == '_'; }

  std::string parse_name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && name_char(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  int32_t rule_id(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const int32_t id = (int32_t)names_.size();
    ids_[name] = id;
    names_.push_back(name);
    rules_.emplace_back();
    first_use_.push_back(pos_);
    return id;
  }

  int32_t new_rule(Alts alts) {
    const int32_t id = rule_id(fmt::format("{}-{}", "_helper", names_.size()));
    defined_.insert(id);
    rules_[(size_t)id] = std::move(alts);
    return id;
  }

  // A decoded code point from a literal or class, with escapes.
  uint32_t parse_char() {
    if (pos_ >= text_.size()) fail("unexpected end of text");
    const unsigned char c = (unsigned char)text_[pos_];
    if (c == '\\') {
      ++pos_;
      if (pos_ >= text_.size()) fail("unfinished escape");
      const char e = text_[pos_++];
      auto hex = [&](int digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i) {
          if (pos_ >= text_.size() || !std::isxdigit((unsigned char)text_[pos_])) fail("bad hexadecimal escape");
          const char h = text_[pos_++];
          v = v * 16 + (uint32_t)(std::isdigit((unsigned char)h) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        return v;
      };
      switch (e) {
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        case '\\': return '\\';
        case '"': return '"';
        case '[': return '[';
        case ']': return ']';
        case '-': return '-';
        case '^': return '^';
        case '/': return '/';
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        default: fail(fmt::format("unknown escape \\{}", e));
      }
    }
    // One UTF-8 character of the grammar text.
    const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || pos_ + (size_t)len > text_.size()) fail("invalid UTF-8 in the grammar");
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < len; ++i) cp = (cp << 6) | ((unsigned char)text_[pos_ + (size_t)i] & 0x3F);
    pos_ += (size_t)len;
    return cp;
  }

  // A set of code-point ranges as an item: one byte set when all are ASCII, else a helper rule.
  Item class_item(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<uint32_t, uint32_t>> merged;
    for (auto r : ranges) {
      if (!merged.empty() && r.first <= merged.back().second + 1) merged.back().second = std::max(merged.back().second, r.second);
      else merged.push_back(r);
    }
    if (negated) {
      std::vector<std::pair<uint32_t, uint32_t>> inv;
      uint32_t next = 0;
      for (auto r : merged) {
        if (r.first > next) inv.push_back({next, r.first - 1});
        next = r.second + 1;
      }
      if (next <= 0x10FFFF) inv.push_back({next, 0x10FFFF});
      merged = std::move(inv);
    }
    ByteSet ascii;
    std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
    for (auto r : merged) {
      if (r.first > 0x10FFFF) continue;
      utf8_sequences(r.first, std::min<uint32_t>(r.second, 0x10FFFF), seqs);
    }
    Alts alts;
    for (const auto& s : seqs) {
      if (s.size() == 1) {
        ascii.add_range(s[0].first, s[0].second);
        continue;
      }
      Seq seq;
      for (auto [lo, hi] : s) {
        ByteSet b;
        b.add_range(lo, hi);
        seq.push_back(term(b));
      }
      alts.push_back(std::move(seq));
    }
    if (alts.empty()) {
      if (ascii.empty()) fail("the character class matches nothing");
      return term(ascii);
    }
    if (!ascii.empty()) alts.insert(alts.begin(), Seq{term(ascii)});
    return ref(new_rule(std::move(alts)));
  }

  Seq parse_primary() {
    const char c = text_[pos_];
    if (c == '"') {
      ++pos_;
      Seq seq;
      while (true) {
        if (pos_ >= text_.size() || text_[pos_] == '\n') fail("unterminated string literal");
        if (text_[pos_] == '"') {
          ++pos_;
          break;
        }
        std::vector<uint8_t> bytes;
        utf8_encode(parse_char(), bytes);
        for (uint8_t b : bytes) seq.push_back(byte_item(b));
      }
      return seq;
    }
    if (c == '[') {
      ++pos_;
      bool negated = false;
      if (pos_ < text_.size() && text_[pos_] == '^') {
        negated = true;
        ++pos_;
      }
      std::vector<std::pair<uint32_t, uint32_t>> ranges;
      while (true) {
        if (pos_ >= text_.size()) fail("unterminated character class");
        if (text_[pos_] == ']') {
          ++pos_;
          break;
        }
        const uint32_t lo = parse_char();
        uint32_t hi = lo;
        if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
          ++pos_;
          hi = parse_char();
          if (hi < lo) fail("character range out of order");
        }
        ranges.push_back({lo, hi});
      }
      return {class_item(std::move(ranges), negated)};
    }
    if (c == '.') {
      ++pos_;
      return {class_item({{0, 0x10FFFF}}, false)};
    }
    if (c == '(') {
      ++pos_;
      skip_space(true);
      Alts alts = parse_alternatives(true);
      if (pos_ >= text_.size() || text_[pos_] != ')') fail("expected )");
      ++pos_;
      if (alts.size() == 1) return alts[0];
      return {ref(new_rule(std::move(alts)))};
    }
    if (name_char(c)) return {ref(rule_id(parse_name()))};
    fail(fmt::format("unexpected character '{}'", c));
  }

  // `body` repeated between min and max times (max < 0: unbounded), as helper rules.
  Seq repeat(const Seq& body, int min, int max) {
    Seq out;
    for (int i = 0; i < min; ++i) out.insert(out.end(), body.begin(), body.end());
    if (max < 0) {
      // R ::= body R | (empty)
      const int32_t r = new_rule({});
      Seq loop = body;
      loop.push_back(ref(r));
      rules_[(size_t)r] = {loop, Seq{}};
      out.push_back(ref(r));
    } else if (max > min) {
      // Nested optionals: R_k ::= body R_{k-1} | (empty), no ambiguity about which copy matched.
      int32_t inner = -1;
      for (int k = 0; k < max - min; ++k) {
        Seq take = body;
        if (inner >= 0) take.push_back(ref(inner));
        inner = new_rule({take, Seq{}});
      }
      out.push_back(ref(inner));
    }
    return out;
  }

  int parse_int() {
    size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit((unsigned char)text_[pos_])) ++pos_;
    if (start == pos_) fail("expected a number");
    if (pos_ - start > 6) fail("repetition count too large");
    return std::stoi(std::string(text_.substr(start, pos_ - start)));
  }

  Seq parse_sequence(bool nested) {
    Seq seq;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '|' || c == ')' || (c == '\n' && !nested)) break;
      Seq item = parse_primary();
      // Repetition operators bind to the last primary.
      while (pos_ < text_.size() && (text_[pos_] == '*' || text_[pos_] == '+' || text_[pos_] == '?' || text_[pos_] == '{')) {
        const char op = text_[pos_++];
        if (op == '*') item = repeat(item, 0, -1);
        else if (op == '+') item = repeat(item, 1, -1);
        else if (op == '?') item = repeat(item, 0, 1);
        else {
          skip_space(false);
          const int min = parse_int();
          int max = min;
          skip_space(false);
          if (pos_ < text_.size() && text_[pos_] == ',') {
            ++pos_;
            skip_space(false);
            max = pos_ < text_.size() && std::isdigit((unsigned char)text_[pos_]) ? parse_int() : -1;
            skip_space(false);
          }
          if (pos_ >= text_.size() || text_[pos_] != '}') fail("expected } after a repetition count");
          ++pos_;
          if (max >= 0 && max < min) fail("repetition {m,n} needs m <= n");
          if (max > 10000 || min > 10000) fail("repetition count too large");
          item = repeat(item, min, max);
        }
      }
      seq.insert(seq.end(), item.begin(), item.end());
      skip_space(nested);
    }
    return seq;
  }

  Alts parse_alternatives(bool nested) {
    Alts alts;
    alts.push_back(parse_sequence(nested));
    while (pos_ < text_.size() && text_[pos_] == '|') {
      ++pos_;
      skip_space(true);
      alts.push_back(parse_sequence(nested));
    }
    return alts;
  }

  // A rule that can reach itself without consuming a byte would make the matcher loop: refused.
  void check_left_recursion() {
    const size_t n = rules_.size();
    std::vector<char> nullable(n, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Seq& s : rules_[r]) {
          bool all = true;
          for (const Item& i : s) all = all && i.is_ref && nullable[(size_t)i.rule];
          if (all) {
            nullable[r] = 1;
            changed = true;
            break;
          }
        }
      }
    }
    // Edges r -> s where s can come first in r (after nullable items).
    std::vector<std::vector<int32_t>> first(n);
    for (size_t r = 0; r < n; ++r) {
      for (const Seq& s : rules_[r]) {
        for (const Item& i : s) {
          if (!i.is_ref) break;
          first[r].push_back(i.rule);
          if (!nullable[(size_t)i.rule]) break;
        }
      }
    }
    std::vector<int> color(n, 0);
    std::function<void(int32_t)> visit = [&](int32_t r) {
      color[(size_t)r] = 1;
      for (int32_t s : first[(size_t)r]) {
        if (color[(size_t)s] == 1) {
          pos_ = first_use_[(size_t)s];
          fail("rule \"" + names_[(size_t)s] + "\" is left-recursive (it can reach itself without consuming text)");
        }
        if (color[(size_t)s] == 0) visit(s);
      }
      color[(size_t)r] = 2;
    };
    for (size_t r = 0; r < n; ++r)
      if (color[r] == 0) visit((int32_t)r);
  }

  std::unique_ptr<Rules> flatten(int32_t root) {
    auto out = std::make_unique<Rules>();
    out->root = root;
    out->names = names_;
    out->alts.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const Seq& s : rules_[r]) {
        out->alts[r].push_back((int32_t)out->elems.size());
        for (const Item& i : s) {
          Elem e;
          if (i.is_ref) {
            e.kind = Elem::Ref;
            e.rule = i.rule;
          } else {
            e.kind = Elem::Term;
            e.bytes = i.bytes;
          }
          out->elems.push_back(e);
        }
        out->elems.push_back(Elem{});
      }
    }
    return out;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::map<std::string, int32_t> ids_;
  std::vector<std::string> names_;
  std::vector<Alts> rules_;
  std::vector<size_t> first_use_;
  std::set<int32_t> defined_;
};

}  // namespace

Grammar::Grammar(std::unique_ptr<Rules> rules, std::string source) : rules_(std::move(rules)), source_(std::move(source)) {}
Grammar::~Grammar() = default;

std::shared_ptr<const Grammar> Grammar::parse(std::string_view gbnf) {
  RBEE_CHECK(gbnf.size() <= (1u << 20), "grammar: longer than 1 MiB");
  return std::make_shared<const Grammar>(Parser(gbnf).run(), std::string(gbnf));
}

}  // namespace rbee::llm::grammar
