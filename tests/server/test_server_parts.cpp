// The HTTP-side pieces without a server: Prometheus text, SSE framing, field validation, request parsing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "rbee/core/error.h"
#include "server/api_error.h"
#include "server/heartbeat.h"
#include "server/json_fields.h"
#include "server/llm/requests.h"
#include "server/metrics.h"
#include "server/sse.h"
#include "server/util.h"

namespace rbee::server {
namespace {

using nlohmann::json;

TEST(Metrics, RendersPrometheusText) {
  Metrics m;
  m.describe_counter("x_requests_total", "Requests.");
  m.describe_gauge("x_depth", "Depth.");
  m.describe_histogram("x_latency_seconds", "Latency.", {0.1, 1.0});
  m.add("x_requests_total", 1, {{"route", "/a"}, {"status", "200"}});
  m.add("x_requests_total", 2, {{"route", "/a"}, {"status", "200"}});
  m.add("x_requests_total", 1, {{"route", "q\"\\\n"}});
  m.set("x_depth", 7);
  for (double v : {0.05, 0.1, 0.5, 3.0}) m.observe("x_latency_seconds", v);
  const std::string text = m.render();
  const std::string want =
      "# HELP x_depth Depth.\n# TYPE x_depth gauge\nx_depth 7\n"
      "# HELP x_latency_seconds Latency.\n# TYPE x_latency_seconds histogram\n"
      "x_latency_seconds_bucket{le=\"0.1\"} 2\nx_latency_seconds_bucket{le=\"1\"} 3\n"
      "x_latency_seconds_bucket{le=\"+Inf\"} 4\nx_latency_seconds_sum 3.65\nx_latency_seconds_count 4\n"
      "# HELP x_requests_total Requests.\n# TYPE x_requests_total counter\n"
      "x_requests_total{route=\"/a\",status=\"200\"} 3\nx_requests_total{route=\"q\\\"\\\\\\n\"} 1\n";
  EXPECT_EQ(text, want);
  EXPECT_EQ(m.value("x_requests_total", {{"route", "/a"}, {"status", "200"}}), 3);
  EXPECT_THROW(m.add("undeclared"), Error);
  EXPECT_THROW(m.set("x_requests_total", 1), Error) << "a counter is not a gauge";
}

TEST(Sse, Framing) {
  EXPECT_EQ(sse_data(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_data_text("x\ny"), "data: x\ndata: y\n\n");
  EXPECT_EQ(sse_event("progress", json{{"step", 2}}), "event: progress\ndata: {\"step\":2}\n\n");
  EXPECT_EQ(sse_comment("ping"), ": ping\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  // Text with a newline inside a JSON string stays on one data line (escaped).
  EXPECT_EQ(sse_data(json{{"t", "a\nb"}}), "data: {\"t\":\"a\\nb\"}\n\n");
}

TEST(Util, IdsTimestampsAndComparison) {
  const std::string a = random_id("job"), b = random_id("job");
  EXPECT_NE(a, b);
  EXPECT_EQ(a.size(), 4u + 24u);
  EXPECT_EQ(iso8601_utc(std::chrono::system_clock::time_point(std::chrono::milliseconds(1700000000123))),
            "2023-11-14T22:13:20.123Z");
  EXPECT_TRUE(constant_time_equal("Bearer abc", "Bearer abc"));
  EXPECT_FALSE(constant_time_equal("Bearer abd", "Bearer abc"));
  EXPECT_FALSE(constant_time_equal("Bearer ab", "Bearer abc"));
  EXPECT_FALSE(constant_time_equal("", "x"));
}

TEST(Heartbeat, SplitsHiveUrl) {
  EXPECT_EQ(split_base_url("http://127.0.0.1:9200"), std::make_pair(std::string("http://127.0.0.1:9200"), std::string()));
  EXPECT_EQ(split_base_url("http://hive:9200/api/"), std::make_pair(std::string("http://hive:9200"), std::string("/api")));
  EXPECT_THROW(split_base_url("hive:9200"), Error);
  EXPECT_THROW(split_base_url("ftp://hive"), Error);
  EXPECT_THROW(split_base_url("http:///x"), Error);
}

// Runs `fn`, expecting ApiError with this status whose param (the field) is `field`.
template <typename Fn>
void expect_api_error(Fn fn, int status, const std::string& field, const std::string& context) {
  try {
    fn();
    ADD_FAILURE() << context << ": no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), status) << context << ": " << e.message();
    EXPECT_EQ(e.param(), field) << context << ": " << e.message();
    if (!field.empty()) {
      EXPECT_NE(e.message().find(field), std::string::npos) << context << ": " << e.message();
    }
  }
}

TEST(JsonFields, BodyParsing) {
  expect_api_error([] { parse_json_object("{\"a\":"); }, 400, "", "truncated JSON");
  expect_api_error([] { parse_json_object("[1,2]"); }, 400, "", "array body");
  expect_api_error([] { parse_json_object(std::string("{\"a\":\"\xff\"}")); }, 400, "", "invalid UTF-8");
  expect_api_error([] { parse_json_object(""); }, 400, "", "empty body");
  // Found by fuzz_llm_request: a number beyond double range is valid syntax but makes the parser throw
  // out_of_range, which once escaped as a 500.
  expect_api_error([] { parse_json_object("{\"max_tokens\":1E9999}"); }, 400, "", "number overflow");
  expect_api_error([] { parse_json_object("777777E7777-7777"); }, 400, "", "bare number overflow");
  EXPECT_EQ(parse_json_object(" {\"a\":1} ")["a"], 1);
}

TEST(JsonFields, TypedGetters) {
  const json j = json::parse(R"({"i":3,"f":2.5,"w":4.0,"s":"x","b":true,"n":null,"big":18446744073709551615})");
  const JsonFields f(j);
  EXPECT_EQ(*f.integer("i", 0, 10), 3);
  EXPECT_EQ(*f.integer("w", 0, 10), 4);
  EXPECT_FALSE(f.integer("n", 0, 10).has_value()) << "null counts as absent";
  EXPECT_FALSE(f.integer("missing", 0, 10).has_value());
  expect_api_error([&] { f.integer("f", 0, 10); }, 400, "f", "fractional integer");
  expect_api_error([&] { f.integer("i", 5, 10); }, 400, "i", "below range");
  expect_api_error([&] { f.integer("s", 0, 10); }, 400, "s", "string as integer");
  expect_api_error([&] { f.integer("big", 0, 10); }, 400, "big", "u64 max");
  expect_api_error([&] { f.number("b", 0, 1); }, 400, "b", "bool as number");
  expect_api_error([&] { f.string("i"); }, 400, "i", "number as string");
  expect_api_error([&] { f.boolean("s"); }, 400, "s", "string as bool");
  expect_api_error([&] { f.required_string("missing"); }, 400, "missing", "required");
}

using namespace llm_api;

struct BadCase {
  const char* name;
  const char* body;
  int status;
  const char* field;
};

TEST(Requests, JobRequestTable) {
  const BadCase cases[] = {
      {"missing operation", R"({"prompt":"x","max_tokens":4})", 400, "operation"},
      {"unknown operation", R"({"operation":"image_generation","prompt":"x"})", 400, "operation"},
      {"missing prompt", R"({"operation":"infer","max_tokens":4})", 400, "prompt"},
      {"prompt not a string", R"({"operation":"infer","prompt":5})", 400, "prompt"},
      {"negative max_tokens", R"({"operation":"infer","prompt":"x","max_tokens":-1})", 400, "max_tokens"},
      {"zero max_tokens", R"({"operation":"infer","prompt":"x","max_tokens":0})", 400, "max_tokens"},
      {"huge max_tokens", R"({"operation":"infer","prompt":"x","max_tokens":99999999999})", 400, "max_tokens"},
      {"max_tokens string", R"({"operation":"infer","prompt":"x","max_tokens":"8"})", 400, "max_tokens"},
      {"temperature too high", R"({"operation":"infer","prompt":"x","temperature":7})", 400, "temperature"},
      {"top_p zero", R"({"operation":"infer","prompt":"x","top_p":0})", 400, "top_p"},
      {"top_k negative", R"({"operation":"infer","prompt":"x","top_k":-3})", 400, "top_k"},
      {"min_p > 1", R"({"operation":"infer","prompt":"x","min_p":1.5})", 400, "min_p"},
      {"presence_penalty", R"({"operation":"infer","prompt":"x","presence_penalty":3})", 400, "presence_penalty"},
      {"stop not strings", R"({"operation":"infer","prompt":"x","stop":[1]})", 400, "stop[0]"},
      {"empty stop", R"({"operation":"infer","prompt":"x","stop":[""]})", 400, "stop[0]"},
      {"seed fractional", R"({"operation":"infer","prompt":"x","seed":1.5})", 400, "seed"},
      {"stream not bool", R"({"operation":"infer","prompt":"x","stream":"yes"})", 400, "stream"},
      {"prompt and messages", R"({"operation":"infer","prompt":"x","messages":[{"role":"user","content":"y"}]})", 400,
       "messages"},
      {"token ids not ints", R"({"operation":"infer","prompt":[1,"a"]})", 400, "prompt[1]"},
      {"n > 1", R"({"operation":"infer","prompt":"x","n":2})", 400, "n"},
      {"top_logprobs without logprobs", R"({"operation":"infer","prompt":"x","top_logprobs":2})", 400, "top_logprobs"},
      {"top_logprobs 21", R"({"operation":"infer","prompt":"x","logprobs":true,"top_logprobs":21})", 400,
       "top_logprobs"},
      {"min_tokens > max_tokens", R"({"operation":"infer","prompt":"x","max_tokens":2,"min_tokens":3})", 400,
       "min_tokens"},
      {"stop_token_ids type", R"({"operation":"infer","prompt":"x","stop_token_ids":5})", 400, "stop_token_ids"},
      {"chat_template_kwargs type", R"({"operation":"infer","messages":[{"role":"user","content":"y"}],
          "chat_template_kwargs":[1]})", 400, "chat_template_kwargs"},
  };
  for (const auto& c : cases) {
    expect_api_error([&] { parse_job_request(json::parse(c.body)); }, c.status, c.field, c.name);
  }
  const auto ok = parse_job_request(json::parse(
      R"({"operation":"infer","prompt":"Hi","max_tokens":8,"temperature":0,"top_p":0.9,"top_k":5,"min_p":0.1,
          "repetition_penalty":1.1,"presence_penalty":0.5,"frequency_penalty":-0.5,"seed":7,"stop":["\n","END"],
          "hive_id":"h1","model":"m"})"));
  ASSERT_EQ(ok.prompts.size(), 1u);
  EXPECT_EQ(ok.prompts[0].text, "Hi");
  EXPECT_TRUE(ok.parse_special) << "special-token text is parsed unless the request says otherwise";
  EXPECT_EQ(*ok.max_tokens, 8);
  EXPECT_EQ(ok.temperature, 0);
  EXPECT_EQ(ok.top_k, 5);
  EXPECT_EQ(*ok.seed, 7);
  EXPECT_EQ(ok.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(ok.stream) << "jobs stream unless told otherwise";
  EXPECT_EQ(ok.hive_id, "h1");
  const auto chat_job = parse_job_request(json::parse(
      R"({"operation":"infer","messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Sure,"}],
          "logprobs":true,"top_logprobs":3,"ignore_eos":true,"min_tokens":2,"stop_token_ids":[7],"parse_special":false,
          "chat_template_kwargs":{"enable_thinking":false}})"));
  EXPECT_TRUE(chat_job.prompts.empty());
  ASSERT_EQ(chat_job.messages.size(), 2u);
  EXPECT_EQ(chat_job.messages[1]["content"], "Sure,");
  EXPECT_EQ(chat_job.top_logprobs, 3);
  EXPECT_TRUE(chat_job.ignore_eos);
  EXPECT_EQ(chat_job.min_tokens, 2);
  EXPECT_EQ(chat_job.stop_token_ids, (std::vector<int64_t>{7}));
  EXPECT_FALSE(chat_job.parse_special);
  EXPECT_EQ(chat_job.chat_template_kwargs["enable_thinking"], false);
  const auto ids_job = parse_job_request(json::parse(R"({"operation":"infer","prompt":[5,6,7]})"));
  EXPECT_TRUE(ids_job.prompts.at(0).is_ids);
  EXPECT_EQ(ids_job.prompts[0].ids, (std::vector<int64_t>{5, 6, 7}));
}

TEST(Requests, OpenAiTable) {
  const BadCase completion_cases[] = {
      {"missing prompt", R"({"model":"m"})", 400, "prompt"},
      {"a number among prompts", R"({"prompt":["a",5]})", 400, "prompt[1]"},
      {"empty ids among prompts", R"({"prompt":[[1],[]]})", 400, "prompt[1]"},
      {"prompt object", R"({"prompt":{"a":1}})", 400, "prompt"},
      {"token ids not ints", R"({"prompt":[1,"a"]})", 400, "prompt[1]"},
      {"n = 0", R"({"prompt":"x","n":0})", 400, "n"},
      {"n = 129", R"({"prompt":"x","n":129})", 400, "n"},
      {"best_of", R"({"prompt":"x","best_of":3})", 400, "best_of"},
      {"echo not bool", R"({"prompt":"x","echo":1})", 400, "echo"},
      {"logprobs 21", R"({"prompt":"x","logprobs":21})", 400, "logprobs"},
      {"max_tokens 0 without echo", R"({"prompt":"x","max_tokens":0})", 400, "max_tokens"},
      {"suffix", R"({"prompt":"x","suffix":"y"})", 400, "suffix"},
      {"logit_bias key", R"({"prompt":"x","logit_bias":{"abc":1}})", 400, "logit_bias"},
      {"logit_bias value", R"({"prompt":"x","logit_bias":{"5":500}})", 400, "logit_bias.5"},
      {"logit_bias type", R"({"prompt":"x","logit_bias":[1]})", 400, "logit_bias"},
      {"too many stops", R"({"prompt":"x","stop":["1","2","3","4","5","6","7","8","9","a","b","c","d","e","f","g","h"]})",
       400, "stop"},
      {"stream_options", R"({"prompt":"x","stream_options":3})", 400, "stream_options"},
  };
  for (const auto& c : completion_cases) {
    expect_api_error([&] { parse_completion_request(json::parse(c.body)); }, c.status, c.field, c.name);
  }
  const BadCase chat_cases[] = {
      {"missing messages", R"({"model":"m"})", 400, "messages"},
      {"empty messages", R"({"messages":[]})", 400, "messages"},
      {"message not object", R"({"messages":["hi"]})", 400, "messages[0]"},
      {"bad role", R"({"messages":[{"role":"wizard","content":"x"}]})", 400, "messages[0].role"},
      {"missing content", R"({"messages":[{"role":"user"}]})", 400, "messages[0].content"},
      {"image part", R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})", 400,
       "messages[0].content[0].type"},
      {"tools", R"({"messages":[{"role":"user","content":"x"}],"tools":[]})", 400, "tools"},
      {"response_format xml", R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}})", 400,
       "response_format"},
      {"schema keyword", R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema",
          "json_schema":{"name":"s","schema":{"type":"array","uniqueItems":true}}}})", 400, "response_format"},
      {"unknown tool_choice", R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function",
          "function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}})", 400, "tool_choice"},
      {"tool_choice without tools", R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required"})", 400,
       "tool_choice"},
      {"tool name", R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function",
          "function":{"name":"a b"}}]})", 400, "tools[0].function.name"},
      {"forced tool and schema", R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function",
          "function":{"name":"f"}}],"tool_choice":"required","response_format":{"type":"json_object"}})", 400,
       "tool_choice"},
      {"legacy functions", R"({"messages":[{"role":"user","content":"x"}],"functions":[]})", 400, "functions"},
      {"max_completion_tokens", R"({"messages":[{"role":"user","content":"x"}],"max_completion_tokens":-5})", 400,
       "max_completion_tokens"},
      {"top_logprobs 21", R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})", 400,
       "top_logprobs"},
      {"top_logprobs alone", R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", 400, "top_logprobs"},
      {"n = 0", R"({"messages":[{"role":"user","content":"x"}],"n":0})", 400, "n"},
      {"tool_calls on a user message", R"({"messages":[{"role":"user","content":"x","tool_calls":[]}]})", 400,
       "messages[0].tool_calls"},
      {"tool call without name", R"({"messages":[{"role":"user","content":"x"},
          {"role":"assistant","tool_calls":[{"type":"function","function":{"arguments":"{}"}}]}]})", 400,
       "messages[1].tool_calls[0].function.name"},
      {"prefill and generation prompt", R"({"messages":[{"role":"user","content":"x"}],
          "add_generation_prompt":true,"continue_final_message":true})", 400, "continue_final_message"},
  };
  for (const auto& c : chat_cases) {
    expect_api_error([&] { parse_chat_request(json::parse(c.body)); }, c.status, c.field, c.name);
  }
  const auto c = parse_completion_request(json::parse(R"({"prompt":[[1,2,3]],"logit_bias":{"42":-100},"n":1})"));
  ASSERT_EQ(c.prompts.size(), 1u);
  EXPECT_TRUE(c.prompts[0].is_ids);
  EXPECT_EQ(c.prompts[0].ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(c.top_logprobs, -1);
  const auto batch = parse_completion_request(
      json::parse(R"({"prompt":["a",[4,5],"b"],"n":3,"best_of":3,"logprobs":5,"echo":true,"max_tokens":0})"));
  ASSERT_EQ(batch.prompts.size(), 3u);
  EXPECT_FALSE(batch.prompts[0].is_ids);
  EXPECT_TRUE(batch.prompts[1].is_ids);
  EXPECT_EQ(batch.n, 3);
  EXPECT_EQ(batch.top_logprobs, 5);
  EXPECT_TRUE(batch.echo);
  EXPECT_EQ(*batch.max_tokens, 0) << "echo with max_tokens 0: the prompt's logprobs only";
  EXPECT_EQ(*c.max_tokens, 16) << "OpenAI's completions default";
  ASSERT_EQ(c.logit_bias.size(), 1u);
  EXPECT_EQ(c.logit_bias[0].first, 42);
  const auto chat = parse_chat_request(json::parse(
      R"({"messages":[{"role":"developer","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"}]}],
          "stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":9})"));
  ASSERT_EQ(chat.messages.size(), 2u);
  EXPECT_EQ(chat.messages[0]["role"], "system");
  EXPECT_EQ(chat.messages[1]["content"], "Hi");
  EXPECT_TRUE(chat.include_usage);
  EXPECT_EQ(chat.tool_choice, ToolChoice::None);
  const std::string tools_body =
      R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f",
          "parameters":{"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"string"}}}}}],
          "tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false})";
  const nlohmann::ordered_json tools_ordered = nlohmann::ordered_json::parse(tools_body);
  const auto tools = parse_chat_request(json::parse(tools_body), &tools_ordered);
  EXPECT_EQ(tools.tool_choice, ToolChoice::Named);
  EXPECT_EQ(tools.tool_name, "f");
  ASSERT_TRUE(tools.grammar) << "a named tool constrains the output to its parameters";
  EXPECT_TRUE(rbee::llm::grammar::accepts(*tools.grammar, R"({"z":1,"a":"b"})"));
  EXPECT_FALSE(rbee::llm::grammar::accepts(*tools.grammar, R"({"a":"b","z":1})")) << "parameters keep their order";
  const auto schema = parse_chat_request(json::parse(
      R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema",
          "json_schema":{"name":"s","strict":true,"schema":{"type":"object","properties":{"b":{"type":"boolean"}},
          "required":["b"],"additionalProperties":false}}}})"));
  ASSERT_TRUE(schema.grammar);
  EXPECT_TRUE(rbee::llm::grammar::accepts(*schema.grammar, R"({"b":true})"));
  EXPECT_FALSE(rbee::llm::grammar::accepts(*schema.grammar, R"({"b":1})"));
  EXPECT_EQ(*chat.max_tokens, 9);
  EXPECT_FALSE(chat.max_tokens == std::nullopt);
}

// Every input the fuzzer once crashed on (tests/server/fuzz_regressions/, raw fuzzer inputs: the first byte picks
// the parser as in fuzz/fuzz_llm_request.cpp) must now end in a 4xx ApiError or a parsed request.
TEST(Requests, FuzzRegressions) {
  const std::filesystem::path dir = std::filesystem::path(RBEE_SOURCE_DIR) / "tests/server/fuzz_regressions";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_FALSE(bytes.empty()) << entry.path();
    ++files;
    try {
      const json j = parse_json_object(std::string_view(bytes).substr(1));
      const int which = (unsigned char)bytes[0] % 3;
      if (which == 0) parse_job_request(j);
      else if (which == 1) parse_completion_request(j);
      else parse_chat_request(j);
    } catch (const ApiError& e) {
      EXPECT_GE(e.status(), 400) << entry.path();
      EXPECT_LT(e.status(), 500) << entry.path();
    }
  }
  EXPECT_GE(files, 1);
}

TEST(ApiError, Body) {
  const ApiError e(429, "queue_full", "full", "", 3);
  EXPECT_EQ(e.body()["error"]["code"], "queue_full");
  EXPECT_EQ(e.body()["error"]["type"], "rate_limit_error");
  EXPECT_TRUE(e.body()["error"]["param"].is_null());
  EXPECT_EQ(invalid_field("top_p", "bad").body()["error"]["param"], "top_p");
  // Text that is not UTF-8 never makes JSON output throw.
  EXPECT_NO_THROW(dump_json(json{{"t", std::string("\xff\xfe")}}));
}

}  // namespace
}  // namespace rbee::server
