// The vocabulary shared by every tokenizer model: token texts as stored, their kinds and (SentencePiece) scores.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rbee/llm/tokenizer.h"

namespace rbee::llm {

// Token kinds, numbered as GGUF's tokenizer.ggml.token_type.
enum class TokenKind : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,      // BOS, EOS, <|im_start|>: matched in text only with parse_special, dropped by skip_special
  UserDefined = 4,  // added tokens that are always matched in text and decode to their text as is
  Unused = 5,
  Byte = 6,         // SentencePiece byte fallback "<0xAB>"
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

struct Vocab {
  std::vector<std::string> text;  // [n] token text as the vocabulary stores it
  std::vector<TokenKind> kind;    // [n]
  std::vector<float> score;       // [n] SentencePiece scores (all 0 for BPE)
  std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>> index;  // text -> lowest id

  int32_t size() const { return static_cast<int32_t>(text.size()); }
  // Adds a token at the next id.
  void push(std::string token, TokenKind k, float s = 0.0f) {
    index.emplace(token, size());
    text.push_back(std::move(token));
    kind.push_back(k);
    score.push_back(s);
  }
  TokenId find(std::string_view token) const {
    const auto it = index.find(token);
    return it == index.end() ? -1 : it->second;
  }
};

}  // namespace rbee::llm
