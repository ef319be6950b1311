// Tokenizer::from_gguf: the tokenizer that llama.cpp builds from a GGUF file's tokenizer.ggml.* metadata.
//   model "gpt2":  byte-level BPE by merge rank; `pre` names the pre-tokenizer regexes (pre_tokenizer.h)
//   model "llama": SentencePiece BPE by token score, "▁" for spaces, dummy prefix, <0xXX> byte fallback
// Control, user-defined and unknown tokens are cut out of the text before the model sees it (control and
// unknown ones only with parse_special).
#include <algorithm>

#include "llm/tokenizer/tokenizer_impl.h"
#include "rbee/core/error.h"
#include "rbee/core/log.h"
#include "rbee/formats/gguf.h"

namespace rbee::llm {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // "▁"

bool is_llama3_family(std::string_view pre) {
  return pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "falcon3" || pre == "dbrx" ||
         pre == "smaug-bpe" || pre == "pixtral";
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& file) {
  const std::string source = file.path();
  auto fail_if = [&](bool bad, std::string_view key, const std::string& why) {
    RBEE_CHECK_CODE(!bad, ErrorCode::Io, "tokenizer ({}): {}: {}", source, key, why);
  };

  const auto model = file.get_string("tokenizer.ggml.model");
  RBEE_CHECK_CODE(model.has_value(), ErrorCode::NotFound, "tokenizer ({}): no tokenizer.ggml.model in the file",
                  source);
  RBEE_CHECK_CODE(*model == "gpt2" || *model == "llama", ErrorCode::Unsupported,
                  "tokenizer ({}): tokenizer.ggml.model '{}' is not supported (gpt2 and llama are)", source, *model);
  const bool spm = *model == "llama";
  const std::string pre = file.get_string("tokenizer.ggml.pre").value_or("default");

  TokenizerSpec spec;
  spec.source = source;
  std::vector<std::string> tokens = file.get_string_array("tokenizer.ggml.tokens");
  const std::vector<int64_t> types = file.get_int_array("tokenizer.ggml.token_type");
  const std::vector<double> scores = file.get_float_array("tokenizer.ggml.scores");
  fail_if(tokens.empty(), "tokenizer.ggml.tokens", "missing or empty");
  fail_if(tokens.size() >= (1u << 31), "tokenizer.ggml.tokens", "too many tokens");
  fail_if(!types.empty() && types.size() != tokens.size(), "tokenizer.ggml.token_type",
          fmt::format("{} entries for {} tokens", types.size(), tokens.size()));
  fail_if(!scores.empty() && scores.size() != tokens.size(), "tokenizer.ggml.scores",
          fmt::format("{} entries for {} tokens", scores.size(), tokens.size()));
  for (size_t i = 0; i < tokens.size(); ++i) {
    TokenKind kind = TokenKind::Normal;
    if (!types.empty()) {
      fail_if(types[i] < 0 || types[i] > 6, "tokenizer.ggml.token_type", fmt::format("token {} has type {}", i, types[i]));
      kind = static_cast<TokenKind>(types[i]);
      if (kind == TokenKind::Undefined) kind = TokenKind::Normal;
    }
    spec.vocab.push(std::move(tokens[i]), kind, scores.empty() ? 0.0f : static_cast<float>(scores[i]));
  }
  const int32_t n = spec.vocab.size();

  auto id_key = [&](const char* key, TokenId fallback) -> TokenId {
    const auto v = file.get_int(key);
    if (!v) return fallback < n ? fallback : -1;
    fail_if(*v < -1 || *v >= n, key, fmt::format("id {} outside the vocabulary of {} tokens", *v, n));
    return static_cast<TokenId>(*v);
  };
  // llama.cpp's defaults for SentencePiece files that predate these keys.
  spec.bos_id = id_key("tokenizer.ggml.bos_token_id", spm ? 1 : -1);
  spec.eos_id = id_key("tokenizer.ggml.eos_token_id", spm ? 2 : -1);
  spec.unk_id = id_key("tokenizer.ggml.unknown_token_id", spm ? 0 : -1);
  spec.pad_id = id_key("tokenizer.ggml.padding_token_id", -1);
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const TokenId id = id_key(key, -1);
    if (id >= 0) spec.extra_eog.push_back(id);
  }
  for (TokenId id : known_eog_tokens(spec.vocab)) spec.extra_eog.push_back(id);
  spec.add_bos = file.get_bool("tokenizer.ggml.add_bos_token").value_or(spm || is_llama3_family(pre));
  spec.add_eos = file.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  if (spec.add_bos && spec.bos_id < 0) {
    log::warn("tokenizer ({}): add_bos_token is set but the file names no BOS token; BOS is not added", source);
    spec.add_bos = false;
  }
  if (spec.add_eos && spec.eos_id < 0) {
    log::warn("tokenizer ({}): add_eos_token is set but the file names no EOS token; EOS is not added", source);
    spec.add_eos = false;
  }

  // Control, user-defined and unknown tokens are matched in the raw text.
  for (TokenId id = 0; id < n; ++id) {
    const TokenKind k = spec.vocab.kind[id];
    if (k != TokenKind::Control && k != TokenKind::UserDefined && k != TokenKind::Unknown) continue;
    if (spec.vocab.text[id].empty()) continue;
    AddedToken a;
    a.id = id;
    a.content = spec.vocab.text[id];
    a.special = k != TokenKind::UserDefined;
    spec.added.push_back(std::move(a));
  }

  if (spm) {
    spec.model = ModelKind::Spm;
    const bool add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    if (add_space_prefix) spec.normalizer.add_prepend(std::string(kSpace));
    spec.normalizer.add_replace_literal(" ", std::string(kSpace));
    spec.decoder.byte_fallback = true;
    spec.decoder.space_marker = std::string(kSpace);
    spec.decoder.strip_leading_space = add_space_prefix;
  } else {
    spec.model = ModelKind::Bpe;
    const std::vector<std::string> merges = file.get_string_array("tokenizer.ggml.merges");
    fail_if(merges.empty(), "tokenizer.ggml.merges", "missing or empty for a gpt2 tokenizer");
    spec.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const size_t sp = merges[i].find(' ', 1);
      fail_if(sp == std::string::npos, "tokenizer.ggml.merges", fmt::format("merge {} '{}' has no space", i, merges[i]));
      spec.merges.emplace_back(merges[i].substr(0, sp), merges[i].substr(sp + 1));
    }
    spec.bpe.ignore_merges = is_llama3_family(pre) || pre == "tekken";
    // A byte-level vocabulary missing one of the 256 byte characters drops that byte, as HF tokenizers does
    // (llama.cpp has no answer there); the unk token is not used.
    spec.bpe_drop_unknown = true;
    RBEE_WITH_CONTEXT(fmt::format("tokenizer ({})", source), spec.pre_tokenizer = PreTokenizer::for_gguf_pre(pre));
    spec.decoder.byte_level = true;
  }

  try {
    return make_tokenizer(std::move(spec));
  } catch (Error& e) {
    e.add_context(fmt::format("loading the tokenizer of '{}'", source));
    throw;
  }
}

}  // namespace rbee::llm
