#include "server/llm/requests.h"

#include <map>

#include <fmt/format.h>

#include "server/api_error.h"
#include "rbee/core/error.h"
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

// Token ids as sent (range-checked against the vocabulary at submit).
std::vector<int64_t> parse_ids(const nlohmann::json& arr, const std::string& where) {
  std::vector<int64_t> ids;
  for (size_t i = 0; i < arr.size(); ++i) {
    const auto& t = arr[i];
    if (!t.is_number_integer()) throw invalid_field(fmt::format("{}[{}]", where, i), "must be a token id (integer)");
    ids.push_back(t.is_number_unsigned() && t.get<uint64_t>() > (uint64_t)INT64_MAX ? -1 : t.get<int64_t>());
  }
  return ids;
}

// The sampling and stopping fields every API shares.
void parse_sampling(const JsonFields& f, InferRequest& r) {
  if (auto v = f.integer("max_tokens", 0, kMaxTokensLimit)) r.max_tokens = *v;
  if (auto v = f.number("temperature", 0.0, 2.0)) r.temperature = *v;
  if (auto v = f.number("top_p", 0.0, 1.0)) {
    if (*v <= 0.0) throw invalid_field("top_p", "must be in (0, 1], got 0");
    r.top_p = *v;
  }
  if (auto v = f.integer("top_k", -1, kMaxTokensLimit)) r.top_k = std::max<int64_t>(*v, 0);  // -1: off (vLLM)
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
  if (auto v = f.boolean("ignore_eos")) r.ignore_eos = *v;
  if (auto v = f.integer("min_tokens", 0, kMaxTokensLimit)) r.min_tokens = *v;
  if (const auto* v = f.find("stop_token_ids")) {
    if (!v->is_array()) throw invalid_field("stop_token_ids", "must be an array of token ids");
    if (v->size() > 1024) throw invalid_field("stop_token_ids", "has more than 1024 entries");
    r.stop_token_ids = parse_ids(*v, "stop_token_ids");
  }
  if (auto v = f.boolean("parse_special")) r.parse_special = *v;
  if (auto v = f.boolean("add_special_tokens")) r.add_special_tokens = *v;
  if (auto v = f.integer("n", 1, kMaxChoices)) r.n = *v;
}

// max_tokens 0 only makes sense for a completion that echoes the prompt (its log-probabilities, nothing new).
void check_max_tokens(const InferRequest& r) {
  if (r.max_tokens && *r.max_tokens == 0 && !r.echo) {
    throw invalid_field("max_tokens", "must be >= 1 (0 is for echo: the prompt's log-probabilities only)");
  }
  if (r.max_tokens && r.min_tokens > *r.max_tokens) {
    throw invalid_field("min_tokens", fmt::format("must be <= max_tokens ({}), got {}", *r.max_tokens, r.min_tokens));
  }
}

// Chat-style logprobs: "logprobs": bool, "top_logprobs": 0..20 (only with logprobs).
void parse_chat_logprobs(const JsonFields& f, InferRequest& r) {
  const bool on = f.boolean("logprobs").value_or(false);
  const auto top = f.integer("top_logprobs", 0, kMaxTopLogprobs);
  if (top && !on) throw invalid_field("top_logprobs", "needs \"logprobs\": true");
  if (on) r.top_logprobs = top.value_or(0);
}

// A JSON value from the order-keeping parse when there is one (same path), else a converted copy.
nlohmann::ordered_json ordered_field(const nlohmann::json& v, const nlohmann::ordered_json* ordered, const char* name) {
  if (ordered && ordered->is_object()) {
    auto it = ordered->find(name);
    if (it != ordered->end()) return *it;
  }
  return nlohmann::ordered_json::parse(v.dump());
}

void parse_template_options(const JsonFields& f, const nlohmann::ordered_json* ordered, InferRequest& r) {
  if (const auto* v = f.find("chat_template_kwargs")) {
    if (!v->is_object()) throw invalid_field("chat_template_kwargs", "must be an object of template variables");
    for (const char* reserved : {"messages", "add_generation_prompt"}) {
      if (v->contains(reserved)) {
        throw invalid_field("chat_template_kwargs", fmt::format("may not set \"{}\" (it has its own field)", reserved));
      }
    }
    r.chat_template_kwargs = ordered_field(*v, ordered, "chat_template_kwargs");
  }
  if (auto v = f.boolean("add_generation_prompt")) r.add_generation_prompt = *v;
  if (auto v = f.boolean("continue_final_message")) r.continue_final_message = *v;
  if (r.add_generation_prompt.value_or(false) && r.continue_final_message.value_or(false)) {
    throw invalid_field("continue_final_message", "cannot be combined with \"add_generation_prompt\": true");
  }
}

// A grammar from its GBNF text; errors become 400s naming `field`.
std::shared_ptr<const llm::grammar::Grammar> compile(const std::string& gbnf, const std::string& field) {
  try {
    return llm::grammar::Grammar::parse(gbnf);
  } catch (const Error& e) {
    throw invalid_field(field, e.message());
  }
}

std::shared_ptr<const llm::grammar::Grammar> schema_grammar(const nlohmann::ordered_json& schema,
                                                              const std::string& field) {
  std::string gbnf;
  try {
    gbnf = llm::grammar::json_schema_to_gbnf(schema);
  } catch (const Error& e) {
    throw invalid_field(field, e.message());
  }
  return compile(gbnf, field);
}

// Constrained output: OpenAI's response_format, and rbee's "grammar" (GBNF) / "json_schema" (a schema), at most
// one of them.
void parse_output_format(const JsonFields& f, const nlohmann::json& body, const nlohmann::ordered_json* ordered,
                         InferRequest& r) {
  int given = 0;
  if (const auto* v = f.find("response_format")) {
    if (!v->is_object()) throw invalid_field("response_format", "must be an object");
    const JsonFields rf(*v);
    const std::string type = rf.string("type").value_or("text");
    if (type == "json_object") {
      r.grammar = compile(llm::grammar::json_object_gbnf(), "response_format");
      ++given;
    } else if (type == "json_schema") {
      const nlohmann::json* js = rf.find("json_schema");
      if (!js || !js->is_object()) {
        throw invalid_field("response_format", "type json_schema needs \"json_schema\": {\"name\", \"schema\"}");
      }
      const JsonFields jf(*js);
      const nlohmann::json* schema = jf.find("schema");
      if (!schema) throw invalid_field("response_format", "json_schema.schema is required");
      if (!schema->is_object() && !schema->is_boolean()) {
        throw invalid_field("response_format", "json_schema.schema must be a JSON Schema (an object)");
      }
      nlohmann::ordered_json os = nlohmann::ordered_json::parse(schema->dump());
      if (ordered) {
        const auto rf_it = ordered->find("response_format");
        if (rf_it != ordered->end() && rf_it->is_object()) {
          const auto js_it = rf_it->find("json_schema");
          if (js_it != rf_it->end() && js_it->is_object() && js_it->contains("schema")) os = js_it->at("schema");
        }
      }
      r.grammar = schema_grammar(os, "response_format");
      ++given;
    } else if (type != "text") {
      throw invalid_field("response_format", "type must be text, json_object or json_schema, got \"" + type + "\"");
    }
  }
  if (auto g = f.string("grammar")) {
    r.grammar = compile(*g, "grammar");
    ++given;
  }
  if (const auto* v = f.find("json_schema")) {
    if (!v->is_object() && !v->is_boolean()) throw invalid_field("json_schema", "must be a JSON Schema (an object)");
    r.grammar = schema_grammar(ordered_field(*v, ordered, "json_schema"), "json_schema");
    ++given;
  }
  (void)body;
  if (given > 1) throw invalid_field("grammar", "give one of response_format, grammar and json_schema");
  if (given == 1) {
    r.grammar_field = f.has("grammar") ? "grammar" : f.has("json_schema") ? "json_schema" : "response_format";
  }
}

// tools, tool_choice, parallel_tool_calls. A forced choice (required, named) becomes the request's grammar.
void parse_tools(const JsonFields& f, const nlohmann::ordered_json* ordered, InferRequest& r) {
  for (const char* legacy : {"functions", "function_call"}) {
    if (f.has(legacy)) throw unsupported(legacy, "the legacy functions API is not supported; send \"tools\"");
  }
  if (auto p = f.boolean("parallel_tool_calls")) r.parallel_tool_calls = *p;
  const nlohmann::json* tools = f.find("tools");
  std::map<std::string, nlohmann::ordered_json> params;  // name -> parameters schema
  if (tools) {
    if (!tools->is_array()) throw invalid_field("tools", "must be an array of tools");
    if (tools->empty()) throw invalid_field("tools", "must not be empty (leave it out instead)");
    if (tools->size() > 128) throw invalid_field("tools", "has more than 128 tools");
    const nlohmann::ordered_json all = ordered_field(*tools, ordered, "tools");
    for (size_t i = 0; i < all.size(); ++i) {
      const std::string at = fmt::format("tools[{}]", i);
      const nlohmann::ordered_json& t = all[i];
      if (!t.is_object()) throw invalid_field(at, "must be an object {\"type\": \"function\", \"function\": {...}}");
      if (t.value("type", "function") != "function") throw invalid_field(at + ".type", "must be \"function\"");
      if (!t.contains("function") || !t["function"].is_object()) throw invalid_field(at + ".function", "is required");
      const nlohmann::ordered_json& fn = t["function"];
      if (!fn.contains("name") || !fn["name"].is_string()) throw invalid_field(at + ".function.name", "is required");
      const std::string name = fn["name"].get<std::string>();
      const bool ok_name = !name.empty() && name.size() <= 64 &&
                           name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") ==
                               std::string::npos;
      if (!ok_name) throw invalid_field(at + ".function.name", "must be 1 to 64 of a-z, A-Z, 0-9, _, - and .");
      if (params.count(name)) throw invalid_field(at + ".function.name", "\"" + name + "\" is defined twice");
      if (fn.contains("parameters") && !fn["parameters"].is_null() && !fn["parameters"].is_object()) {
        throw invalid_field(at + ".function.parameters", "must be a JSON Schema object");
      }
      params[name] = fn.contains("parameters") && fn["parameters"].is_object()
                         ? fn["parameters"]
                         : nlohmann::ordered_json{{"type", "object"}, {"properties", nlohmann::ordered_json::object()}};
    }
    r.tools = all;
  }
  const nlohmann::json* choice = f.find("tool_choice");
  if (!choice) {
    r.tool_choice = tools ? ToolChoice::Auto : ToolChoice::None;
  } else if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") r.tool_choice = ToolChoice::None;
    else if (c == "auto") r.tool_choice = ToolChoice::Auto;
    else if (c == "required") r.tool_choice = ToolChoice::Required;
    else throw invalid_field("tool_choice", "must be none, auto, required or {\"type\": \"function\", ...}, got \"" + c + "\"");
  } else if (choice->is_object()) {
    const JsonFields cf(*choice);
    const nlohmann::json* fn = cf.find("function");
    if (!fn || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
      throw invalid_field("tool_choice", "must name a function: {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    r.tool_choice = ToolChoice::Named;
    r.tool_name = (*fn)["name"].get<std::string>();
  } else {
    throw invalid_field("tool_choice", "must be a string or an object, got " + JsonFields::describe(*choice));
  }
  if (r.tool_choice != ToolChoice::None && !tools) throw invalid_field("tool_choice", "needs \"tools\"");
  if (r.tool_choice == ToolChoice::Named && !params.count(r.tool_name)) {
    throw invalid_field("tool_choice", "names the function \"" + r.tool_name + "\", which is not among the tools");
  }
  if (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named) {
    if (r.grammar) throw invalid_field("tool_choice", "a forced tool call cannot be combined with " + r.grammar_field);
    nlohmann::ordered_json schema;
    if (r.tool_choice == ToolChoice::Named) {
      schema = params[r.tool_name];
    } else {
      nlohmann::ordered_json any = nlohmann::ordered_json::array();
      for (const auto& t : r.tools) {
        const std::string name = t["function"]["name"].get<std::string>();
        any.push_back({{"type", "object"},
                       {"properties", {{"name", {{"const", name}}}, {"parameters", params[name]}}},
                       {"required", {"name", "parameters"}}});
      }
      schema = {{"type", "array"}, {"items", {{"anyOf", any}}}, {"minItems", 1}};
      if (!r.parallel_tool_calls) schema["maxItems"] = 1;
    }
    try {
      r.grammar = llm::grammar::Grammar::parse(llm::grammar::json_schema_to_gbnf(schema));
    } catch (const Error& e) {
      throw invalid_field("tools", "the parameters cannot be enforced: " + e.message());
    }
    r.grammar_field = "tools";
  }
  if (r.tool_choice == ToolChoice::None) r.tools = nullptr;  // the model is not shown tools it may not call
}

// OpenAI's fields for things this worker does not do.
void refuse_openai_extras(const JsonFields& f, const InferRequest& r) {
  if (auto b = f.integer("best_of", 1, kMaxChoices); b && *b != r.n) {
    throw unsupported("best_of", "best_of must equal n (no server-side ranking of extra choices)");
  }
  if (f.has("suffix")) throw unsupported("suffix", "suffix (fill-in-the-middle) is not supported");
}

void parse_openai_common(const JsonFields& f, const nlohmann::json& body, const nlohmann::ordered_json* ordered,
                         InferRequest& r) {
  if (auto m = f.string("model")) r.model = *m;
  parse_sampling(f, r);
  refuse_openai_extras(f, r);
  parse_output_format(f, body, ordered, r);
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

// An assistant message's tool_calls, as templates expect them: arguments as an object where they parse as one.
nlohmann::ordered_json parse_tool_calls(const nlohmann::json& calls, const std::string& where) {
  if (!calls.is_array()) throw invalid_field(where, "must be an array of tool calls");
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", where, i);
    if (!calls[i].is_object()) throw invalid_field(at, "must be an object");
    const JsonFields cf(calls[i]);
    const auto type = cf.string("type").value_or("function");
    if (type != "function") throw invalid_field(at + ".type", "must be \"function\", got \"" + type + "\"");
    const nlohmann::json* fn = cf.find("function");
    if (!fn || !fn->is_object()) throw invalid_field(at + ".function", "must be an object {name, arguments}");
    const JsonFields ff(*fn);
    const nlohmann::json* name_v = ff.find("name");
    if (!name_v || !name_v->is_string()) throw invalid_field(at + ".function.name", "is required (a string)");
    const std::string name = name_v->get<std::string>();
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    if (const auto* a = ff.find("arguments")) {
      if (a->is_string()) {
        const std::string& text = a->get_ref<const std::string&>();
        try {
          args = text.empty() ? nlohmann::ordered_json::object() : nlohmann::ordered_json::parse(text);
        } catch (const nlohmann::json::exception&) {
          args = text;  // not JSON: the template gets the text as it is
        }
      } else if (a->is_object()) {
        args = nlohmann::ordered_json::parse(a->dump());
      } else {
        throw invalid_field(at + ".function.arguments", "must be a JSON string (or an object)");
      }
    }
    nlohmann::ordered_json call = nlohmann::ordered_json::object();
    call["id"] = cf.string("id").value_or(fmt::format("call_{}", i));
    call["type"] = "function";
    call["function"] = {{"name", name}, {"arguments", std::move(args)}};
    out.push_back(std::move(call));
  }
  return out;
}

nlohmann::ordered_json parse_messages(const nlohmann::json& m) {
  if (!m.is_array() || m.empty()) throw invalid_field("messages", "must be a non-empty array of messages");
  if (m.size() > kMaxMessages) throw invalid_field("messages", fmt::format("has more than {} entries", kMaxMessages));
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string where = fmt::format("messages[{}]", i);
    const auto& msg = m[i];
    if (!msg.is_object()) throw invalid_field(where, "must be an object, got " + JsonFields::describe(msg));
    const JsonFields mf(msg);
    const nlohmann::json* role = mf.find("role");
    if (!role || !role->is_string()) throw invalid_field(where + ".role", "must be a string");
    std::string r_name = role->get<std::string>();
    if (r_name == "developer") r_name = "system";
    if (r_name != "system" && r_name != "user" && r_name != "assistant" && r_name != "tool") {
      throw invalid_field(where + ".role", "must be system, user, assistant or tool, got \"" + r_name + "\"");
    }
    nlohmann::ordered_json o = nlohmann::ordered_json::object();
    o["role"] = r_name;
    const nlohmann::json* content = mf.find("content");
    const nlohmann::json* calls = mf.find("tool_calls");
    if (calls && r_name != "assistant") throw invalid_field(where + ".tool_calls", "only assistant messages make tool calls");
    if (content) o["content"] = message_content(*content, where + ".content");
    else if (r_name == "assistant") o["content"] = nullptr;
    else throw invalid_field(where + ".content", "is required");
    if (calls) {
      nlohmann::ordered_json parsed = parse_tool_calls(*calls, where + ".tool_calls");
      if (!parsed.empty()) o["tool_calls"] = std::move(parsed);
    }
    if (auto id = mf.string("tool_call_id")) {
      if (r_name != "tool") throw invalid_field(where + ".tool_call_id", "belongs to tool messages");
      o["tool_call_id"] = *id;
    }
    if (auto name = mf.string("name")) o["name"] = *name;
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace

InferRequest parse_job_request(const nlohmann::json& body, const nlohmann::ordered_json* ordered) {
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
  const nlohmann::json* p = f.find("prompt");
  const nlohmann::json* m = f.find("messages");
  if (p && m) throw invalid_field("messages", "give either \"prompt\" or \"messages\", not both");
  if (m) {
    r.messages = parse_messages(*m);
  } else if (!p) {
    throw invalid_field("prompt", "is required (a string or token ids; or send \"messages\")");
  } else if (p->is_string()) {
    r.prompts.push_back({p->get<std::string>(), {}, false});
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
    r.prompts.push_back({"", parse_ids(*p, "prompt"), true});
  } else {
    throw invalid_field("prompt", "must be a string or an array of token ids, got " + JsonFields::describe(*p));
  }
  parse_template_options(f, ordered, r);
  parse_sampling(f, r);
  parse_chat_logprobs(f, r);
  parse_output_format(f, body, ordered, r);
  if (r.n != 1) throw unsupported("n", "a job has one result; send several jobs");
  check_max_tokens(r);
  r.stream = f.boolean("stream").value_or(true);
  return r;
}

InferRequest parse_completion_request(const nlohmann::json& body, const nlohmann::ordered_json* ordered) {
  const JsonFields f(body);
  InferRequest r;
  r.api = Api::Completions;
  const nlohmann::json* p = f.find("prompt");
  if (!p) throw invalid_field("prompt", "is required");
  if (p->is_string()) {
    r.prompts.push_back({p->get<std::string>(), {}, false});
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
    r.prompts.push_back({"", parse_ids(*p, "prompt"), true});
  } else if (p->is_array() && !p->empty()) {
    // A batch: strings or arrays of token ids, one choice group each.
    if (p->size() > kMaxPrompts) throw invalid_field("prompt", fmt::format("has more than {} prompts", kMaxPrompts));
    for (size_t i = 0; i < p->size(); ++i) {
      const auto& one = (*p)[i];
      const std::string where = fmt::format("prompt[{}]", i);
      if (one.is_string()) r.prompts.push_back({one.get<std::string>(), {}, false});
      else if (one.is_array() && !one.empty()) r.prompts.push_back({"", parse_ids(one, where), true});
      else throw invalid_field(where, "must be a string or a non-empty array of token ids, got " + JsonFields::describe(one));
    }
  } else {
    throw invalid_field("prompt", "must be a string, an array of strings, token ids or arrays of token ids, got " +
                                      JsonFields::describe(*p));
  }
  parse_openai_common(f, body, ordered, r);
  for (const char* name : {"tools", "tool_choice"}) {
    if (f.has(name)) throw unsupported(name, "tools belong to chat completions (a text prompt has no template)");
  }
  if (const auto* v = f.find("logprobs")) {
    if (v->is_boolean()) {
      if (v->get<bool>()) r.top_logprobs = 0;
    } else {
      r.top_logprobs = *f.integer("logprobs", 0, kMaxTopLogprobs);
    }
  }
  if (auto e = f.boolean("echo")) r.echo = *e;
  check_max_tokens(r);
  if (!r.max_tokens) r.max_tokens = 16;  // OpenAI's default for completions
  return r;
}

InferRequest parse_chat_request(const nlohmann::json& body, const nlohmann::ordered_json* ordered) {
  const JsonFields f(body);
  InferRequest r;
  r.api = Api::Chat;
  const nlohmann::json* m = f.find("messages");
  if (!m) throw invalid_field("messages", "is required");
  r.messages = parse_messages(*m);
  parse_template_options(f, ordered, r);
  parse_openai_common(f, body, ordered, r);
  parse_tools(f, ordered, r);
  parse_chat_logprobs(f, r);
  if (auto v = f.integer("max_completion_tokens", 1, kMaxTokensLimit)) r.max_tokens = *v;
  check_max_tokens(r);
  return r;
}

TokenizeRequest parse_tokenize_request(const nlohmann::json& body, const nlohmann::ordered_json* ordered) {
  const JsonFields f(body);
  TokenizeRequest t;
  InferRequest& r = t.prompt;
  if (auto m = f.string("model")) r.model = *m;
  const nlohmann::json* text = f.find("prompt");
  const char* text_field = "prompt";
  if (!text) {
    text = f.find("content");  // llama.cpp's name
    text_field = "content";
  }
  const nlohmann::json* m = f.find("messages");
  if (text && m) throw invalid_field("messages", "give either \"prompt\" or \"messages\", not both");
  if (m) {
    r.messages = parse_messages(*m);
    parse_template_options(f, ordered, r);
    parse_tools(f, ordered, r);
  } else if (!text) {
    throw invalid_field("prompt", "is required (a string; or send \"messages\")");
  } else if (!text->is_string()) {
    throw invalid_field(text_field, "must be a string, got " + JsonFields::describe(*text));
  } else {
    r.prompts.push_back({text->get<std::string>(), {}, false});
  }
  if (auto v = f.boolean("add_special_tokens")) r.add_special_tokens = *v;
  if (auto v = f.boolean("add_special")) r.add_special_tokens = *v;  // llama.cpp's name
  if (auto v = f.boolean("parse_special")) r.parse_special = *v;
  if (auto v = f.boolean("return_token_strs")) t.return_token_strs = *v;
  if (auto v = f.boolean("with_pieces")) t.return_token_strs = *v;  // llama.cpp's name
  return t;
}

DetokenizeRequest parse_detokenize_request(const nlohmann::json& body) {
  const JsonFields f(body);
  DetokenizeRequest d;
  const nlohmann::json* t = f.find("tokens");
  if (!t) throw invalid_field("tokens", "is required (an array of token ids)");
  if (!t->is_array()) throw invalid_field("tokens", "must be an array of token ids, got " + JsonFields::describe(*t));
  if (t->size() > (size_t)kMaxTokensLimit) throw invalid_field("tokens", "is too long");
  d.tokens = parse_ids(*t, "tokens");
  if (auto v = f.boolean("skip_special_tokens")) d.skip_special_tokens = *v;
  return d;
}

EmbeddingRequest parse_embedding_request(const nlohmann::json& body) {
  const JsonFields f(body);
  EmbeddingRequest e;
  if (auto m = f.string("model")) e.model = *m;
  const nlohmann::json* in = f.find("input");
  if (!in) throw invalid_field("input", "is required (a string, an array of strings, token ids or arrays of ids)");
  if (in->is_string()) {
    e.inputs.push_back({in->get<std::string>(), {}, false});
  } else if (in->is_array() && !in->empty() && (*in)[0].is_number()) {
    e.inputs.push_back({"", parse_ids(*in, "input"), true});
  } else if (in->is_array() && !in->empty()) {
    if (in->size() > 2048) throw invalid_field("input", "has more than 2048 inputs");
    for (size_t i = 0; i < in->size(); ++i) {
      const auto& one = (*in)[i];
      const std::string where = fmt::format("input[{}]", i);
      if (one.is_string()) e.inputs.push_back({one.get<std::string>(), {}, false});
      else if (one.is_array() && !one.empty()) e.inputs.push_back({"", parse_ids(one, where), true});
      else throw invalid_field(where, "must be a string or a non-empty array of token ids, got " + JsonFields::describe(one));
    }
  } else {
    throw invalid_field("input", "must be a string, an array of strings, token ids or arrays of ids, got " +
                                     JsonFields::describe(*in));
  }
  for (size_t i = 0; i < e.inputs.size(); ++i) {
    if (!e.inputs[i].is_ids && e.inputs[i].text.empty()) {
      throw invalid_field(e.inputs.size() > 1 ? fmt::format("input[{}]", i) : "input", "must not be empty");
    }
  }
  if (auto fmt_name = f.string("encoding_format")) {
    if (*fmt_name == "base64") e.base64 = true;
    else if (*fmt_name != "float") throw invalid_field("encoding_format", "must be float or base64, got \"" + *fmt_name + "\"");
  }
  if (auto d = f.integer("dimensions", 1, 1 << 20)) e.dimensions = *d;
  return e;
}

}  // namespace rbee::server::llm_api
