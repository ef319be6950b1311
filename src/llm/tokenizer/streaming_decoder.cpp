// StreamingDecoder: token-by-token text for streaming responses. A token may end inside a UTF-8 character
// (byte-level BPE splits emoji and CJK across tokens; SentencePiece byte fallback emits one byte per token),
// so the bytes of an unfinished character wait in pending_ until the token that completes it arrives.
#include "rbee/text/utf8.h"
#include "rbee/llm/tokenizer.h"

namespace rbee::llm {

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string StreamingDecoder::push(TokenId id) {
  // token_bytes validates the id (Error(InvalidArgument) when out of range) before anything changes.
  std::string bytes = tokenizer_.token_bytes(id);
  if (skip_special_ && tokenizer_.is_special(id)) return {};
  pending_ += bytes;
  const size_t ready = text::utf8::complete_prefix(pending_);
  std::string out = text::utf8::sanitize(std::string_view(pending_).substr(0, ready));
  pending_.erase(0, ready);
  return out;
}

std::string StreamingDecoder::flush() {
  std::string out = text::utf8::sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace rbee::llm
