#include "server/llm/logprobs_json.h"

#include <cmath>

namespace rbee::server::llm_api {

namespace {
nlohmann::json logprob_value(float lp) {
  if (std::isnan(lp)) return nullptr;
  if (std::isinf(lp)) return -9999.0;
  return lp;
}

// What a token stands for in text: its bytes; special tokens (which decode to nothing) by their name.
std::string token_string(const llm::Tokenizer& tok, llm::TokenId id) {
  return tok.is_special(id) ? tok.token_text(id) : tok.token_bytes(id);
}

nlohmann::json bytes_of(const std::string& s) {
  nlohmann::json out = nlohmann::json::array();
  for (unsigned char c : s) out.push_back((int)c);
  return out;
}
}  // namespace

nlohmann::json token_logprob_json(const llm::Tokenizer& tok, const llm::TokenLogprob& lp) {
  const std::string s = token_string(tok, lp.id);
  nlohmann::json top = nlohmann::json::array();
  for (const auto& [id, l] : lp.top) {
    const std::string t = token_string(tok, id);
    top.push_back({{"token", t}, {"logprob", logprob_value(l)}, {"bytes", bytes_of(t)}});
  }
  return {{"token", s}, {"logprob", logprob_value(lp.logprob)}, {"bytes", bytes_of(s)}, {"top_logprobs", top}};
}

nlohmann::json chat_logprobs(const llm::Tokenizer& tok, const std::vector<llm::TokenLogprob>& lps) {
  nlohmann::json content = nlohmann::json::array();
  for (const auto& lp : lps) content.push_back(token_logprob_json(tok, lp));
  return {{"content", content}, {"refusal", nullptr}};
}

nlohmann::json completion_logprobs(const llm::Tokenizer& tok, const std::vector<llm::TokenLogprob>& lps, size_t offset) {
  nlohmann::json tokens = nlohmann::json::array(), values = nlohmann::json::array(), tops = nlohmann::json::array(),
                 offsets = nlohmann::json::array();
  for (const auto& lp : lps) {
    const std::string s = token_string(tok, lp.id);
    tokens.push_back(s);
    values.push_back(logprob_value(lp.logprob));
    if (std::isnan(lp.logprob)) {
      tops.push_back(nullptr);
    } else {
      nlohmann::json top = nlohmann::json::object();
      for (const auto& [id, l] : lp.top) {
        const std::string t = token_string(tok, id);
        if (!top.contains(t)) top[t] = logprob_value(l);
      }
      tops.push_back(std::move(top));
    }
    offsets.push_back(offset);
    offset += s.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

void append_completion_logprobs(nlohmann::json& a, const nlohmann::json& b) {
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
    for (const auto& v : b[key]) a[key].push_back(v);
  }
}

}  // namespace rbee::server::llm_api
