#include "llm/tokenizer/tokenizer_impl.h"

#include <algorithm>
#include <optional>

#include "rbee/text/byte_level.h"
#include "llm/tokenizer/spm.h"
#include "rbee/text/utf8.h"
#include "rbee/core/error.h"

namespace rbee::llm {
namespace {

// "<0xAB>" -> 0xAB, or -1.
int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = t[i];
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

class TokenizerImpl final : public Tokenizer {
 public:
  explicit TokenizerImpl(TokenizerSpec spec) : spec_(std::move(spec)), matcher_(spec_.added) {
    const int32_t n = spec_.vocab.size();
    RBEE_CHECK(n > 0, "tokenizer ({}): empty vocabulary", spec_.source);
    RBEE_CHECK(static_cast<int32_t>(spec_.vocab.kind.size()) == n && static_cast<int32_t>(spec_.vocab.score.size()) == n,
               "tokenizer ({}): token kinds/scores do not match the {} tokens", spec_.source, n);
    auto check_id = [&](TokenId id, const char* what) {
      RBEE_CHECK(id >= -1 && id < n, "tokenizer ({}): {} id {} outside the vocabulary of {} tokens", spec_.source,
                 what, id, n);
    };
    check_id(spec_.bos_id, "BOS");
    check_id(spec_.eos_id, "EOS");
    check_id(spec_.pad_id, "PAD");
    check_id(spec_.unk_id, "UNK");
    for (TokenId id : spec_.extra_eog) check_id(id, "end-of-generation");
    for (const AddedToken& t : spec_.added) {
      check_id(t.id, "added token");
      RBEE_CHECK(t.id >= 0, "tokenizer ({}): added token '{}' has no id", spec_.source, t.content);
    }
    RBEE_CHECK(!(spec_.add_bos && spec_.bos_id < 0), "tokenizer ({}): add_bos is set but there is no BOS token",
               spec_.source);
    RBEE_CHECK(!(spec_.add_eos && spec_.eos_id < 0), "tokenizer ({}): add_eos is set but there is no EOS token",
               spec_.source);
    for (TokenId i = 0; i < n; ++i) {
      RBEE_CHECK(text::utf8::find_invalid(spec_.vocab.text[i]) == std::string_view::npos,
                 "tokenizer ({}): token {} is not valid UTF-8", spec_.source, i);
    }

    if (spec_.model == ModelKind::Bpe) {
      spec_.bpe.unk_id = spec_.bpe_drop_unknown ? -1 : spec_.unk_id;
      bpe_.emplace(spec_.vocab, spec_.merges, spec_.bpe);
    } else {
      spm_.emplace(spec_.vocab, spec_.unk_id);
    }
    spec_.merges.clear();
    spec_.merges.shrink_to_fit();

    // Precompute every token's bytes; decoding is then concatenation.
    bytes_.resize(static_cast<size_t>(n));
    for (TokenId i = 0; i < n; ++i) bytes_[i] = compute_bytes(i);

    eog_.clear();
    for (TokenId id : {spec_.eos_id}) {
      if (id >= 0) eog_.push_back(id);
    }
    for (TokenId id : spec_.extra_eog) {
      if (std::find(eog_.begin(), eog_.end(), id) == eog_.end()) eog_.push_back(id);
    }
  }

  std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const override {
    const size_t bad = text::utf8::find_invalid(text);
    RBEE_CHECK(bad == std::string_view::npos, "tokenizer: input text is not valid UTF-8 (byte {} at offset {})",
               bad == std::string_view::npos ? 0 : static_cast<int>(static_cast<uint8_t>(text[bad])), bad);
    std::vector<TokenId> out;
    out.reserve(text.size() / 3 + 4);
    if (add_special && spec_.add_bos) out.push_back(spec_.bos_id);
    for (const Fragment& f : matcher_.split(text, parse_special)) {
      if (f.token >= 0) {
        out.push_back(f.token);
      } else {
        encode_raw(text.substr(f.begin, f.end - f.begin), f.begin == 0, out);
      }
    }
    if (add_special && spec_.add_eos) out.push_back(spec_.eos_id);
    return out;
  }

  std::string decode(std::span<const TokenId> ids, bool skip_special) const override {
    std::string bytes;
    for (size_t i = 0; i < ids.size(); ++i) {
      check_id(ids[i], i);
      if (skip_special && is_special(ids[i])) continue;
      bytes += bytes_[ids[i]];
    }
    if (spec_.decoder.strip_leading_space && !bytes.empty() && bytes[0] == ' ') bytes.erase(0, 1);
    return text::utf8::sanitize(bytes);
  }

  std::string token_bytes(TokenId id) const override {
    check_id(id, 0);
    return bytes_[id];
  }

  const std::string& token_text(TokenId id) const override {
    check_id(id, 0);
    return spec_.vocab.text[id];
  }

  int32_t vocab_size() const override { return spec_.vocab.size(); }

  bool is_special(TokenId id) const override {
    check_id(id, 0);
    const TokenKind k = spec_.vocab.kind[id];
    return k == TokenKind::Control || k == TokenKind::Unknown;
  }

  TokenId bos_id() const override { return spec_.bos_id; }
  TokenId eos_id() const override { return spec_.eos_id; }
  std::vector<TokenId> eos_ids() const override { return eog_; }
  TokenId pad_id() const override { return spec_.pad_id; }

 private:
  void check_id(TokenId id, size_t position) const {
    RBEE_CHECK(id >= 0 && id < spec_.vocab.size(), "tokenizer: token id {} (position {}) outside the vocabulary [0, {})",
               id, position, spec_.vocab.size());
  }

  void encode_raw(std::string_view raw, bool at_text_start, std::vector<TokenId>& out) const {
    const std::string normalized = spec_.normalizer.empty() ? std::string(raw) : spec_.normalizer.run(raw);
    if (spm_) {
      // SentencePiece merges across the whole fragment (no pre-tokenizer), as llama.cpp does.
      if (spec_.pre_tokenizer.empty()) {
        spm_->tokenize(normalized, out);
        return;
      }
      for (const std::string& piece : spec_.pre_tokenizer.run(normalized, at_text_start)) spm_->tokenize(piece, out);
      return;
    }
    if (spec_.pre_tokenizer.empty()) {
      bpe_->tokenize(normalized, out);
      return;
    }
    for (const std::string& piece : spec_.pre_tokenizer.run(normalized, at_text_start)) bpe_->tokenize(piece, out);
  }

  std::string compute_bytes(TokenId id) const {
    const std::string& t = spec_.vocab.text[id];
    const TokenKind k = spec_.vocab.kind[id];
    if (k == TokenKind::Control || k == TokenKind::UserDefined || k == TokenKind::Unknown) return t;
    const DecoderSpec& d = spec_.decoder;
    if (d.byte_fallback || k == TokenKind::Byte) {
      const int b = parse_byte_token(t);
      if (b >= 0) return std::string(1, static_cast<char>(b));
    }
    if (d.byte_level) return text::byte_level::decode(t);
    if (d.space_marker.empty()) return t;
    std::string out;
    size_t pos = 0;
    while (true) {
      const size_t hit = t.find(d.space_marker, pos);
      if (hit == std::string::npos) break;
      out.append(t, pos, hit - pos);
      out += ' ';
      pos = hit + d.space_marker.size();
    }
    out.append(t, pos, std::string::npos);
    return out;
  }

  TokenizerSpec spec_;
  AddedTokenMatcher matcher_;
  std::optional<BpeModel> bpe_;
  std::optional<SpmModel> spm_;
  std::vector<std::string> bytes_;  // [vocab] what each token decodes to
  std::vector<TokenId> eog_;
};

}  // namespace

std::vector<TokenId> known_eog_tokens(const Vocab& vocab) {
  static constexpr std::string_view kNames[] = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>",
      "<|end_of_text|>", "<｜end▁of▁sentence｜>", "<|return|>", "<|call|>"};
  std::vector<TokenId> ids;
  for (std::string_view name : kNames) {
    const TokenId id = vocab.find(name);
    if (id >= 0 && vocab.kind[id] == TokenKind::Control) ids.push_back(id);
  }
  return ids;
}

std::unique_ptr<Tokenizer> make_tokenizer(TokenizerSpec spec) {
  return std::make_unique<TokenizerImpl>(std::move(spec));
}

}  // namespace rbee::llm
