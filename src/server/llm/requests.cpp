#include "server/llm/requests.h"

#include <fmt/format.h>

#include "server/api_error.h"
#include "server/json_fields.h"

namespace rbee::server::llm_api {

namespace {

ApiError unsupported(const std::string& field, const std::string& what) {
  return ApiError(400, "unsupported", "field '" + field + "': " + what, field);
}

// "stop": a string or an array of strings; each non-empty and at most kMaxStopBytes.
std::vector<std::string> parse_stop(const JsonFields& f) {
  const nlohmann::json* v = f.find("stop");
  std::vector<std::string> out;
  if (!v) return out;
  auto one = [&](const nlohmann::json& s, const std::string& where) {
    if (!s.is_string()) throw invalid_field(where, "must be a string, got " + JsonFields::describe(s));
    const std::string& text = s.get_ref<const std::string&>();
    if (text.empty()) throw invalid_field(where, "must not be empty");
    if (text.size() > kMaxStopBytes) throw invalid_field(where, fmt::format("is longer than {} bytes", kMaxStopBytes));
    out.push_back(text);
  };
  if (v->is_string()) {
    one(*v, "stop");
  } else if (v->is_array()) {
    if (v->size() > kMaxStops) throw invalid_field("stop", fmt::format("has more than {} entries", kMaxStops));
    for (size_t i = 0; i < v->size(); ++i) one((*v)[i], fmt::format("stop[{}]", i));
  } else {
    throw invalid_field("stop", "must be a string or an array of strings, got " + JsonFields::describe(*v));
  }
  return out;
}

// The sampling fields every API shares.
void parse_sampling(const JsonFields& f, InferRequest& r) {
  if (auto v = f.integer("max_tokens", 1, kMaxTokensLimit)) r.max_tokens = *v;
  if (auto v = f.number("temperature", 0.0, 2.0)) r.temperature = *v;
  if (auto v = f.number("top_p", 0.0, 1.0)) {
    if (*v <= 0.0) throw invalid_field("top_p", "must be in (0, 1], got 0");
    r.top_p = *v;
  }
  if (auto v = f.integer("top_k", 0, kMaxTokensLimit)) r.top_k = *v;
  if (auto v = f.number("min_p", 0.0, 1.0)) r.min_p = *v;
  if (auto v = f.number("repetition_penalty", 0.0, 10.0)) {
    if (*v <= 0.0) throw invalid_field("repetition_penalty", "must be > 0, got 0");
    r.repetition_penalty = *v;
  }
  if (auto v = f.number("presence_penalty", -2.0, 2.0)) r.presence_penalty = *v;
  if (auto v = f.number("frequency_penalty", -2.0, 2.0)) r.frequency_penalty = *v;
  if (auto v = f.integer("seed", INT64_MIN, INT64_MAX)) r.seed = *v;
  r.stop = parse_stop(f);
  if (auto v = f.boolean("stream")) r.stream = *v;
}

// OpenAI's fields for things this worker does not do: refused unless they ask for the default.
void refuse_openai_extras(const JsonFields& f) {
  if (auto n = f.integer("n", 1, 128); n && *n != 1) throw unsupported("n", "only n = 1 is supported");
  if (auto b = f.integer("best_of", 1, 128); b && *b != 1) throw unsupported("best_of", "only best_of = 1 is supported");
  if (auto e = f.boolean("echo"); e && *e) throw unsupported("echo", "echo is not supported");
  if (const auto* v = f.find("logprobs"); v && !(v->is_boolean() && !v->get<bool>())) {
    throw unsupported("logprobs", "log probabilities are not supported");
  }
  if (f.has("top_logprobs")) throw unsupported("top_logprobs", "log probabilities are not supported");
  if (f.has("suffix")) throw unsupported("suffix", "suffix is not supported");
  for (const char* name : {"tools", "tool_choice", "functions", "function_call"}) {
    if (f.has(name)) throw unsupported(name, "tool and function calling are not supported");
  }
  if (const auto* v = f.find("response_format")) {
    if (!v->is_object()) throw invalid_field("response_format", "must be an object");
    const JsonFields rf(*v);
    const auto type = rf.string("type");
    if (type && *type != "text") throw unsupported("response_format", "only type \"text\" is supported");
  }
}

void parse_openai_common(const JsonFields& f, InferRequest& r) {
  if (auto m = f.string("model")) r.model = *m;
  refuse_openai_extras(f);
  parse_sampling(f, r);
  if (const auto* v = f.find("logit_bias")) {
    if (!v->is_object()) throw invalid_field("logit_bias", "must be an object of token id -> bias");
    if (v->size() > 1024) throw invalid_field("logit_bias", "has more than 1024 entries");
    for (const auto& [key, bias] : v->items()) {
      const std::string field = "logit_bias." + key;
      int64_t id = -1;
      const bool digits = !key.empty() && key.size() <= 9 && key.find_first_not_of("0123456789") == std::string::npos;
      if (!digits) throw invalid_field("logit_bias", "keys must be token ids (decimal), got \"" + key + "\"");
      id = std::stoll(key);
      if (!bias.is_number()) throw invalid_field(field, "must be a number, got " + JsonFields::describe(bias));
      const double b = bias.get<double>();
      if (!(b >= -100.0 && b <= 100.0)) throw invalid_field(field, fmt::format("must be in [-100, 100], got {}", bias.dump()));
      r.logit_bias.emplace_back(id, b);
    }
  }
  if (const auto* v = f.find("stream_options")) {
    if (!v->is_object()) throw invalid_field("stream_options", "must be an object");
    const JsonFields so(*v);
    if (auto u = so.boolean("include_usage")) r.include_usage = *u;
  }
}

std::string message_content(const nlohmann::json& content, const std::string& field) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_array()) {
    // Content parts: only text parts can be used by a text model.
    std::string text;
    for (size_t i = 0; i < content.size(); ++i) {
      const auto& part = content[i];
      const std::string where = fmt::format("{}[{}]", field, i);
      if (!part.is_object()) throw invalid_field(where, "must be an object");
      const JsonFields pf(part);
      const std::string type = pf.required_string("type");
      if (type != "text") throw unsupported(where + ".type", "only text content parts are supported, got \"" + type + "\"");
      text += pf.required_string("text");
    }
    return text;
  }
  throw invalid_field(field, "must be a string or an array of text parts, got " + JsonFields::describe(content));
}

}  // namespace

InferRequest parse_job_request(const nlohmann::json& body) {
  const JsonFields f(body);
  InferRequest r;
  r.api = Api::Jobs;
  const std::string op = f.required_string("operation");
  if (op != "infer") {
    throw ApiError(400, "unknown_operation", "field 'operation': unknown operation \"" + op +
                   "\" (this worker runs \"infer\")", "operation");
  }
  if (auto h = f.string("hive_id")) r.hive_id = *h;
  if (auto m = f.string("model")) r.model = *m;
  r.prompt = f.required_string("prompt");
  parse_sampling(f, r);
  r.stream = f.boolean("stream").value_or(true);
  return r;
}

InferRequest parse_completion_request(const nlohmann::json& body) {
  const JsonFields f(body);
  InferRequest r;
  r.api = Api::Completions;
  const nlohmann::json* p = f.find("prompt");
  if (!p) throw invalid_field("prompt", "is required");
  auto ids = [&](const nlohmann::json& arr, const std::string& where) {
    for (size_t i = 0; i < arr.size(); ++i) {
      const auto& t = arr[i];
      if (!t.is_number_integer()) throw invalid_field(fmt::format("{}[{}]", where, i), "must be a token id (integer)");
      r.prompt_ids.push_back(t.is_number_unsigned() && t.get<uint64_t>() > (uint64_t)INT64_MAX ? -1 : t.get<int64_t>());
    }
    r.has_prompt_ids = true;
  };
  if (p->is_string()) {
    r.prompt = p->get<std::string>();
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
    ids(*p, "prompt");
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
    r.prompt = (*p)[0].get<std::string>();
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_array()) {
    ids((*p)[0], "prompt[0]");
  } else if (p->is_array() && p->size() > 1) {
    throw unsupported("prompt", "only one prompt per request is supported");
  } else {
    throw invalid_field("prompt", "must be a string, one string in an array, or token ids, got " +
                                      JsonFields::describe(*p));
  }
  parse_openai_common(f, r);
  if (!r.max_tokens) r.max_tokens = 16;  // OpenAI's default for completions
  return r;
}

InferRequest parse_chat_request(const nlohmann::json& body) {
  const JsonFields f(body);
  InferRequest r;
  r.api = Api::Chat;
  const nlohmann::json* m = f.find("messages");
  if (!m) throw invalid_field("messages", "is required");
  if (!m->is_array() || m->empty()) throw invalid_field("messages", "must be a non-empty array of messages");
  if (m->size() > kMaxMessages) throw invalid_field("messages", fmt::format("has more than {} entries", kMaxMessages));
  for (size_t i = 0; i < m->size(); ++i) {
    const std::string where = fmt::format("messages[{}]", i);
    const auto& msg = (*m)[i];
    if (!msg.is_object()) throw invalid_field(where, "must be an object, got " + JsonFields::describe(msg));
    const JsonFields mf(msg);
    const nlohmann::json* role = mf.find("role");
    if (!role || !role->is_string()) throw invalid_field(where + ".role", "must be a string");
    std::string r_name = role->get<std::string>();
    if (r_name == "developer") r_name = "system";
    if (r_name != "system" && r_name != "user" && r_name != "assistant" && r_name != "tool") {
      throw invalid_field(where + ".role", "must be system, user, assistant or tool, got \"" + r_name + "\"");
    }
    const nlohmann::json* content = mf.find("content");
    std::string text;
    if (content) text = message_content(*content, where + ".content");
    else if (r_name != "assistant") throw invalid_field(where + ".content", "is required");
    r.messages.push_back({r_name, std::move(text)});
  }
  parse_openai_common(f, r);
  if (auto v = f.integer("max_completion_tokens", 1, kMaxTokensLimit)) r.max_tokens = *v;
  return r;
}

}  // namespace rbee::server::llm_api
