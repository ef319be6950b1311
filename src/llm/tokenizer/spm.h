// SentencePiece-style BPE by score (Llama 2, Mistral, Gemma, Phi-3 as GGUF stores them): a piece starts as
// its characters; the adjacent pair whose concatenation is a token with the highest score is merged until
// no pair forms a token (ties go to the leftmost pair). A final symbol that is not a token is split back
// along its merges, and characters outside the vocabulary fall back to <0xXX> byte tokens (or unk).
#pragma once

#include <string_view>
#include <vector>

#include "llm/tokenizer/vocab.h"

namespace rbee::llm {

class SpmModel {
 public:
  SpmModel(const Vocab& vocab, TokenId unk_id);

  // Appends the ids of `text`, which is already normalized (spaces escaped as "▁", dummy prefix added).
  void tokenize(std::string_view text, std::vector<TokenId>& out) const;

 private:
  void emit_bytes(std::string_view text, std::vector<TokenId>& out) const;
  const Vocab& vocab_;
  TokenId unk_id_;
  TokenId byte_ids_[256];
};

}  // namespace rbee::llm
