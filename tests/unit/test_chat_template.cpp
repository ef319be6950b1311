// Chat templates: our Jinja interpreter against goldens rendered by transformers + Jinja2
// (tools/goldens/make_chat_template_goldens.py), byte for byte, for the official templates of Llama 3.x,
// Qwen2.5/3, SmolLM2/3, Gemma 2, Phi-3.5, Mistral-Nemo and others, our built-in fallbacks, and one small
// template per interpreter feature; plus error paths (positions, raise_exception, Undefined), limits, the
// fallback logic of apply_chat_template, thread safety, and robustness against malformed templates.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/source_dir.h"
#include "rbee/core/error.h"
#include "rbee/llm/chat_template.h"

namespace rbee::llm {
namespace {

using ojson = nlohmann::ordered_json;

const std::string kDataDir = test::source_dir() + "/tests/data/chat_templates/";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const ojson& goldens() {
  static const ojson data = ojson::parse(read_file(kDataDir + "goldens.json"));
  return data;
}

const ojson& features() {
  static const ojson data = ojson::parse(read_file(kDataDir + "features.json"));
  return data;
}

// The fixed local time the goldens were rendered at ("2025-04-01T12:30:45"), for strftime_now().
ChatRenderOptions golden_options(const ojson& data) {
  std::tm tm{};
  const std::string iso = data["now"].get<std::string>();
  if (std::sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                  &tm.tm_sec) != 6)
    throw std::runtime_error("bad 'now' in golden file: " + iso);
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const std::time_t t = timegm(&tm);  // normalizes and fills tm_wday / tm_yday
  gmtime_r(&t, &tm);
  return ChatRenderOptions{tm};
}

// The template source a golden case names: a file of tests/data/chat_templates or a built-in family.
std::string template_source(const std::string& name) {
  const ojson& t = goldens()["templates"][name];
  if (t.contains("builtin")) return builtin_chat_template(t["builtin"].get<std::string>());
  return read_file(kDataDir + t["file"].get<std::string>());
}

std::string render(std::string_view source, const ojson& context, const ChatRenderOptions& options = {}) {
  return ChatTemplate::parse(source).render(context, options);
}

std::string sanitize(std::string s) {
  for (char& c : s)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

// ---- goldens: every template x conversation ----------------------------------------------------------

class ChatTemplateGolden : public ::testing::TestWithParam<size_t> {};

std::vector<size_t> golden_indices() {
  std::vector<size_t> out;
  try {
    for (size_t i = 0; i < goldens()["cases"].size(); ++i) out.push_back(i);
  } catch (const std::exception&) {
    // Reported by ChatTemplateData.GoldensLoad.
  }
  return out;
}

TEST(ChatTemplateData, GoldensLoad) {
  ASSERT_GE(goldens()["cases"].size(), 100u);
  ASSERT_GE(features()["features"].size(), 100u);
}

TEST_P(ChatTemplateGolden, MatchesTransformers) {
  const ojson& c = goldens()["cases"][GetParam()];
  const std::string name = c["template"].get<std::string>();
  SCOPED_TRACE(name + " x " + c["conversation"].get<std::string>());
  const std::string source = template_source(name);
  const ChatRenderOptions options = golden_options(goldens());
  if (c.contains("expected")) {
    EXPECT_EQ(render(source, c["context"], options), c["expected"].get<std::string>());
    return;
  }
  const std::string type = c["error"]["type"].get<std::string>();
  try {
    const std::string out = render(source, c["context"], options);
    ADD_FAILURE() << "expected " << type << ", rendered: " << out;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    if (type == "TemplateError") {
      EXPECT_EQ(e.message(), c["error"]["message"].get<std::string>());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, ChatTemplateGolden, ::testing::ValuesIn(golden_indices()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           const ojson& c = goldens()["cases"][info.param];
                           return sanitize(c["template"].get<std::string>() + "_" +
                                           c["conversation"].get<std::string>());
                         });

// ---- apply_chat_template over the same conversations -------------------------------------------------

std::string family_of(const std::string& template_name) {
  if (template_name.rfind("builtin:", 0) == 0) return template_name.substr(8);
  if (template_name.rfind("llama-3", 0) == 0) return "llama3";
  if (template_name == "gemma-2") return "gemma";
  if (template_name == "phi-3.5") return "phi3";
  if (template_name == "mistral-nemo") return "mistral";
  return "chatml";
}

const ojson* find_case(const std::string& template_name, const std::string& conversation) {
  for (const ojson& c : goldens()["cases"])
    if (c["template"] == template_name && c["conversation"] == conversation) return &c;
  return nullptr;
}

TEST(ChatTemplateApply, ReproducesGoldensAndFallsBackOnTemplateErrors) {
  int rendered = 0;
  int fell_back = 0;
  for (const ojson& c : goldens()["cases"]) {
    if (!c["apply"].get<bool>()) continue;
    const std::string name = c["template"].get<std::string>();
    SCOPED_TRACE(name + " x " + c["conversation"].get<std::string>());
    const ojson& ctx = c["context"];
    std::vector<ChatMessage> messages;
    for (const ojson& m : ctx["messages"]) messages.push_back({m["role"], m["content"]});
    nlohmann::json extra = nlohmann::json::object();
    for (auto it = ctx.begin(); it != ctx.end(); ++it) {
      static const char* kStandard[] = {"messages", "tools", "documents", "add_generation_prompt", "bos_token",
                                        "eos_token"};
      if (std::find(std::begin(kStandard), std::end(kStandard), it.key()) == std::end(kStandard))
        extra[it.key()] = it.value();
    }
    const std::string family = family_of(name);
    const std::string out = apply_chat_template(template_source(name), family, messages,
                                                ctx["add_generation_prompt"].get<bool>(), ctx["bos_token"],
                                                ctx["eos_token"], extra, golden_options(goldens()));
    if (c.contains("expected")) {
      EXPECT_EQ(out, c["expected"].get<std::string>());
      ++rendered;
      continue;
    }
    // The model's template refused the conversation: the result is the built-in family template's golden,
    // when that golden was rendered with the same special tokens.
    const ojson* builtin = find_case("builtin:" + family, c["conversation"].get<std::string>());
    ASSERT_NE(builtin, nullptr);
    if (builtin->contains("expected") && builtin->at("context")["bos_token"] == ctx["bos_token"] &&
        builtin->at("context")["eos_token"] == ctx["eos_token"]) {
      EXPECT_EQ(out, builtin->at("expected").get<std::string>());
      ++fell_back;
    }
  }
  EXPECT_GE(rendered, 100);
  EXPECT_GE(fell_back, 5);  // gemma-2 refuses system messages; the gemma built-in merges them
}

// The built-in templates reproduce the official template of their family on the conversations it accepts.
TEST(ChatTemplateBuiltin, MatchesOfficialFamilyTemplates) {
  struct Pair {
    const char* builtin;
    const char* official;
    std::vector<std::string> conversations;
  };
  const std::vector<std::string> with_system = {"system_user", "multi_turn", "unicode", "jinja_like",
                                                "empty_content"};
  const std::vector<std::string> without_system = {"no_system", "no_system_no_gen", "single_user_no_gen",
                                                   "whitespace"};
  std::vector<std::string> all = with_system;
  all.insert(all.end(), without_system.begin(), without_system.end());
  const std::vector<Pair> pairs = {
      {"chatml", "qwen-2.5", with_system}, {"chatml", "smollm2", with_system}, {"gemma", "gemma-2", without_system},
      {"phi3", "phi-3.5", all},            {"mistral", "mistral-nemo", all},
  };
  int compared = 0;
  for (const Pair& p : pairs) {
    for (const std::string& conv : p.conversations) {
      SCOPED_TRACE(std::string(p.builtin) + " vs " + p.official + " x " + conv);
      const ojson* official = find_case(p.official, conv);
      ASSERT_NE(official, nullptr);
      ASSERT_TRUE(official->contains("expected"));
      ojson ctx = official->at("context");
      EXPECT_EQ(render(builtin_chat_template(p.builtin), ctx, golden_options(goldens())),
                official->at("expected").get<std::string>());
      ++compared;
    }
  }
  EXPECT_EQ(compared, 5 + 5 + 4 + 9 + 9);
}

// ---- interpreter features -----------------------------------------------------------------------------

class ChatTemplateFeature : public ::testing::TestWithParam<size_t> {};

std::vector<size_t> feature_indices() {
  std::vector<size_t> out;
  try {
    for (size_t i = 0; i < features()["features"].size(); ++i) out.push_back(i);
  } catch (const std::exception&) {
  }
  return out;
}

TEST_P(ChatTemplateFeature, MatchesJinja) {
  const ojson& f = features()["features"][GetParam()];
  const std::string source = f["template"].get<std::string>();
  SCOPED_TRACE(source);
  const ojson& ctx = features()["context"];
  const ChatRenderOptions options = golden_options(features());
  if (f.contains("expected")) {
    EXPECT_EQ(render(source, ctx, options), f["expected"].get<std::string>());
    return;
  }
  const std::string type = f["error"]["type"].get<std::string>();
  const std::string jinja_message = f["error"]["message"].get<std::string>();
  const bool syntax = f["name"].get<std::string>().rfind("syn_", 0) == 0;
  try {
    const std::string out = render(source, ctx, options);
    ADD_FAILURE() << "expected " << type << " (" << jinja_message << "), rendered: " << out;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    const std::string what = e.what();
    if (syntax) {
      EXPECT_NE(what.find("chat template syntax error at line "), std::string::npos) << what;
    } else {
      EXPECT_NE(what.find("rendering chat template at line "), std::string::npos) << what;
    }
    if (type == "TemplateError" || type == "UndefinedError") {
      EXPECT_EQ(e.message(), jinja_message);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, ChatTemplateFeature, ::testing::ValuesIn(feature_indices()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return sanitize(features()["features"][info.param]["name"].get<std::string>());
                         });

// ---- error paths ------------------------------------------------------------------------------------------

std::string error_of(std::string_view source, const ojson& ctx = ojson::object()) {
  try {
    render(source, ctx);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "no error for: " << source;
  return "";
}

TEST(ChatTemplateErrors, SyntaxErrorsNameLineAndColumn) {
  EXPECT_NE(error_of("line 1\n{% if x %}\n  {{ 1 + }}\n{% endif %}").find("syntax error at line 3, column 10"),
            std::string::npos);
  // Columns count characters, not bytes.
  EXPECT_NE(error_of("日本{{ ) }}").find("line 1, column 6: unexpected ')'"), std::string::npos);
  EXPECT_NE(error_of("a\r\nb\r\n{% endfor %}").find("line 3, column 4"), std::string::npos);
  const std::string unclosed = error_of("x\n  {% for m in messages %}\n{{ m }}");
  EXPECT_NE(unclosed.find("'endfor'"), std::string::npos) << unclosed;
  EXPECT_NE(unclosed.find("opened at line 2, column 3"), std::string::npos) << unclosed;
  EXPECT_NE(error_of("{{ x | bogus }}").find("no filter named 'bogus'"), std::string::npos);
  EXPECT_NE(error_of("{% include 'x' %}").find("not supported"), std::string::npos);
}

TEST(ChatTemplateErrors, RaiseExceptionKeepsTheMessage) {
  try {
    render("{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}",
           ojson::parse(R"({"messages":[{"role":"system","content":"x"}]})"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_EQ(e.message(), "System role not supported");
    EXPECT_NE(std::string(e.what()).find("line 1, column"), std::string::npos);
  }
}

TEST(ChatTemplateErrors, UndefinedBehavesLikeJinja) {
  // Printing, testing, iterating, defaulting and comparing an undefined value is fine...
  EXPECT_EQ(render("[{{ nope }}][{{ nope is defined }}][{% for x in nope %}x{% endfor %}][{{ nope|default(1) }}]"
                   "[{{ nope == none }}][{{ messages[3] is defined }}]",
                   ojson::parse(R"({"messages":[]})")),
            "[][False][][1][False][False]");
  // ...using it in any other way is an error that names the variable and the position.
  const std::string e1 = error_of("{{ 1 }}\n  {{ nope.x }}");
  EXPECT_NE(e1.find("'nope' is undefined"), std::string::npos) << e1;
  EXPECT_NE(e1.find("line 2, column"), std::string::npos) << e1;
  const std::string e2 = error_of("{{ d.missing.deeper }}", ojson::parse(R"({"d":{}})"));
  EXPECT_NE(e2.find("'dict object' has no attribute 'missing'"), std::string::npos) << e2;
  EXPECT_NE(error_of("{{ nope + 'x' }}").find("'nope' is undefined"), std::string::npos);
}

TEST(ChatTemplateErrors, BadContextAndUnknownFamily) {
  EXPECT_THROW(ChatTemplate::parse("x").render(nlohmann::json::array()), Error);
  try {
    builtin_chat_template("nope");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotFound);
  }
  EXPECT_EQ(builtin_chat_template_families().size(), 6u);
}

// ---- limits: hostile templates fail cleanly --------------------------------------------------------------

TEST(ChatTemplateLimits, HostileTemplatesFailWithErrors) {
  EXPECT_NE(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").find("nests too deeply"),
            std::string::npos);
  std::string deep_blocks;
  for (int i = 0; i < 2000; ++i) deep_blocks += "{% if true %}";
  EXPECT_NE(error_of(deep_blocks).find("nests too deeply"), std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(3000, '-') + "1 }}").find("nests too deeply"), std::string::npos);
  EXPECT_NE(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("recursion"), std::string::npos);
  // The work budget: a quadratic loop stops at max_steps (lowered here to keep the test fast).
  ChatRenderOptions small_budget;
  small_budget.max_steps = 20000;
  try {
    ChatTemplate::parse("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}")
        .render(ojson::object(), small_budget);
    ADD_FAILURE() << "expected the step limit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeded 20000 loop iterations"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ChatTemplate::parse("{% for a in range(150) %}{% for b in range(100) %}{% endfor %}{% endfor %}ok")
                .render(ojson::object(), small_budget),
            "ok");
  EXPECT_NE(error_of("{{ 'a' * 1000000000000 }}").find("exceeds"), std::string::npos);
  EXPECT_NE(error_of("{% set s = 'x' * 40000000 %}{{ s ~ s }}").find("exceeds"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace() %}{% set ns.me = ns %}").find("namespace"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}")
                .find("nest deeper"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ 99999999999999999999 }}").find("64 bits"), std::string::npos);
  // Error messages stay valid UTF-8 even for invalid bytes in the template.
  EXPECT_NE(error_of("{{ \xff }}").find("unexpected character '\\xff'"), std::string::npos);
}

// ---- robustness: malformed templates never crash -------------------------------------------------------

// Renders `source`; any outcome but a value or an rbee::Error is a failure.
void render_must_not_crash(const std::string& source, const ojson& ctx) {
  try {
    ChatTemplate::parse(source).render(ctx);
  } catch (const Error&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-rbee exception " << e.what() << " for template:\n" << source;
  }
}

TEST(ChatTemplateRobustness, MutatedOfficialTemplatesNeverCrash) {
  std::vector<std::string> sources;
  for (const auto& [name, t] : goldens()["templates"].items()) sources.push_back(template_source(name));
  const ojson ctx = goldens()["cases"][0]["context"];
  const std::string fragments[] = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "(", ")", "[", "]", "'", "\"", "|",
                                   "is", "not", "in", "if", "for", "endfor", "endif", "else", ".", ",", ":", "~",
                                   "\n", "loop", "messages", "0", "\xff", "\xe2\x82", "\\"};
  std::mt19937 rng(20240917);
  int iterations = 0;
  for (int it = 0; it < 2500; ++it) {
    std::string s = sources[rng() % sources.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      const size_t pos = rng() % s.size();
      switch (rng() % 4) {
        case 0:
          s.erase(pos, 1 + rng() % 8);
          break;
        case 1:
          s.insert(pos, fragments[rng() % std::size(fragments)]);
          break;
        case 2:
          s[pos] = static_cast<char>(rng() % 256);
          break;
        default: {  // duplicate a slice elsewhere
          const size_t len = std::min<size_t>(1 + rng() % 40, s.size() - pos);
          s.insert(rng() % s.size(), s.substr(pos, len));
        }
      }
    }
    render_must_not_crash(s, ctx);
    ++iterations;
  }
  EXPECT_EQ(iterations, 2500);
}

TEST(ChatTemplateRobustness, RandomTokenSoupNeverCrashes) {
  const std::string pieces[] = {"{{ ", " }}", "{% ", " %}", "{%- ", " -%}", "if ", "elif ", "else", "endif", "for ",
                                " in ", "endfor", "set ", "x", "ns.a", " = ", "namespace(a=1)", "macro m(a)",
                                "endmacro", "m(1)", "messages", "[0]", "[::-1]", ".role", "|tojson", "|trim",
                                "|length", " is defined", " and ", " or ", " not ", "(", ")", "[", "]", "{", "}",
                                "'s'", "1", "2.5", " + ", " ~ ", " * ", " // ", "loop.index", "break", "continue",
                                "raise_exception('r')", "range(3)", "|map(attribute='role')", "|selectattr('x')",
                                "text\n", "  ", "{#", "#}", "filter upper", "endfilter", "raw", "endraw"};
  const ojson ctx = goldens()["cases"][0]["context"];
  std::mt19937 rng(7);
  for (int it = 0; it < 4000; ++it) {
    std::string s;
    const int n = 1 + static_cast<int>(rng() % 30);
    for (int k = 0; k < n; ++k) s += pieces[rng() % std::size(pieces)];
    render_must_not_crash(s, ctx);
  }
}

// ---- API behaviour ----------------------------------------------------------------------------------------

TEST(ChatTemplateApi, KeyOrderFollowsTheContextType) {
  const char* src = "{{ d|tojson }} {% for k, v in d.items() %}{{ k }}{% endfor %}";
  EXPECT_EQ(ChatTemplate::parse(src).render(ojson::parse(R"({"d":{"b":1,"a":2}})")), "{\"b\": 1, \"a\": 2} ba");
  EXPECT_EQ(ChatTemplate::parse(src).render(nlohmann::json::parse(R"({"d":{"b":1,"a":2}})")),
            "{\"a\": 2, \"b\": 1} ab");
}

TEST(ChatTemplateApi, StrftimeNowFormatsTheCurrentLocalTime) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  const std::string year = std::to_string(local.tm_year + 1900);
  const std::string out = render("{{ strftime_now('%Y') }}|{{ strftime_now('%d %b %Y')|length }}", ojson::object());
  EXPECT_EQ(out.substr(0, 4), year);
  EXPECT_EQ(out.substr(4), "|11");
  // Llama 3.2 falls back to strftime_now when no date_string is given.
  const std::string llama = render(read_file(kDataDir + "meta-llama-Llama-3.2-3B-Instruct.jinja"),
                                   ojson::parse(R"({"messages":[{"role":"user","content":"hi"}],"bos_token":""})"));
  EXPECT_NE(llama.find("Today Date: "), std::string::npos);
  EXPECT_NE(llama.find(year + "\n\n"), std::string::npos) << llama;
}

TEST(ChatTemplateApi, ApplyFallbackRules) {
  const std::vector<ChatMessage> msgs = {{"system", "S"}, {"user", "U"}};
  // No template: the family's built-in one.
  EXPECT_EQ(apply_chat_template("", "chatml", msgs, true, "", ""),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
  // A broken template: the family's built-in one.
  EXPECT_EQ(apply_chat_template("{% if %}", "chatml", msgs, false, "", ""),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n");
  // Without a family the model template's error surfaces.
  try {
    apply_chat_template("{{ raise_exception('nope') }}", "", msgs, true, "", "");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "nope");
  }
  EXPECT_THROW(apply_chat_template("", "", msgs, true, "", ""), Error);
  // A fallback that fails too reports both.
  try {
    apply_chat_template("{% if %}", "llama2", {{"tool", "t"}}, true, "<s>", "</s>");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("built-in 'llama2'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(apply_chat_template("{% if %}", "unknown-family", msgs, true, "", ""), Error);
  // extra_context reaches the template and can override the standard keys.
  EXPECT_EQ(apply_chat_template("{{ date_string }}|{{ bos_token }}", "", msgs, true, "<s>", "",
                                nlohmann::json{{"date_string", "1 Jan 2025"}, {"bos_token", "B"}}),
            "1 Jan 2025|B");
}

TEST(ChatTemplateApi, ParsedTemplateRendersConcurrently) {
  const ChatTemplate tpl = ChatTemplate::parse(read_file(kDataDir + "Qwen-Qwen3-0.6B.jinja"));
  const ojson* c = find_case("qwen-3", "multi_turn");
  ASSERT_NE(c, nullptr);
  const std::string expected = c->at("expected").get<std::string>();
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) ok[t] += tpl.render(c->at("context")) == expected ? 1 : 0;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[t], 50);
}

}  // namespace
}  // namespace rbee::llm
