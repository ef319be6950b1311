// Byte-pair encoding by merge rank (GPT-2, Llama 3, Qwen2, SmolLM, and Hugging Face BPE models in general):
// a piece starts as its characters, and the adjacent pair whose merge is listed earliest is merged until no
// listed pair is left (ties go to the leftmost pair).
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "llm/tokenizer/vocab.h"

namespace rbee::llm {

struct BpeOptions {
  bool byte_fallback = false;  // characters missing from the vocabulary become <0xXX> byte tokens
  bool ignore_merges = false;  // a piece that is itself a token is emitted whole (Llama 3)
  TokenId unk_id = -1;         // for characters that are neither tokens nor byte-fallback-able (-1: dropped)
  bool fuse_unk = false;       // consecutive unknowns become one unk token
};

class BpeModel {
 public:
  // merges: pairs of token texts in priority order. Throws Error(InvalidArgument) naming the merge when a
  // side or the merged text is not in the vocabulary.
  BpeModel(const Vocab& vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options);

  // Appends the ids of one pre-tokenized piece (already in the vocabulary's alphabet).
  void tokenize(std::string_view piece, std::vector<TokenId>& out) const;

  size_t merge_count() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    TokenId result;
  };
  static uint64_t key(TokenId a, TokenId b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const Vocab& vocab_;
  BpeOptions options_;
  std::unordered_map<uint64_t, Merge> merges_;
  TokenId byte_ids_[256];  // <0xXX> ids for byte fallback, -1 where absent
};

}  // namespace rbee::llm
