// CLIP BPE tokenizer (see rbee/sd/clip_tokenizer.h for the contract).
#include "rbee/sd/clip_tokenizer.h"

#include <climits>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "rbee/core/error.h"
#include "rbee/formats/safetensors.h"
#include "rbee/text/byte_level.h"
#include "rbee/text/regex.h"
#include "rbee/text/unicode.h"
#include "rbee/text/utf8.h"
#include "sd/unicode_lower.h"

namespace rbee::sd {

struct ClipTokenizer::Impl {
  std::unordered_map<std::string, int32_t> vocab;
  std::unordered_map<std::string, int> merge_rank;  // "a b" -> rank
  int32_t bos = 0, eos = 0, pad = 0;
  std::vector<std::pair<std::string, int32_t>> specials;  // the added tokens' texts and ids
  // CLIP's split pattern on normalized text. transformers' pattern also lists the special tokens first, but its
  // ByteLevel pre-tokenizer (use_regex) splits every piece again with GPT-2's pattern, which cuts such a piece into
  // "<|", the letters and "|>" as this pattern does (other pieces pass it unchanged).
  text::Regex pattern{R"('s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+)"};
  // Encodes one stretch of text between special tokens: normalize, split, byte-level BPE.
  void encode_segment(std::string_view text, std::vector<int32_t>& ids) const;
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  std::vector<int32_t> bpe(const std::string& piece) const;
};

namespace {

// Unicode White_Space (what \s matches in the normalizer's Replace(\s+, " ")).
bool is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == ' ' || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

// The normalizer of transformers' (fast) CLIPTokenizer: NFC, whitespace runs -> one space, Unicode lower case of
// every code point (tokenizers' Lowercase; Cyrillic, Greek, ... too). Nothing is dropped and CJK ideographs stay
// together (the old slow tokenizer dropped control characters and split ideographs apart).
std::string normalize(std::string_view text) {
  const std::string nfc = text::unicode_normalize(text, text::UnicodeForm::NFC);
  std::string out;
  out.reserve(nfc.size());
  bool in_space = false;
  for (size_t pos = 0; pos < nfc.size();) {
    uint32_t cp = 0;
    pos += (size_t)text::utf8::decode(nfc, pos, &cp);
    if (is_space(cp)) {
      if (!in_space) out.push_back(' ');
      in_space = true;
      continue;
    }
    in_space = false;
    unicode_lower::append_lower(out, cp);
  }
  return out;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  RBEE_CHECK_CODE(f.good(), ErrorCode::NotFound, "clip tokenizer: cannot open '{}'", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::vector<int32_t> ClipTokenizer::Impl::bpe(const std::string& piece) const {
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = cache.find(piece);
    if (it != cache.end()) return it->second;
  }
  std::vector<std::string> word;
  for (std::string_view ch : text::utf8::split_chars(piece)) word.emplace_back(ch);
  if (word.empty()) return {};
  word.back() += "</w>";
  while (word.size() > 1) {
    int best = INT_MAX;
    size_t best_i = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      auto it = merge_rank.find(word[i] + " " + word[i + 1]);
      if (it != merge_rank.end() && it->second < best) {
        best = it->second;
        best_i = i;
      }
    }
    if (best == INT_MAX) break;
    // Merge every occurrence of the best pair, left to right.
    const std::string a = word[best_i], b = word[best_i + 1];
    std::vector<std::string> merged;
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == a && word[i + 1] == b) {
        merged.push_back(a + b);
        i += 2;
      } else {
        merged.push_back(word[i]);
        i += 1;
      }
    }
    word = std::move(merged);
  }
  std::vector<int32_t> ids;
  for (const std::string& t : word) {
    auto it = vocab.find(t);
    ids.push_back(it != vocab.end() ? it->second : eos);  // CLIP's unknown token is <|endoftext|>
  }
  std::lock_guard<std::mutex> lock(cache_mutex);
  cache.emplace(piece, ids);
  return ids;
}

namespace {

// CLIPTokenizer reads at most this many merges (49152 tokens less the 256 bytes and 2 specials).
constexpr int kMaxMerges = 49152 - 256 - 2;

void add_vocab(ClipTokenizer::Impl& impl, const nlohmann::json& v, const std::string& where) {
  RBEE_CHECK_CODE(v.is_object() && !v.empty(), ErrorCode::Io, "clip tokenizer: '{}' has no token -> id object", where);
  for (auto it = v.begin(); it != v.end(); ++it) {
    RBEE_CHECK_CODE(it.value().is_number_integer() && it.value().get<int64_t>() >= 0 &&
                        it.value().get<int64_t>() < INT32_MAX,
                    ErrorCode::Io, "clip tokenizer: '{}': token '{}' has no valid id", where, it.key());
    impl.vocab[it.key()] = it.value().get<int32_t>();
  }
}

void add_merge(ClipTokenizer::Impl& impl, const std::string& a, const std::string& b, const std::string& where,
               int lineno) {
  RBEE_CHECK_CODE(!a.empty() && !b.empty() && a.find(' ') == std::string::npos && b.find(' ') == std::string::npos,
                  ErrorCode::Io, "clip tokenizer: '{}' merge {}: expected two tokens, got '{} {}'", where, lineno,
                  a.substr(0, 40), b.substr(0, 40));
  const int rank = (int)impl.merge_rank.size();
  impl.merge_rank.emplace(a + " " + b, rank);
}

void set_specials(ClipTokenizer::Impl& impl, const std::string& pad_token, const std::string& where) {
  auto special = [&](const std::string& name) {
    auto it = impl.vocab.find(name);
    RBEE_CHECK_CODE(it != impl.vocab.end(), ErrorCode::Io, "clip tokenizer: '{}' lacks the token '{}'", where, name);
    return it->second;
  };
  impl.bos = special("<|startoftext|>");
  impl.eos = special("<|endoftext|>");
  impl.pad = special(pad_token);
  impl.specials = {{"<|startoftext|>", impl.bos}, {"<|endoftext|>", impl.eos}};
  if (pad_token != "<|startoftext|>" && pad_token != "<|endoftext|>") impl.specials.emplace_back(pad_token, impl.pad);
}

// A pad token entry: a string or an {"content": ...} object (AddedToken); "" when neither.
std::string token_text(const nlohmann::json& p) {
  if (p.is_string()) return p.get<std::string>();
  if (p.is_object() && p.contains("content") && p["content"].is_string()) return p["content"].get<std::string>();
  return "";
}

}  // namespace

ClipTokenizer ClipTokenizer::from_files(const std::string& vocab_json, const std::string& merges_txt,
                                        const std::string& pad_token) {
  auto impl = std::make_shared<Impl>();
  add_vocab(*impl, safetensors::read_json_file(vocab_json), vocab_json);
  std::istringstream lines(read_text(merges_txt));
  std::string line;
  int lineno = 0;
  while (std::getline(lines, line) && (int)impl->merge_rank.size() < kMaxMerges) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (lineno == 1 && line.rfind("#version", 0) == 0) continue;
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    RBEE_CHECK_CODE(sp != std::string::npos, ErrorCode::Io, "clip tokenizer: '{}' line {}: expected two tokens, got "
                    "'{}'", merges_txt, lineno, line.substr(0, 80));
    add_merge(*impl, line.substr(0, sp), line.substr(sp + 1), merges_txt, lineno);
  }
  set_specials(*impl, pad_token, vocab_json);
  ClipTokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

ClipTokenizer ClipTokenizer::from_tokenizer_json(const std::string& path, const std::string& pad_token) {
  const nlohmann::json j = safetensors::read_json_file(path);
  RBEE_CHECK_CODE(j.is_object() && j.contains("model") && j["model"].is_object(), ErrorCode::Io,
                  "clip tokenizer: '{}' has no \"model\" object", path);
  const nlohmann::json& model = j["model"];
  RBEE_CHECK_CODE(model.value("type", "BPE") == "BPE", ErrorCode::Io, "clip tokenizer: '{}' is a {} model, not BPE",
                  path, model.value("type", ""));
  RBEE_CHECK_CODE(model.contains("vocab") && model.contains("merges") && model["merges"].is_array(), ErrorCode::Io,
                  "clip tokenizer: '{}' model lacks vocab or merges", path);
  auto impl = std::make_shared<Impl>();
  add_vocab(*impl, model["vocab"], path);
  int n = 0;
  for (const auto& m : model["merges"]) {  // "a b" strings (older files) or ["a", "b"] pairs (tokenizers >= 0.20)
    if ((int)impl->merge_rank.size() >= kMaxMerges) break;
    ++n;
    if (m.is_string()) {
      const std::string line = m.get<std::string>();
      const size_t sp = line.find(' ');
      RBEE_CHECK_CODE(sp != std::string::npos, ErrorCode::Io, "clip tokenizer: '{}' merge {}: '{}' is not two tokens",
                      path, n, line.substr(0, 80));
      add_merge(*impl, line.substr(0, sp), line.substr(sp + 1), path, n);
    } else {
      RBEE_CHECK_CODE(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), ErrorCode::Io,
                      "clip tokenizer: '{}' merge {} is {}, not two tokens", path, n, m.dump().substr(0, 80));
      add_merge(*impl, m[0].get<std::string>(), m[1].get<std::string>(), path, n);
    }
  }
  std::string pad = pad_token;
  if (pad.empty() && j.contains("padding") && j["padding"].is_object())
    pad = token_text(j["padding"].value("pad_token", nlohmann::json()));
  set_specials(*impl, pad.empty() ? "<|endoftext|>" : pad, path);
  ClipTokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

ClipTokenizer ClipTokenizer::from_folder(const std::string& dir) {
  std::string pad;
  // Newer transformers write the pad token into tokenizer_config.json only, older ones also into
  // special_tokens_map.json; either holds a string or an {"content": ...} object.
  for (const char* name : {"/tokenizer_config.json", "/special_tokens_map.json"}) {
    const std::string path = dir + name;
    if (!std::filesystem::exists(path)) continue;
    nlohmann::json m = safetensors::read_json_file(path);
    if (!m.is_object() || !m.contains("pad_token")) continue;
    if (std::string p = token_text(m["pad_token"]); !p.empty()) pad = p;
  }
  // vocab.json + merges.txt (what the slow tokenizer reads), else tokenizer.json (all that transformers 5 writes).
  if (std::filesystem::exists(dir + "/vocab.json") || !std::filesystem::exists(dir + "/tokenizer.json"))
    return from_files(dir + "/vocab.json", dir + "/merges.txt", pad.empty() ? "<|endoftext|>" : pad);
  return from_tokenizer_json(dir + "/tokenizer.json", pad);
}

void ClipTokenizer::Impl::encode_segment(std::string_view text, std::vector<int32_t>& ids) const {
  const std::string clean = normalize(text);
  pattern.for_each_match(clean, [&](size_t b, size_t e) {
    for (int32_t id : bpe(text::byte_level::encode(clean.substr(b, e - b)))) ids.push_back(id);
  });
}

std::vector<int32_t> ClipTokenizer::encode(std::string_view text) const {
  size_t bad = text::utf8::find_invalid(text);
  RBEE_CHECK(bad == std::string_view::npos, "clip tokenizer: text is not valid UTF-8 at byte {}", bad);
  // The special tokens (<|startoftext|>, <|endoftext|> and the pad token, e.g. OpenCLIP's "!") are added tokens:
  // found in the raw text first, leftmost then longest; the text between them is normalized and BPE-encoded.
  const Impl& m = *impl_;
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (true) {
    size_t best = std::string_view::npos, best_len = 0;
    int32_t best_id = 0;
    for (const auto& [tok, id] : m.specials) {
      const size_t at = text.find(tok, pos);
      if (at == std::string_view::npos) continue;
      if (best == std::string_view::npos || at < best || (at == best && tok.size() > best_len)) {
        best = at;
        best_len = tok.size();
        best_id = id;
      }
    }
    m.encode_segment(text.substr(pos, best == std::string_view::npos ? std::string_view::npos : best - pos), ids);
    if (best == std::string_view::npos) break;
    ids.push_back(best_id);
    pos = best + best_len;
  }
  return ids;
}

std::vector<int32_t> ClipTokenizer::encode_padded(std::string_view text, int max_length) const {
  RBEE_CHECK(max_length >= 2, "clip tokenizer: max_length {} must be at least 2", max_length);
  std::vector<int32_t> body = encode(text);
  std::vector<int32_t> ids;
  ids.push_back(impl_->bos);
  for (size_t i = 0; i < body.size() && (int)ids.size() < max_length - 1; ++i) ids.push_back(body[i]);
  ids.push_back(impl_->eos);
  while ((int)ids.size() < max_length) ids.push_back(impl_->pad);
  return ids;
}

int32_t ClipTokenizer::bos_id() const { return impl_->bos; }
int32_t ClipTokenizer::eos_id() const { return impl_->eos; }
int32_t ClipTokenizer::pad_id() const { return impl_->pad; }
int32_t ClipTokenizer::vocab_size() const { return (int32_t)impl_->vocab.size(); }

}  // namespace rbee::sd
