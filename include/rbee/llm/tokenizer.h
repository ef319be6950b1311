// Tokenizers: byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM) and SentencePiece-style (Llama 2, Mistral, Gemma),
// loaded from GGUF metadata or from a Hugging Face tokenizer.json.
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

  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& file);
  // tokenizer.json (and, when present beside it, tokenizer_config.json for BOS/EOS/add_bos settings).
  static std::unique_ptr<Tokenizer> from_hf_json(const std::string& tokenizer_json_path);

  // Text -> ids. add_special: prepend BOS (and append EOS) as the model's config asks.
  // parse_special: text like "<|im_start|>" becomes the special token, otherwise it is plain text.
  virtual std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special = true) const = 0;
  // Ids -> text. skip_special drops control tokens (BOS, EOS, ...).
  virtual std::string decode(std::span<const TokenId> ids, bool skip_special = false) const = 0;
  // The raw bytes one token stands for (may be part of a UTF-8 character).
  virtual std::string token_bytes(TokenId id) const = 0;
  // The token's text as stored in the vocabulary ("Ġthe", "▁the", "<|im_end|>").
  virtual const std::string& token_text(TokenId id) const = 0;
  virtual int32_t vocab_size() const = 0;
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
