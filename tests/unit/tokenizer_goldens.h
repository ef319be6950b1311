// Golden tokenizations made by tools/goldens/make_tokenizer_goldens.py (HF tokenizers, and llama.cpp's vocab
// test pairs), read from tests/data/tokenizers/<name>.golden.json.
#pragma once

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/source_dir.h"
#include "rbee/llm/tokenizer.h"

namespace rbee::test {

struct TokenizerCase {
  std::string text;
  std::vector<llm::TokenId> ids;                       // special tokens parsed
  std::optional<std::vector<llm::TokenId>> ids_plain;  // special-token text as plain text
  std::optional<std::string> decoded;                  // HF decode(ids), special tokens kept
};

inline std::string tokenizer_data_dir() { return source_dir() + "/tests/data/tokenizers"; }

// cases: the HF goldens; llama_cpp: llama.cpp's .inp/.out pairs (present for llama-bpe, qwen2, llama-spm).
inline std::vector<TokenizerCase> load_tokenizer_cases(const std::string& name, bool llama_cpp_pairs = false) {
  std::ifstream in(tokenizer_data_dir() + "/" + name + ".golden.json", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str());
  std::vector<TokenizerCase> out;
  for (const auto& c : j.at(llama_cpp_pairs ? "llama_cpp_pairs" : "cases")) {
    TokenizerCase tc;
    tc.text = c.at("text").get<std::string>();
    tc.ids = c.at("ids").get<std::vector<llm::TokenId>>();
    if (c.contains("ids_plain")) tc.ids_plain = c.at("ids_plain").get<std::vector<llm::TokenId>>();
    if (c.contains("decoded")) tc.decoded = c.at("decoded").get<std::string>();
    out.push_back(std::move(tc));
  }
  return out;
}

// Printable form of a text for failure messages.
inline std::string escaped(const std::string& s) { return nlohmann::json(s).dump(); }

}  // namespace rbee::test
