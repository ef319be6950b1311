// Tokenizer::from_hf_json: Hugging Face tokenizer.json (+ tokenizer_config.json and generation_config.json
// beside it). Supported: BPE models (byte-level or SentencePiece-style with byte fallback); the normalizers,
// pre-tokenizers, decoders and post-processors that LLM tokenizers use. Anything else is refused with
// Error(Unsupported) naming the component.
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "llm/tokenizer/tokenizer_impl.h"
#include "rbee/text/utf8.h"
#include "rbee/core/error.h"

namespace rbee::llm {
namespace {

using nlohmann::json;

// Reads a file; Error(NotFound) when it cannot be opened.
std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  RBEE_CHECK_CODE(in.good(), ErrorCode::NotFound, "tokenizer: cannot open '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Parses JSON text; Error(Io) with the parser's byte offset when it is not JSON.
json parse_json(std::string_view text, const std::string& name) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    RBEE_THROW(ErrorCode::Io, "tokenizer: '{}' is not valid JSON (byte {}): {}", name, e.byte, e.what());
  }
}

// Typed field access with errors that name the field.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  const json& object(const json& j, const char* where) const {
    RBEE_CHECK_CODE(j.is_object(), ErrorCode::Io, "tokenizer ({}): {} must be an object, not {}", source_, where,
                    j.type_name());
    return j;
  }
  std::string string(const json& j, const char* key, const char* where) const {
    const auto it = j.find(key);
    RBEE_CHECK_CODE(it != j.end() && it->is_string(), ErrorCode::Io, "tokenizer ({}): {}.{} must be a string",
                    source_, where, key);
    return it->get<std::string>();
  }
  bool boolean(const json& j, const char* key, bool fallback) const {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    RBEE_CHECK_CODE(it->is_boolean(), ErrorCode::Io, "tokenizer ({}): '{}' must be true or false", source_, key);
    return it->get<bool>();
  }
  int64_t integer(const json& j, const char* where) const {
    RBEE_CHECK_CODE(j.is_number_integer(), ErrorCode::Io, "tokenizer ({}): {} must be an integer, not {}", source_,
                    where, j.type_name());
    return j.get<int64_t>();
  }
  // {"String": "x"} or {"Regex": "x"} -> (pattern, is_regex)
  std::pair<std::string, bool> pattern(const json& j, const char* where) const {
    object(j, where);
    if (j.contains("String")) return {string(j, "String", where), false};
    if (j.contains("Regex")) return {string(j, "Regex", where), true};
    RBEE_THROW(ErrorCode::Io, "tokenizer ({}): {} needs a String or text::Regex pattern", source_, where);
  }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

SplitBehavior parse_behavior(const Reader& r, const std::string& s) {
  if (s == "Isolated") return SplitBehavior::Isolated;
  if (s == "Removed") return SplitBehavior::Removed;
  if (s == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (s == "Contiguous") return SplitBehavior::Contiguous;
  RBEE_THROW(ErrorCode::Io, "tokenizer ({}): unknown split behavior '{}'", r.source(), s);
}

PrependScheme parse_prepend_scheme(const Reader& r, const json& j) {
  if (j.contains("prepend_scheme")) {
    const std::string s = r.string(j, "prepend_scheme", "Metaspace");
    if (s == "always") return PrependScheme::Always;
    if (s == "first") return PrependScheme::First;
    if (s == "never") return PrependScheme::Never;
    RBEE_THROW(ErrorCode::Io, "tokenizer ({}): unknown Metaspace prepend_scheme '{}'", r.source(), s);
  }
  // Files from before prepend_scheme existed say add_prefix_space.
  return r.boolean(j, "add_prefix_space", true) ? PrependScheme::Always : PrependScheme::Never;
}

void parse_normalizer(const Reader& r, const json& j, Normalizer& n) {
  if (j.is_null()) return;
  r.object(j, "normalizer");
  const std::string type = r.string(j, "type", "normalizer");
  if (type == "Sequence") {
    const auto it = j.find("normalizers");
    RBEE_CHECK_CODE(it != j.end() && it->is_array(), ErrorCode::Io, "tokenizer ({}): Sequence needs normalizers",
                    r.source());
    for (const json& sub : *it) parse_normalizer(r, sub, n);
  } else if (type == "NFC") {
    n.add_unicode(UnicodeForm::NFC);
  } else if (type == "NFD") {
    n.add_unicode(UnicodeForm::NFD);
  } else if (type == "NFKC") {
    n.add_unicode(UnicodeForm::NFKC);
  } else if (type == "NFKD") {
    n.add_unicode(UnicodeForm::NFKD);
  } else if (type == "Prepend") {
    n.add_prepend(r.string(j, "prepend", "Prepend"));
  } else if (type == "Replace") {
    const auto [pat, is_regex] = r.pattern(j.value("pattern", json()), "Replace.pattern");
    const std::string content = r.string(j, "content", "Replace");
    if (is_regex) {
      n.add_replace_regex(pat, content);
    } else {
      n.add_replace_literal(pat, content);
    }
  } else if (type == "Strip") {
    n.add_strip(r.boolean(j, "strip_left", true), r.boolean(j, "strip_right", true));
  } else {
    RBEE_THROW(ErrorCode::Unsupported, "tokenizer ({}): normalizer '{}' is not supported", r.source(), type);
  }
}

void parse_pre_tokenizer(const Reader& r, const json& j, PreTokenizer& p) {
  if (j.is_null()) return;
  r.object(j, "pre_tokenizer");
  const std::string type = r.string(j, "type", "pre_tokenizer");
  if (type == "Sequence") {
    const auto it = j.find("pretokenizers");
    RBEE_CHECK_CODE(it != j.end() && it->is_array(), ErrorCode::Io, "tokenizer ({}): Sequence needs pretokenizers",
                    r.source());
    for (const json& sub : *it) parse_pre_tokenizer(r, sub, p);
  } else if (type == "ByteLevel") {
    p.add_byte_level(r.boolean(j, "add_prefix_space", true), r.boolean(j, "use_regex", true));
  } else if (type == "Split") {
    const auto [pat, is_regex] = r.pattern(j.value("pattern", json()), "Split.pattern");
    const SplitBehavior b = parse_behavior(r, r.string(j, "behavior", "Split"));
    const bool invert = r.boolean(j, "invert", false);
    if (is_regex) {
      p.add_split(pat, b, invert);
    } else {
      p.add_split_literal(pat, b, invert);
    }
  } else if (type == "Digits") {
    p.add_split(r.boolean(j, "individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)", SplitBehavior::Isolated);
  } else if (type == "Metaspace") {
    const std::string rep = j.contains("replacement") ? r.string(j, "replacement", "Metaspace") : "\u2581";
    p.add_metaspace(rep, parse_prepend_scheme(r, j), r.boolean(j, "split", true));
  } else if (type == "Whitespace") {
    p.add_split(R"(\w+|[^\w\s]+)", SplitBehavior::Removed, /*invert=*/true);
  } else if (type == "WhitespaceSplit") {
    p.add_split(R"(\s+)", SplitBehavior::Removed);
  } else if (type == "Punctuation") {
    const SplitBehavior b = j.contains("behavior") ? parse_behavior(r, r.string(j, "behavior", "Punctuation"))
                                                   : SplitBehavior::Isolated;
    p.add_split(R"([\p{P}!-/:-@\[-`{-~])", b);
  } else if (type == "CharDelimiterSplit") {
    p.add_split_literal(r.string(j, "delimiter", "CharDelimiterSplit"), SplitBehavior::Removed);
  } else {
    RBEE_THROW(ErrorCode::Unsupported, "tokenizer ({}): pre-tokenizer '{}' is not supported", r.source(), type);
  }
}

void parse_decoder(const Reader& r, const json& j, DecoderSpec& d) {
  if (j.is_null()) return;
  r.object(j, "decoder");
  const std::string type = r.string(j, "type", "decoder");
  if (type == "Sequence") {
    const auto it = j.find("decoders");
    RBEE_CHECK_CODE(it != j.end() && it->is_array(), ErrorCode::Io, "tokenizer ({}): Sequence needs decoders",
                    r.source());
    for (const json& sub : *it) parse_decoder(r, sub, d);
  } else if (type == "ByteLevel") {
    d.byte_level = true;
  } else if (type == "ByteFallback") {
    d.byte_fallback = true;
  } else if (type == "Fuse") {
    // Joining the tokens is what decoding does anyway.
  } else if (type == "Replace") {
    const auto [pat, is_regex] = r.pattern(j.value("pattern", json()), "decoder Replace.pattern");
    const std::string content = r.string(j, "content", "decoder Replace");
    RBEE_CHECK_CODE(!is_regex && content == " ", ErrorCode::Unsupported,
                    "tokenizer ({}): decoder Replace is only supported as a literal to ' ' (got '{}' -> '{}')",
                    r.source(), pat, content);
    d.space_marker = pat;
  } else if (type == "Strip") {
    const std::string content = r.string(j, "content", "decoder Strip");
    const int64_t start = j.contains("start") ? r.integer(j["start"], "decoder Strip.start") : 0;
    const int64_t stop = j.contains("stop") ? r.integer(j["stop"], "decoder Strip.stop") : 0;
    RBEE_CHECK_CODE(content == " " && start <= 1 && stop == 0, ErrorCode::Unsupported,
                    "tokenizer ({}): decoder Strip is only supported for one leading space", r.source());
    d.strip_leading_space = start == 1;
  } else if (type == "Metaspace") {
    d.space_marker = j.contains("replacement") ? r.string(j, "replacement", "decoder Metaspace") : "\u2581";
    d.strip_leading_space = parse_prepend_scheme(r, j) != PrependScheme::Never;
  } else {
    RBEE_THROW(ErrorCode::Unsupported, "tokenizer ({}): decoder '{}' is not supported", r.source(), type);
  }
}

// TemplateProcessing "single": [SpecialToken?, Sequence A, SpecialToken?] decides whether encode(add_special)
// adds BOS / EOS.
void parse_post_processor(const Reader& r, const json& j, TokenizerSpec& spec) {
  if (j.is_null()) return;
  r.object(j, "post_processor");
  const std::string type = r.string(j, "type", "post_processor");
  if (type == "Sequence") {
    const auto it = j.find("processors");
    RBEE_CHECK_CODE(it != j.end() && it->is_array(), ErrorCode::Io, "tokenizer ({}): Sequence needs processors",
                    r.source());
    for (const json& sub : *it) parse_post_processor(r, sub, spec);
    return;
  }
  if (type != "TemplateProcessing") return;  // ByteLevel (offsets only), Roberta/Bert (encoder models): no BOS
  const auto single = j.find("single");
  RBEE_CHECK_CODE(single != j.end() && single->is_array(), ErrorCode::Io,
                  "tokenizer ({}): TemplateProcessing needs a 'single' template", r.source());
  auto special_id = [&](const json& piece) -> TokenId {
    const std::string name = r.string(piece["SpecialToken"], "id", "TemplateProcessing.SpecialToken");
    const json& specials = j.value("special_tokens", json::object());
    if (specials.contains(name) && specials[name].contains("ids") && specials[name]["ids"].is_array() &&
        specials[name]["ids"].size() == 1) {
      return static_cast<TokenId>(r.integer(specials[name]["ids"][0], "TemplateProcessing special token id"));
    }
    const TokenId id = spec.vocab.find(name);
    RBEE_CHECK_CODE(id >= 0, ErrorCode::Io, "tokenizer ({}): TemplateProcessing names unknown token '{}'",
                    r.source(), name);
    return id;
  };
  bool seen_sequence = false;
  for (const json& piece : *single) {
    r.object(piece, "TemplateProcessing piece");
    if (piece.contains("Sequence")) {
      seen_sequence = true;
    } else if (piece.contains("SpecialToken")) {
      const TokenId id = special_id(piece);
      if (!seen_sequence) {
        spec.add_bos = true;
        spec.bos_id = id;
      } else {
        spec.add_eos = true;
        spec.eos_id = id;
      }
    }
  }
}

// tokenizer_config.json names special tokens as a string or as {"content": ...}.
std::optional<std::string> config_token(const json& cfg, const char* key) {
  const auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_hf_json(const std::string& tokenizer_json_path) {
  const std::string text = read_text(tokenizer_json_path);
  // tokenizer_config.json and generation_config.json are optional companions in the same folder.
  const std::filesystem::path dir = std::filesystem::path(tokenizer_json_path).parent_path();
  auto companion = [&](const char* name) -> std::optional<std::string> {
    const std::filesystem::path p = dir / name;
    if (!std::filesystem::exists(p)) return std::nullopt;
    return read_text(p.string());
  };
  const auto config = companion("tokenizer_config.json");
  const auto generation = companion("generation_config.json");
  return tokenizer_from_hf_json_text(text, config ? &*config : nullptr, generation ? &*generation : nullptr,
                                     tokenizer_json_path);
}

std::unique_ptr<Tokenizer> tokenizer_from_hf_json_text(std::string_view tokenizer_json,
                                                       const std::string* tokenizer_config,
                                                       const std::string* generation_config,
                                                       const std::string& source) {
  const json root = parse_json(tokenizer_json, source);
  const Reader r(source);
  r.object(root, "the top level");
  TokenizerSpec spec;
  spec.source = source;

  // ---- model: vocabulary and merges
  const auto model_it = root.find("model");
  RBEE_CHECK_CODE(model_it != root.end(), ErrorCode::Io, "tokenizer ({}): no 'model'", r.source());
  const json& model = r.object(*model_it, "model");
  const std::string model_type = model.contains("type") ? r.string(model, "type", "model") : "BPE";
  RBEE_CHECK_CODE(model_type == "BPE", ErrorCode::Unsupported,
                  "tokenizer ({}): model type '{}' is not supported (only BPE)", r.source(), model_type);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    RBEE_CHECK_CODE(!model.contains(key) || model[key].is_null() || model[key] == "", ErrorCode::Unsupported,
                    "tokenizer ({}): BPE {} is not supported", r.source(), key);
  }
  const auto vocab_it = model.find("vocab");
  RBEE_CHECK_CODE(vocab_it != model.end() && vocab_it->is_object(), ErrorCode::Io,
                  "tokenizer ({}): model.vocab must be an object of token -> id", r.source());

  // Ids come from the vocabulary and the added tokens; together they must be dense from 0.
  std::vector<std::pair<std::string, TokenKind>> slots;
  std::vector<bool> filled;
  auto place = [&](TokenId id, const std::string& text, TokenKind kind, const char* where) {
    RBEE_CHECK_CODE(id >= 0 && id < (1 << 24), ErrorCode::Io, "tokenizer ({}): {} token '{}' has bad id {}",
                    r.source(), where, text, id);
    RBEE_CHECK_CODE(text::utf8::find_invalid(text) == std::string::npos, ErrorCode::Io,
                    "tokenizer ({}): {} token {} is not valid UTF-8", r.source(), where, id);
    if (static_cast<size_t>(id) >= slots.size()) {
      slots.resize(static_cast<size_t>(id) + 1, {std::string(), TokenKind::Unused});
      filled.resize(static_cast<size_t>(id) + 1, false);
    }
    slots[id] = {text, kind};
    filled[id] = true;
  };
  for (const auto& [text, id] : vocab_it->items()) {
    place(static_cast<TokenId>(r.integer(id, "a model.vocab id")), text, TokenKind::Normal, "model.vocab");
  }
  std::vector<AddedToken> added;
  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    RBEE_CHECK_CODE(root["added_tokens"].is_array(), ErrorCode::Io, "tokenizer ({}): added_tokens must be an array",
                    r.source());
    for (const json& t : root["added_tokens"]) {
      r.object(t, "added_tokens[]");
      AddedToken a;
      a.id = static_cast<TokenId>(r.integer(t.value("id", json()), "added_tokens[].id"));
      a.content = r.string(t, "content", "added_tokens[]");
      a.special = r.boolean(t, "special", false);
      a.lstrip = r.boolean(t, "lstrip", false);
      a.rstrip = r.boolean(t, "rstrip", false);
      a.single_word = r.boolean(t, "single_word", false);
      place(a.id, a.content, a.special ? TokenKind::Control : TokenKind::UserDefined, "added_tokens");
      added.push_back(std::move(a));
    }
  }
  RBEE_CHECK_CODE(!slots.empty(), ErrorCode::Io, "tokenizer ({}): empty vocabulary", r.source());
  for (size_t id = 0; id < slots.size(); ++id) {
    if (!filled[id]) {
      // A hole in the ids: keep the id valid but unmatchable (empty text, never indexed).
      spec.vocab.text.emplace_back();
      spec.vocab.kind.push_back(TokenKind::Unused);
      spec.vocab.score.push_back(0.0f);
      continue;
    }
    spec.vocab.push(std::move(slots[id].first), slots[id].second);
  }
  spec.added = std::move(added);

  if (model.contains("merges") && !model["merges"].is_null()) {
    const json& merges = model["merges"];
    RBEE_CHECK_CODE(merges.is_array(), ErrorCode::Io, "tokenizer ({}): model.merges must be an array", r.source());
    spec.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const json& m = merges[i];
      if (m.is_string()) {  // "a b"
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ', 1);
        RBEE_CHECK_CODE(sp != std::string::npos, ErrorCode::Io, "tokenizer ({}): merge {} '{}' has no space",
                        r.source(), i, s);
        spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else {  // ["a", "b"]
        RBEE_CHECK_CODE(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), ErrorCode::Io,
                        "tokenizer ({}): merge {} must be \"a b\" or [\"a\", \"b\"]", r.source(), i);
        spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      }
    }
  }
  spec.bpe.byte_fallback = r.boolean(model, "byte_fallback", false);
  spec.bpe.ignore_merges = r.boolean(model, "ignore_merges", false);
  spec.bpe.fuse_unk = r.boolean(model, "fuse_unk", false);
  if (model.contains("unk_token") && !model["unk_token"].is_null()) {
    const std::string unk = r.string(model, "unk_token", "model");
    spec.unk_id = spec.vocab.find(unk);
    RBEE_CHECK_CODE(spec.unk_id >= 0, ErrorCode::Io, "tokenizer ({}): unk_token '{}' is not in the vocabulary",
                    r.source(), unk);
    spec.vocab.kind[spec.unk_id] = TokenKind::Unknown;
  }

  // ---- pipeline
  RBEE_WITH_CONTEXT("normalizer", parse_normalizer(r, root.value("normalizer", json()), spec.normalizer));
  RBEE_WITH_CONTEXT("pre_tokenizer", parse_pre_tokenizer(r, root.value("pre_tokenizer", json()), spec.pre_tokenizer));
  RBEE_WITH_CONTEXT("decoder", parse_decoder(r, root.value("decoder", json()), spec.decoder));
  RBEE_WITH_CONTEXT("post_processor", parse_post_processor(r, root.value("post_processor", json()), spec));

  // ---- tokenizer_config.json and generation_config.json: special token names and BOS/EOS flags
  if (tokenizer_config != nullptr) {
    const std::string cfg_name = source + ": tokenizer_config.json";
    const json cfg = parse_json(*tokenizer_config, cfg_name);
    const Reader cr(cfg_name);
    cr.object(cfg, "the top level");
    auto id_of = [&](const char* key) -> TokenId {
      const auto name = config_token(cfg, key);
      if (!name) return -1;
      const TokenId id = spec.vocab.find(*name);
      RBEE_CHECK_CODE(id >= 0, ErrorCode::Io, "tokenizer ({}): {} '{}' is not in the vocabulary", cr.source(), key,
                      *name);
      return id;
    };
    if (const TokenId id = id_of("bos_token"); id >= 0) spec.bos_id = id;
    if (const TokenId id = id_of("eos_token"); id >= 0) spec.eos_id = id;
    if (const TokenId id = id_of("pad_token"); id >= 0) spec.pad_id = id;
    // unk_token is not read: it only names a token for transformers, while the model's own unk_token (above)
    // decides what BPE emits for characters outside the vocabulary (HF tokenizers drops them when there is none).
    // Explicit flags win over the post-processor, as transformers' Llama tokenizers rebuild it from them.
    spec.add_bos = cr.boolean(cfg, "add_bos_token", spec.add_bos);
    spec.add_eos = cr.boolean(cfg, "add_eos_token", spec.add_eos);
  }
  if (generation_config != nullptr) {
    const std::string gen_name = source + ": generation_config.json";
    const json gen = parse_json(*generation_config, gen_name);
    const Reader gr(gen_name);
    if (gen.is_object() && gen.contains("eos_token_id")) {
      const json& e = gen["eos_token_id"];
      if (e.is_array()) {
        for (const json& v : e) spec.extra_eog.push_back(static_cast<TokenId>(gr.integer(v, "eos_token_id[]")));
      } else if (!e.is_null()) {
        spec.extra_eog.push_back(static_cast<TokenId>(gr.integer(e, "eos_token_id")));
      }
    }
  }
  for (TokenId id : known_eog_tokens(spec.vocab)) spec.extra_eog.push_back(id);

  try {
    return make_tokenizer(std::move(spec));
  } catch (Error& e) {
    e.add_context(fmt::format("loading tokenizer '{}'", source));
    throw;
  }
}

}  // namespace rbee::llm
