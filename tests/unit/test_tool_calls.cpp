// Tool-call parsing on recorded outputs of each model family (tests/data/tool_calls/, sources in its README),
// whole and streamed in every chunking; format detection and tool support on the real chat templates.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/source_dir.h"
#include "rbee/llm/tool_calls.h"

namespace rbee::llm {
namespace {

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

const std::filesystem::path kData = std::filesystem::path(test::source_dir()) / "tests/data";

ToolFormat format_named(const std::string& name) {
  if (name == "hermes") return ToolFormat::Hermes;
  if (name == "llama3") return ToolFormat::Llama3;
  if (name == "mistral") return ToolFormat::Mistral;
  return ToolFormat::Json;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \n") - a + 1);
}

void expect_calls(const std::vector<ToolCall>& got, const nlohmann::json& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].name, want[i]["name"].get<std::string>()) << what << " call " << i;
    EXPECT_EQ(nlohmann::json::parse(got[i].arguments), want[i]["arguments"]) << what << " call " << i;
    EXPECT_EQ(got[i].id, want[i].value("id", "")) << what << " call " << i;
  }
}

TEST(ToolCalls, RecordedOutputsParseWhole) {
  const auto cases = nlohmann::json::parse(read(kData / "tool_calls/outputs.json"));
  ASSERT_GE(cases.size(), 15u);
  for (const auto& c : cases) {
    const std::string name = c["name"];
    const ToolOutput out = parse_tool_output(format_named(c["format"]), c["output"].get<std::string>());
    EXPECT_EQ(trim(out.content), c["content"].get<std::string>()) << name;
    expect_calls(out.calls, c["calls"], name);
  }
}

TEST(ToolCalls, RecordedOutputsParseStreamed) {
  const auto cases = nlohmann::json::parse(read(kData / "tool_calls/outputs.json"));
  for (const auto& c : cases) {
    const std::string text = c["output"];
    for (size_t chunk : {1, 3, 7}) {
      ToolCallParser p(format_named(c["format"]));
      std::string content;
      std::vector<ToolCall> calls;
      for (size_t i = 0; i < text.size(); i += chunk) {
        ToolOutput o = p.feed(text.substr(i, chunk));
        content += o.content;
        calls.insert(calls.end(), o.calls.begin(), o.calls.end());
      }
      ToolOutput o = p.finish();
      content += o.content;
      calls.insert(calls.end(), o.calls.begin(), o.calls.end());
      const std::string what = c["name"].get<std::string>() + " in chunks of " + std::to_string(chunk);
      EXPECT_EQ(trim(content), c["content"].get<std::string>()) << what;
      expect_calls(calls, c["calls"], what);
      EXPECT_EQ(p.called(), !c["calls"].empty()) << what;
    }
  }
}

TEST(ToolCalls, HermesCallsStreamAsTheyClose) {
  ToolCallParser p(ToolFormat::Hermes);
  EXPECT_EQ(p.feed("Sure.\n<tool_c").content, "Sure.\n");
  EXPECT_TRUE(p.feed("all>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_").calls.empty());
  const ToolOutput o = p.feed("call>\n<tool_call>\n{\"name\": \"b\"}");
  ASSERT_EQ(o.calls.size(), 1u) << "the first call is out as soon as its block closes";
  EXPECT_EQ(o.calls[0].name, "a");
  EXPECT_EQ(o.calls[0].arguments, "{}");
  const ToolOutput rest = p.finish();
  ASSERT_EQ(rest.calls.size(), 1u);
  EXPECT_EQ(rest.calls[0].name, "b");
}

TEST(ToolCalls, FormatAndSupportOfRealTemplates) {
  struct Case {
    const char* file;
    bool tools;
    ToolFormat format;
  };
  const Case cases[] = {
      {"Qwen-Qwen2.5-7B-Instruct.jinja", true, ToolFormat::Hermes},
      {"Qwen-Qwen3-0.6B.jinja", true, ToolFormat::Hermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", true, ToolFormat::Hermes},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", true, ToolFormat::Llama3},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", true, ToolFormat::Llama3},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", true, ToolFormat::Mistral},
      {"HuggingFaceTB-SmolLM2-135M-Instruct.jinja", false, ToolFormat::Json},
      {"google-gemma-2-2b-it.jinja", false, ToolFormat::Json},
      {"microsoft-Phi-3.5-mini-instruct.jinja", false, ToolFormat::Json},
  };
  for (const auto& c : cases) {
    const std::string src = read(kData / "chat_templates" / c.file);
    ASSERT_FALSE(src.empty()) << c.file;
    EXPECT_EQ(template_supports_tools(src, "<s>", "</s>"), c.tools) << c.file;
    EXPECT_STREQ(tool_format_name(detect_tool_format(src)), tool_format_name(c.format)) << c.file;
  }
  EXPECT_FALSE(template_supports_tools("", "", ""));
  EXPECT_FALSE(template_supports_tools("{% if %}", "", "")) << "a template that does not parse has no tool support";
}

}  // namespace
}  // namespace rbee::llm
