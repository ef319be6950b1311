// Lexer for the Jinja subset: splits a template into text and the tokens of {{ }} and {% %} tags.
//
// Whitespace handling follows Jinja with Hugging Face's settings (trim_blocks=True, lstrip_blocks=True,
// keep_trailing_newline=False): `{%-`/`-%}` strip all whitespace on that side; a block or comment tag alone on
// its line loses the indentation before it; the first newline after `%}` or `#}` is dropped; `{%+`/`+%}` turn
// those off. Comments vanish here and `{% raw %}` bodies come out as text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rbee::llm::jinja {

enum class TokenType { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Integer, Float, Operator, End };

struct Token {
  TokenType type;
  std::string value;  // text data, name, decoded string literal, or operator symbol
  int64_t int_value = 0;
  double float_value = 0.0;
  size_t offset = 0;  // byte offset in the normalized source, for error positions
};

// Jinja's source preparation: "\r\n" and "\r" become "\n", and one trailing newline is removed.
std::string normalize_source(std::string_view raw);

// Tokens of a normalized source, ending with an End token. Throws Error(InvalidArgument) with line and column.
std::vector<Token> tokenize(std::string_view source);

// 1-based line and column (in code points) of a byte offset.
struct SourcePos {
  int line;
  int column;
};
SourcePos source_pos(std::string_view source, size_t offset);

// Throws Error(InvalidArgument): "chat template syntax error at line L, column C: <message>".
[[noreturn]] void syntax_error(std::string_view source, size_t offset, const std::string& message);

}  // namespace rbee::llm::jinja
