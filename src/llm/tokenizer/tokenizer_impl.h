// The one Tokenizer implementation. Loaders (load_hf_json.cpp, load_gguf.cpp) describe a tokenizer as a
// TokenizerSpec -- vocabulary, model, normalizer, pre-tokenizer, decoder, added tokens, special ids -- and
// make_tokenizer() validates it and builds the pipeline:
//   text -> added-token split -> per raw fragment: normalize -> pre-tokenize -> model (BPE or SPM) -> ids
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "llm/tokenizer/added_tokens.h"
#include "llm/tokenizer/bpe.h"
#include "llm/tokenizer/normalizer.h"
#include "llm/tokenizer/pre_tokenizer.h"
#include "llm/tokenizer/vocab.h"
#include "rbee/llm/tokenizer.h"

namespace rbee::llm {

enum class ModelKind {
  Bpe,  // merges by rank (bpe.h)
  Spm,  // merges by token score (spm.h)
};

// How token texts turn back into bytes.
struct DecoderSpec {
  bool byte_level = false;        // vocabulary text is in GPT-2's byte alphabet (byte_level.h)
  bool byte_fallback = false;     // "<0xAB>" tokens stand for the byte 0xAB
  std::string space_marker;       // e.g. "▁", decoded as ' ' (empty: none)
  bool strip_leading_space = false;  // drop one ' ' at the start of a decoded text (SentencePiece dummy prefix)
};

struct TokenizerSpec {
  std::string source;  // where it came from, for error messages
  Vocab vocab;
  ModelKind model = ModelKind::Bpe;
  std::vector<std::pair<std::string, std::string>> merges;  // Bpe only, in priority order
  BpeOptions bpe;
  TokenId unk_id = -1;
  bool bpe_drop_unknown = false;  // Bpe: characters outside the vocabulary are dropped even when unk_id is set
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  DecoderSpec decoder;
  std::vector<AddedToken> added;  // ids must exist in `vocab`
  TokenId bos_id = -1, eos_id = -1, pad_id = -1;
  std::vector<TokenId> extra_eog;  // further end-of-generation ids (EOT, EOM, <|im_end|>, ...)
  bool add_bos = false, add_eos = false;
};

// Validates every id in `spec` against the vocabulary and builds the tokenizer.
std::unique_ptr<Tokenizer> make_tokenizer(TokenizerSpec spec);

// Tokenizer::from_hf_json on texts instead of files (tests, fuzzing): tokenizer_config / generation_config are
// the companion files' texts, nullptr when absent. `source` names the input in errors.
std::unique_ptr<Tokenizer> tokenizer_from_hf_json_text(std::string_view tokenizer_json,
                                                       const std::string* tokenizer_config,
                                                       const std::string* generation_config,
                                                       const std::string& source);

// Ids of well-known end-of-turn tokens present in `vocab` (llama.cpp's heuristic for models whose metadata
// names only EOS): "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", ...
std::vector<TokenId> known_eog_tokens(const Vocab& vocab);

}  // namespace rbee::llm
