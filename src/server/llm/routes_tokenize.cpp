// POST /tokenize and POST /detokenize (the shape vLLM's server gives them; llama.cpp's field names are accepted
// too): what the worker makes of a prompt or a conversation, and text for token ids.
#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/llm/routes.h"

namespace rbee::server::llm_api {

void add_tokenize_routes(HttpServer& http, LlmWorkerContext& ctx) {
  http.post("/tokenize", "/tokenize", [&ctx](const httplib::Request& req, httplib::Response& res) {
    const nlohmann::json body = parse_json_object(req.body);
    const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(req.body);
    const TokenizeRequest t = parse_tokenize_request(body, &ordered);
    LlmService& service = ctx.need_service();
    const auto prompts = service.prompt_tokens(t.prompt);
    const std::vector<llm::TokenId>& ids = prompts.at(0);
    nlohmann::json out = {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", ctx.ctx_size}};
    if (t.return_token_strs) {
      const llm::Tokenizer& tok = service.model().tokenizer();
      nlohmann::json strs = nlohmann::json::array();
      for (llm::TokenId id : ids) strs.push_back(tok.is_special(id) ? tok.token_text(id) : tok.token_bytes(id));
      out["token_strs"] = std::move(strs);
    }
    if (!t.prompt.messages.is_null()) out["prompt"] = service.render_messages(t.prompt);
    send_json(res, 200, out);
  });
  http.post("/detokenize", "/detokenize", [&ctx](const httplib::Request& req, httplib::Response& res) {
    const DetokenizeRequest d = parse_detokenize_request(parse_json_object(req.body));
    LlmService& service = ctx.need_service();
    const llm::Tokenizer& tok = service.model().tokenizer();
    std::vector<llm::TokenId> ids;
    for (size_t i = 0; i < d.tokens.size(); ++i) {
      if (d.tokens[i] < 0 || d.tokens[i] >= tok.vocab_size()) {
        throw invalid_field("tokens[" + std::to_string(i) + "]",
                            "token id " + std::to_string(d.tokens[i]) + " is outside [0, " +
                                std::to_string(tok.vocab_size()) + ")");
      }
      ids.push_back((llm::TokenId)d.tokens[i]);
    }
    const std::string text = tok.decode(ids, d.skip_special_tokens);
    send_json(res, 200, {{"prompt", text}, {"content", text}});
  });
}

}  // namespace rbee::server::llm_api
