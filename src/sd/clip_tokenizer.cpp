// CLIP BPE tokenizer (see rbee/sd/clip_tokenizer.h for the contract).
#include "rbee/sd/clip_tokenizer.h"

#include <climits>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "rbee/text/byte_level.h"
#include "rbee/text/regex.h"
#include "rbee/text/utf8.h"
#include "rbee/core/error.h"
#include "rbee/formats/safetensors.h"

namespace rbee::sd {

struct ClipTokenizer::Impl {
  std::unordered_map<std::string, int32_t> vocab;
  std::unordered_map<std::string, int> merge_rank;  // "a b" -> rank
  int32_t bos = 0, eos = 0, pad = 0;
  // CLIP's split pattern (Hugging Face CLIPTokenizer.pat), case-insensitive.
  text::Regex pattern{R"((?i)<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+)"};
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  std::vector<int32_t> bpe(const std::string& piece) const;
};

namespace {

bool is_cjk(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}
bool is_space(uint32_t cp) {
  return cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}
bool is_control(uint32_t cp) { return (cp < 0x20 || (cp >= 0x7F && cp < 0xA0)) && !is_space(cp); }
uint32_t to_lower(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 32;
  return cp;
}

// Hugging Face's BasicTokenizer without punctuation splitting: drop controls, spaces around CJK ideographs,
// lower-case, collapse whitespace runs to one space, trim.
std::string clean_text(std::string_view text) {
  std::string spaced;
  for (size_t pos = 0; pos < text.size();) {
    uint32_t cp = 0;
    int n = text::utf8::decode(text, pos, &cp);
    pos += (size_t)n;
    if (cp == 0 || cp == 0xFFFD || is_control(cp)) continue;
    if (is_space(cp)) {
      spaced.push_back(' ');
    } else if (is_cjk(cp)) {
      spaced.push_back(' ');
      text::utf8::append(spaced, cp);
      spaced.push_back(' ');
    } else {
      text::utf8::append(spaced, to_lower(cp));
    }
  }
  std::string out;
  std::istringstream words(spaced);
  std::string w;
  while (words >> w) {
    if (!out.empty()) out.push_back(' ');
    out += w;
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

ClipTokenizer ClipTokenizer::from_files(const std::string& vocab_json, const std::string& merges_txt,
                                        const std::string& pad_token) {
  auto impl = std::make_shared<Impl>();
  nlohmann::json v = safetensors::read_json_file(vocab_json);
  RBEE_CHECK_CODE(v.is_object() && !v.empty(), ErrorCode::Io, "clip tokenizer: '{}' is not a token -> id object",
                  vocab_json);
  for (auto it = v.begin(); it != v.end(); ++it) {
    RBEE_CHECK_CODE(it.value().is_number_integer() && it.value().get<int64_t>() >= 0 &&
                        it.value().get<int64_t>() < INT32_MAX,
                    ErrorCode::Io, "clip tokenizer: '{}': token '{}' has no valid id", vocab_json, it.key());
    impl->vocab[it.key()] = it.value().get<int32_t>();
  }
  std::istringstream lines(read_text(merges_txt));
  std::string line;
  int rank = 0, lineno = 0;
  const int max_merges = 49152 - 256 - 2;  // CLIPTokenizer reads at most this many merges
  while (std::getline(lines, line) && rank < max_merges) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (lineno == 1 && line.rfind("#version", 0) == 0) continue;
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    RBEE_CHECK_CODE(sp != std::string::npos && sp > 0 && sp + 1 < line.size() && line.find(' ', sp + 1) == std::string::npos,
                    ErrorCode::Io, "clip tokenizer: '{}' line {}: expected two tokens, got '{}'", merges_txt, lineno,
                    line.substr(0, 80));
    impl->merge_rank.emplace(line, rank++);
  }
  auto special = [&](const std::string& name) {
    auto it = impl->vocab.find(name);
    RBEE_CHECK_CODE(it != impl->vocab.end(), ErrorCode::Io, "clip tokenizer: '{}' lacks the token '{}'", vocab_json,
                    name);
    return it->second;
  };
  impl->bos = special("<|startoftext|>");
  impl->eos = special("<|endoftext|>");
  impl->pad = special(pad_token);
  ClipTokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

ClipTokenizer ClipTokenizer::from_folder(const std::string& dir) {
  std::string pad = "<|endoftext|>";
  // Newer transformers write the pad token into tokenizer_config.json only, older ones also into
  // special_tokens_map.json; either holds a string or an {"content": ...} object.
  for (const char* name : {"/tokenizer_config.json", "/special_tokens_map.json"}) {
    const std::string path = dir + name;
    if (!std::filesystem::exists(path)) continue;
    nlohmann::json m = safetensors::read_json_file(path);
    if (!m.is_object() || !m.contains("pad_token")) continue;
    const auto& p = m["pad_token"];
    if (p.is_string()) pad = p.get<std::string>();
    else if (p.is_object() && p.contains("content") && p["content"].is_string()) pad = p["content"].get<std::string>();
  }
  return from_files(dir + "/vocab.json", dir + "/merges.txt", pad);
}

std::vector<int32_t> ClipTokenizer::encode(std::string_view text) const {
  size_t bad = text::utf8::find_invalid(text);
  RBEE_CHECK(bad == std::string_view::npos, "clip tokenizer: text is not valid UTF-8 at byte {}", bad);
  const std::string clean = clean_text(text);
  std::vector<int32_t> ids;
  impl_->pattern.for_each_match(clean, [&](size_t b, size_t e) {
    std::string piece = clean.substr(b, e - b);
    if (piece == "<|startoftext|>") return ids.push_back(impl_->bos);
    if (piece == "<|endoftext|>") return ids.push_back(impl_->eos);
    for (int32_t id : impl_->bpe(text::byte_level::encode(piece))) ids.push_back(id);
  });
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
