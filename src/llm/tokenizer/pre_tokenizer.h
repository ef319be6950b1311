// Pre-tokenization: splits a normalized text segment into pieces that the model tokenizes independently
// (merges never cross a piece boundary). A PreTokenizer is a sequence of steps; each step maps every piece to
// zero or more pieces, as Hugging Face's pre_tokenizers.Sequence does.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rbee/text/regex.h"

namespace rbee::llm {

// What a regex split does with the matches (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior {
  Isolated,            // matches and the text between them are pieces of their own
  Removed,             // matches are dropped
  MergedWithPrevious,  // a match is appended to the piece before it
  MergedWithNext,      // a match is prepended to the piece after it
  Contiguous,          // runs of adjacent matches form one piece
};

// When Metaspace prepends its replacement character.
enum class PrependScheme { Always, First, Never };

// The regexes of the common byte-level BPE pre-tokenizers.
namespace regexes {
// GPT-2 (also SmolLM, StarCoder, ... after an individual-digit split).
inline constexpr std::string_view kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama 3: case-insensitive contractions, a letter run with one leading non-letter, numbers of 1-3 digits.
inline constexpr std::string_view kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2: as Llama 3 with single digits.
inline constexpr std::string_view kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Mistral's Tekken and OpenAI's o200k (GPT-4o): letter runs split by case.
inline constexpr std::string_view kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
}  // namespace regexes

class PreTokenizer {
 public:
  // Splits every piece on `pattern` (a PCRE2 regex). invert: the pattern describes the pieces, not the
  // delimiters.
  void add_split(std::string pattern, SplitBehavior behavior, bool invert = false);
  // Splits on a literal string.
  void add_split_literal(std::string_view literal, SplitBehavior behavior, bool invert = false);
  // GPT-2's ByteLevel step: optionally a leading space, optionally the GPT-2 regex split, then every byte is
  // mapped to its printable code point (see byte_level.h).
  void add_byte_level(bool add_prefix_space, bool use_regex);
  // SentencePiece's Metaspace step: spaces become `replacement` (normally "▁"), which is also prepended as
  // `scheme` says, and with `split` every replacement starts a new piece.
  void add_metaspace(std::string replacement, PrependScheme scheme, bool split);

  bool empty() const { return steps_.empty(); }
  // True when a ByteLevel step maps bytes (the model's vocabulary is then in GPT-2's byte alphabet).
  bool maps_bytes() const;

  // Splits `text`. at_text_start: the segment begins the whole input (no added token before it); Metaspace's
  // "first" scheme only prepends there.
  std::vector<std::string> run(std::string_view text, bool at_text_start) const;

  // The pre-tokenizer llama.cpp uses for a GGUF `tokenizer.ggml.pre` name ("gpt-2", "llama-bpe", "qwen2",
  // "smollm", ...), ByteLevel mapping included. Throws Error(Unsupported) for unknown names.
  static PreTokenizer for_gguf_pre(std::string_view pre);

 private:
  struct Step {
    enum class Kind { Split, ByteLevelPrefix, ByteLevelMap, Metaspace } kind = Kind::Split;
    std::shared_ptr<const text::Regex> regex;
    SplitBehavior behavior = SplitBehavior::Isolated;
    bool invert = false;
    std::string replacement;
    PrependScheme scheme = PrependScheme::Always;
    bool split = true;
  };
  static void apply(const Step& step, const std::string& piece, bool at_text_start,
                    std::vector<std::string>& out);
  std::vector<Step> steps_;
};

}  // namespace rbee::llm
