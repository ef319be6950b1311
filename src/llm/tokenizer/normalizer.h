// Normalization applied to each text segment (between added tokens) before pre-tokenization, as Hugging Face's
// normalizers do: Unicode normal forms, Prepend, Replace, Lowercase, Strip. SentencePiece's whitespace
// escaping and dummy prefix are Replace(" ", "▁") and Prepend("▁").
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rbee/text/regex.h"
#include "rbee/text/unicode.h"

namespace rbee::llm {

using text::UnicodeForm;

class Normalizer {
 public:
  void add_unicode(UnicodeForm form);
  // Prepends `prefix` to a non-empty segment.
  void add_prepend(std::string prefix);
  void add_replace_literal(std::string from, std::string to);
  void add_replace_regex(std::string pattern, std::string to);
  void add_strip(bool left, bool right);

  bool empty() const { return steps_.empty(); }
  std::string run(std::string_view text) const;

 private:
  struct Step {
    enum class Kind { Unicode, Prepend, ReplaceLiteral, ReplaceRegex, Strip } kind;
    UnicodeForm form = UnicodeForm::NFC;
    std::string a, b;
    std::shared_ptr<const text::Regex> regex;
    bool left = false, right = false;
  };
  std::vector<Step> steps_;
};

}  // namespace rbee::llm
