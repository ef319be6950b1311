// Added (special and user-defined) tokens: they are cut out of the raw text before normalization and
// pre-tokenization, so "<|im_start|>" stays one token instead of being spelled out by the model.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "rbee/llm/tokenizer.h"

namespace rbee::llm {

struct AddedToken {
  TokenId id = -1;
  std::string content;
  bool special = false;      // matched only when parse_special; is_special() and skip_special apply to it
  bool lstrip = false;       // swallows the whitespace before it
  bool rstrip = false;       // swallows the whitespace after it
  bool single_word = false;  // only matched when not inside a word
};

// A piece of the input: either raw text [begin, end) or an added token.
struct Fragment {
  size_t begin = 0, end = 0;
  TokenId token = -1;  // -1 for raw text
};

class AddedTokenMatcher {
 public:
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  // Splits `text` into raw and token fragments. At each position the longest matching token wins (the
  // leftmost-longest rule of Hugging Face's added vocabulary and llama.cpp's partitioning). Special tokens
  // are only matched when parse_special; user-defined ones always.
  std::vector<Fragment> split(std::string_view text, bool parse_special) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  std::vector<AddedToken> tokens_;
  std::array<std::vector<int32_t>, 256> by_first_byte_;  // indices into tokens_, longest first
};

}  // namespace rbee::llm
