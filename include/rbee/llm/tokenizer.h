// Tokenizers: byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM) and SentencePiece-style (Llama 2, Mistral, Gemma),
// loaded from GGUF metadata or from a Hugging Face tokenizer.json. The implementation lives in
// src/llm/tokenizer/ (one pipeline: added-token split -> normalizer -> pre-tokenizer -> BPE or SPM model).
//
// Errors: malformed files throw Error(Io) naming the file and the field, unsupported tokenizer kinds
// Error(Unsupported), invalid text or ids Error(InvalidArgument). A Tokenizer is immutable after loading and
// its const methods may be called from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rbee::gguf {
class File;
}

namespace rbee::llm {

using TokenId = int32_t;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // tokenizer.ggml.model "gpt2" (byte-level BPE; tokenizer.ggml.pre picks the pre-tokenizer regexes as
  // llama.cpp does) or "llama" (SentencePiece: score-ordered merges, byte fallback, dummy prefix); tokens,
  // scores, token_type, merges, *_token_id, add_bos_token/add_eos_token/add_space_prefix. Encodes as llama.cpp.
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& file);
  // tokenizer.json with a BPE model (byte-level, or SentencePiece-style with byte_fallback), plus, when present
  // beside it, tokenizer_config.json (bos/eos/pad/unk names, add_bos_token/add_eos_token) and
  // generation_config.json (eos_token_id list). Encodes as HF tokenizers.
  static std::unique_ptr<Tokenizer> from_hf_json(const std::string& tokenizer_json_path);

  // Text (valid UTF-8, else Error(InvalidArgument) with the byte offset) -> ids.
  // add_special: prepend BOS / append EOS as the model's config asks.
  // parse_special: text like "<|im_start|>" becomes the special token, otherwise it is plain text.
  // User-defined added tokens are always matched; the longest match wins.
  virtual std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special = true) const = 0;
  // Ids -> text (always valid UTF-8: invalid byte sequences become U+FFFD). skip_special drops control tokens
  // (BOS, EOS, ...). SentencePiece's dummy-prefix space is removed from the start. Ids outside the vocabulary
  // throw Error(InvalidArgument).
  virtual std::string decode(std::span<const TokenId> ids, bool skip_special = false) const = 0;
  // The raw bytes one token stands for (may be part of a UTF-8 character).
  virtual std::string token_bytes(TokenId id) const = 0;
  // The token's text as stored in the vocabulary ("Ġthe", "▁the", "<|im_end|>").
  virtual const std::string& token_text(TokenId id) const = 0;
  virtual int32_t vocab_size() const = 0;
  // Control (and unknown) tokens: matched only with parse_special, dropped by skip_special.
  virtual bool is_special(TokenId id) const = 0;

  virtual TokenId bos_id() const = 0;  // -1 when the model has none
  virtual TokenId eos_id() const = 0;
  // Every id that ends generation (EOS, EOT, <|im_end|>, ...).
  virtual std::vector<TokenId> eos_ids() const = 0;
  virtual TokenId pad_id() const = 0;
};

// Turns a stream of ids into text without ever emitting half a UTF-8 character: bytes of an incomplete
// character wait for the next token; flush() returns whatever is left (invalid bytes become U+FFFD).
// Each token contributes its token_bytes() (so SentencePiece's leading "▁" stays a space: generated text
// continues a prompt). With skip_special, control tokens contribute nothing. Ids out of range throw
// Error(InvalidArgument) and leave the decoder unchanged.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special = true);
  std::string push(TokenId id);
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace rbee::llm
