#include "llm/chat/lexer.h"

#include <cstdlib>

#include "llm/chat/utf8.h"
#include "rbee/core/error.h"

namespace rbee::llm::jinja {

std::string normalize_source(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < raw.size() && raw[i + 1] == '\n') ++i;
    } else {
      out.push_back(raw[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

SourcePos source_pos(std::string_view source, size_t offset) {
  offset = std::min(offset, source.size());
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset; ++i) {
    if (source[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  const int column = static_cast<int>(utf8::length(source.substr(line_start, offset - line_start))) + 1;
  return {line, column};
}

void syntax_error(std::string_view source, size_t offset, const std::string& message) {
  const SourcePos p = source_pos(source, offset);
  RBEE_THROW(ErrorCode::InvalidArgument, "chat template syntax error at line {}, column {}: {}", p.line, p.column,
             message);
}

namespace {

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t tag = find_tag_start(pos_);
      if (tag == std::string_view::npos) {
        emit_text(std::string(src_.substr(pos_)), pos_);
        break;
      }
      const char kind = src_[tag + 1];
      const char sign = (tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+')) ? src_[tag + 2] : 0;
      size_t raw_body = 0;
      const bool raw = kind == '%' && match_raw_begin(tag + 2 + (sign ? 1 : 0), raw_body);
      emit_text(strip_before_tag(src_.substr(pos_, tag - pos_), sign, kind != '{'), pos_);
      size_t p = tag + 2 + (sign ? 1 : 0);
      if (raw) {
        lex_raw(tag, raw_body);
      } else if (kind == '#') {
        lex_comment(tag, p);
      } else {
        lex_tag(tag, p, kind == '%');
      }
    }
    tokens_.push_back(Token{TokenType::End, "", 0, 0.0, src_.size()});
    return std::move(tokens_);
  }

 private:
  bool starts(size_t p, std::string_view s) const { return src_.substr(p, s.size()) == s; }

  size_t find_tag_start(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string_view::npos;
  }

  // Skips Python whitespace (Unicode) from p; returns the new position.
  size_t skip_space(size_t p) const {
    while (p < src_.size()) {
      size_t q = p;
      if (!utf8::is_space(utf8::next(src_, q))) break;
      p = q;
    }
    return p;
  }

  // Applies `{%-` (rstrip everything) or lstrip_blocks (drop the indentation of a block/comment tag that starts
  // its line) to the text in front of a tag.
  std::string strip_before_tag(std::string_view text, char sign, bool block_or_comment) const {
    if (sign == '-') return utf8::strip(text, nullptr, false, true);
    if (sign != '+' && block_or_comment) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting_) {
        const std::string_view tail = text.substr(l_pos);
        bool all_space = !tail.empty();
        for (size_t i = 0; i < tail.size() && all_space;) all_space = utf8::is_space(utf8::next(tail, i));
        if (all_space) return std::string(text.substr(0, l_pos));
      }
    }
    return std::string(text);
  }

  void emit_text(std::string text, size_t offset) {
    if (!text.empty()) tokens_.push_back(Token{TokenType::Text, std::move(text), 0, 0.0, offset});
  }

  // Consumes a tag end at p: `+%}`, `-%}` + whitespace, or `%}` + one optional newline (trim_blocks).
  // `close` is "%}" or "#}". Returns the end position or npos.
  size_t match_block_end(size_t p, std::string_view close) const {
    if (src_[p] == '+' && starts(p + 1, close)) return p + 1 + close.size();
    if (src_[p] == '-' && starts(p + 1, close)) return skip_space(p + 1 + close.size());
    if (starts(p, close)) {
      size_t end = p + close.size();
      if (end < src_.size() && src_[end] == '\n') ++end;
      return end;
    }
    return std::string_view::npos;
  }

  void finish_tag(size_t end) {
    line_starting_ = end > 0 && src_[end - 1] == '\n';
    pos_ = end;
  }

  // `{% raw %}` (p is just after `{%` and its sign): sets body to where the raw text starts.
  bool match_raw_begin(size_t p, size_t& body) const {
    p = skip_space(p);
    if (!starts(p, "raw")) return false;
    p = skip_space(p + 3);
    if (starts(p, "-%}")) {
      body = skip_space(p + 3);
      return true;
    }
    if (starts(p, "%}")) {
      body = p + 2;
      return true;
    }
    return false;
  }

  void lex_raw(size_t tag, size_t body) {
    for (size_t i = body; i + 1 < src_.size(); ++i) {
      if (!starts(i, "{%")) continue;
      size_t p = i + 2;
      const char sign = (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ? src_[p] : 0;
      if (sign) ++p;
      p = skip_space(p);
      if (!starts(p, "endraw")) continue;
      p = skip_space(p + 6);
      if (p >= src_.size()) break;
      const size_t end = match_block_end(p, "%}");
      if (end == std::string_view::npos) continue;
      line_starting_ = body > 0 && src_[body - 1] == '\n';
      emit_text(strip_before_tag(src_.substr(body, i - body), sign, true), body);
      finish_tag(end);
      return;
    }
    syntax_error(src_, tag, "missing end of raw directive ({% endraw %})");
  }

  void lex_comment(size_t tag, size_t p) {
    for (size_t j = p; j < src_.size(); ++j) {
      const size_t end = match_block_end(j, "#}");
      if (end != std::string_view::npos) {
        finish_tag(end);
        return;
      }
    }
    syntax_error(src_, tag, "missing end of comment tag");
  }

  void lex_tag(size_t tag, size_t p, bool block) {
    tokens_.push_back(Token{block ? TokenType::BlockBegin : TokenType::VarBegin, "", 0, 0.0, tag});
    std::vector<char> balance;
    while (true) {
      if (p >= src_.size())
        syntax_error(src_, tag, block ? "unexpected end of template: '{%' tag is never closed with '%}'"
                                      : "unexpected end of template: '{{' is never closed with '}}'");
      {
        size_t q = p;
        if (utf8::is_space(utf8::next(src_, q))) {
          p = skip_space(p);
          continue;
        }
      }
      if (balance.empty()) {
        size_t end = std::string_view::npos;
        if (block) {
          end = match_block_end(p, "%}");
        } else if (starts(p, "-}}")) {
          end = skip_space(p + 3);
        } else if (starts(p, "}}")) {
          end = p + 2;
        }
        if (end != std::string_view::npos) {
          tokens_.push_back(Token{block ? TokenType::BlockEnd : TokenType::VarEnd, "", 0, 0.0, p});
          finish_tag(end);
          return;
        }
      }
      p = lex_token(p, balance);
    }
  }

  static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }

  // Digits with single underscores between them ("1_000"); returns the end or `p` when none.
  size_t scan_digits(size_t p, bool (*ok)(char)) const {
    if (p >= src_.size() || !ok(src_[p])) return p;
    size_t q = p + 1;
    while (q < src_.size()) {
      if (ok(src_[q])) {
        ++q;
      } else if (src_[q] == '_' && q + 1 < src_.size() && ok(src_[q + 1])) {
        q += 2;
      } else {
        break;
      }
    }
    return q;
  }

  // Float per Jinja: digits then (fraction? exponent | fraction), not directly after a '.'.
  size_t scan_float(size_t p) const {
    if (p > 0 && src_[p - 1] == '.') return p;
    const size_t int_end = scan_digits(p, is_digit);
    size_t q = int_end;
    bool fraction = false;
    if (q < src_.size() && src_[q] == '.') {
      const size_t f = scan_digits(q + 1, is_digit);
      if (f > q + 1) {
        q = f;
        fraction = true;
      }
    }
    if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t e = q + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      const size_t d = scan_digits(e, is_digit);
      if (d > e) return d;
    }
    return fraction ? q : p;
  }

  size_t lex_number(size_t p) {
    const size_t fend = scan_float(p);
    if (fend > p) {
      std::string text;
      for (size_t i = p; i < fend; ++i)
        if (src_[i] != '_') text.push_back(src_[i]);
      tokens_.push_back(Token{TokenType::Float, text, 0, std::strtod(text.c_str(), nullptr), p});
      return fend;
    }
    int base = 10;
    size_t digits = p;
    size_t end = p;
    auto hex = [](char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); };
    auto oct = [](char c) { return c >= '0' && c <= '7'; };
    auto bin = [](char c) { return c == '0' || c == '1'; };
    const char prefix = p + 1 < src_.size() ? static_cast<char>(src_[p + 1] | 0x20) : 0;
    if (src_[p] == '0' && (prefix == 'x' || prefix == 'o' || prefix == 'b')) {
      base = prefix == 'x' ? 16 : (prefix == 'o' ? 8 : 2);
      bool (*ok)(char) = base == 16 ? +hex : (base == 8 ? +oct : +bin);
      digits = p + 2;
      size_t q = digits;  // Jinja allows an underscore right after the prefix
      if (q < src_.size() && src_[q] == '_') ++q;
      end = scan_digits(q, ok);
      if (end == q) syntax_error(src_, p, "invalid integer literal");
    } else if (src_[p] == '0') {
      end = p + 1;
      while (end < src_.size() && (src_[end] == '0' || (src_[end] == '_' && end + 1 < src_.size() && src_[end + 1] == '0')))
        ++end;
    } else {
      end = scan_digits(p, is_digit);
    }
    uint64_t value = 0;
    for (size_t i = digits; i < end; ++i) {
      if (src_[i] == '_') continue;
      const char c = static_cast<char>(src_[i] | 0x20);
      const uint64_t d = is_digit(src_[i]) ? static_cast<uint64_t>(src_[i] - '0') : static_cast<uint64_t>(c - 'a' + 10);
      if (value > (static_cast<uint64_t>(INT64_MAX) - d) / static_cast<uint64_t>(base))
        syntax_error(src_, p, "integer literal does not fit in 64 bits");
      value = value * static_cast<uint64_t>(base) + d;
    }
    tokens_.push_back(Token{TokenType::Integer, std::string(src_.substr(p, end - p)), static_cast<int64_t>(value), 0.0, p});
    return end;
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c = static_cast<char>(c | 0x20);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  }

  // Python's unicode-escape decoding of a string literal body that starts at `start` in the source.
  std::string decode_string(std::string_view body, size_t start) const {
    std::string out;
    char32_t pending_high = 0;  // a \uD8xx waiting for its low surrogate
    auto put = [&](char32_t cp, size_t at) {
      if (pending_high) {
        if (cp >= 0xDC00 && cp <= 0xDFFF) {
          utf8::append(out, 0x10000 + ((pending_high - 0xD800) << 10) + (cp - 0xDC00));
          pending_high = 0;
          return;
        }
        syntax_error(src_, at, "string literal holds an unpaired surrogate escape");
      }
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        pending_high = cp;
      } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        syntax_error(src_, at, "string literal holds an unpaired surrogate escape");
      } else {
        utf8::append(out, cp);
      }
    };
    for (size_t i = 0; i < body.size();) {
      const size_t at = start + i;
      if (body[i] != '\\' || i + 1 >= body.size()) {
        if (pending_high) syntax_error(src_, at, "string literal holds an unpaired surrogate escape");
        const size_t from = i;
        utf8::next(body, i);
        out.append(body.substr(from, i - from));
        continue;
      }
      const char e = body[i + 1];
      i += 2;
      switch (e) {
        case '\n': break;
        case '\\': put('\\', at); break;
        case '\'': put('\'', at); break;
        case '"': put('"', at); break;
        case 'a': put('\a', at); break;
        case 'b': put('\b', at); break;
        case 'f': put('\f', at); break;
        case 'n': put('\n', at); break;
        case 'r': put('\r', at); break;
        case 't': put('\t', at); break;
        case 'v': put('\v', at); break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          char32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            const int h = i + k < body.size() ? hex_value(body[i + k]) : -1;
            if (h < 0) syntax_error(src_, at, fmt::format("truncated \\{} escape in string literal", e));
            cp = cp * 16 + static_cast<char32_t>(h);
          }
          if (cp > 0x10FFFF) syntax_error(src_, at, "\\U escape is past U+10FFFF");
          i += n;
          put(cp, at);
          break;
        }
        case 'N':
          syntax_error(src_, at, "\\N{...} escapes are not supported in chat templates");
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && i < body.size() && body[i] >= '0' && body[i] <= '7'; ++k, ++i)
              cp = cp * 8 + static_cast<char32_t>(body[i] - '0');
            put(cp, at);
          } else {
            if (pending_high) syntax_error(src_, at, "string literal holds an unpaired surrogate escape");
            out.push_back('\\');  // unknown escapes keep their backslash, as in Python
            i -= 1;
          }
      }
    }
    if (pending_high) syntax_error(src_, start + body.size(), "string literal holds an unpaired surrogate escape");
    return out;
  }

  size_t lex_string(size_t p) {
    const char quote = src_[p];
    size_t q = p + 1;
    while (q < src_.size() && src_[q] != quote) q += (src_[q] == '\\') ? 2 : 1;
    if (q >= src_.size()) syntax_error(src_, p, "unterminated string literal");
    tokens_.push_back(Token{TokenType::String, decode_string(src_.substr(p + 1, q - p - 1), p + 1), 0, 0.0, p});
    return q + 1;
  }

  size_t lex_token(size_t p, std::vector<char>& balance) {
    const char c = src_[p];
    if (is_digit(c)) return lex_number(p);
    if (is_name_start(c)) {
      size_t q = p + 1;
      while (q < src_.size() && (is_name_start(src_[q]) || is_digit(src_[q]))) ++q;
      tokens_.push_back(Token{TokenType::Name, std::string(src_.substr(p, q - p)), 0, 0.0, p});
      return q;
    }
    if (c == '\'' || c == '"') return lex_string(p);
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (starts(p, op)) {
        tokens_.push_back(Token{TokenType::Operator, std::string(op), 0, 0.0, p});
        return p + 2;
      }
    }
    static constexpr std::string_view kOne = "+-/*%~[](){}><=.:|,;";
    if (kOne.find(c) == std::string_view::npos) {
      size_t q = p;
      const char32_t cp = utf8::next(src_, q);
      std::string shown;
      if (cp >= 0x110000 || cp < 0x20) {  // keep the message valid UTF-8 and printable
        shown = fmt::format("\\x{:02x}", static_cast<unsigned char>(src_[p]));
      } else {
        utf8::append(shown, cp);
      }
      syntax_error(src_, p, fmt::format("unexpected character '{}'", shown));
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) syntax_error(src_, p, fmt::format("unexpected '{}'", c));
      if (balance.back() != c) syntax_error(src_, p, fmt::format("unexpected '{}', expected '{}'", c, balance.back()));
      balance.pop_back();
    }
    tokens_.push_back(Token{TokenType::Operator, std::string(1, c), 0, 0.0, p});
    return p + 1;
  }

  std::string_view src_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace rbee::llm::jinja
