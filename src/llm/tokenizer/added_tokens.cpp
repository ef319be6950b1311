#include "llm/tokenizer/added_tokens.h"

#include <algorithm>

#include "rbee/core/error.h"

namespace rbee::llm {
namespace {

bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
bool is_word(char c) {
  const auto u = static_cast<uint8_t>(c);
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || u >= 0x80;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].content.empty()) continue;  // an empty token can never be matched
    by_first_byte_[static_cast<uint8_t>(tokens_[i].content[0])].push_back(static_cast<int32_t>(i));
  }
  for (auto& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&](int32_t a, int32_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

std::vector<Fragment> AddedTokenMatcher::split(std::string_view text, bool parse_special) const {
  std::vector<Fragment> out;
  size_t raw_begin = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* hit = nullptr;
    for (int32_t idx : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
      const AddedToken& t = tokens_[idx];
      if (t.special && !parse_special) continue;
      if (text.compare(pos, t.content.size(), t.content) != 0) continue;
      if (t.single_word) {
        const size_t e = pos + t.content.size();
        if ((pos > 0 && is_word(text[pos - 1])) || (e < text.size() && is_word(text[e]))) continue;
      }
      hit = &t;
      break;
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    size_t b = pos, e = pos + hit->content.size();
    if (hit->lstrip) {
      while (b > raw_begin && is_space(text[b - 1])) --b;
    }
    if (hit->rstrip) {
      while (e < text.size() && is_space(text[e])) ++e;
    }
    if (b > raw_begin) out.push_back({raw_begin, b, -1});
    out.push_back({b, e, hit->id});
    raw_begin = pos = e;
  }
  if (raw_begin < text.size()) out.push_back({raw_begin, text.size(), -1});
  return out;
}

}  // namespace rbee::llm
