// Bad input to tokenizers gives a clear rbee::Error, never a crash: invalid UTF-8 text, ids out of range,
// malformed or unsupported tokenizer.json files, and hostile sizes.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "formats_test_util.h"
#include "rbee/core/error.h"
#include "tokenizer_goldens.h"

namespace rbee {
namespace {

using llm::TokenId;
using llm::Tokenizer;

std::unique_ptr<Tokenizer> smollm2_json() {
  return Tokenizer::from_hf_json(test::tokenizer_data_dir() + "/smollm2/tokenizer.json");
}

template <class F>
void expect_error(ErrorCode code, F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
  }
}

TEST(TokenizerErrors, InvalidUtf8TextIsRefusedWithItsOffset) {
  const auto tok = smollm2_json();
  expect_error(ErrorCode::InvalidArgument, [&] { tok->encode("abc\xFF" "def", false); }, {"UTF-8", "offset 3"});
  expect_error(ErrorCode::InvalidArgument, [&] { tok->encode("\xC3", false); }, {"offset 0"});
  expect_error(ErrorCode::InvalidArgument, [&] { tok->encode("ok \xED\xA0\x80", false); }, {"offset 3"});
  EXPECT_TRUE(tok->encode("", true).empty());
}

TEST(TokenizerErrors, IdsOutOfRange) {
  const auto tok = smollm2_json();
  const TokenId n = tok->vocab_size();
  const std::vector<TokenId> bad = {17, n};
  expect_error(ErrorCode::InvalidArgument, [&] { tok->decode(bad); }, {std::to_string(n), "position 1"});
  const std::vector<TokenId> neg = {-1};
  expect_error(ErrorCode::InvalidArgument, [&] { tok->decode(neg); }, {"-1"});
  EXPECT_THROW(tok->token_text(n), Error);
  EXPECT_THROW(tok->token_bytes(-5), Error);
  EXPECT_THROW(tok->is_special(1 << 30), Error);
  // A hole in the pruned vocabulary is a valid id that decodes to nothing.
  EXPECT_EQ(tok->decode(std::vector<TokenId>{n - 2}), "");
}

TEST(TokenizerErrors, HostileSizesDoNotCrash) {
  const auto tok = smollm2_json();
  const std::string letters(200000, 'a');
  EXPECT_EQ(tok->decode(tok->encode(letters, false)), letters);
  const std::string spaces(200000, ' ');
  EXPECT_EQ(tok->decode(tok->encode(spaces, false)), spaces);
  std::string mixed;
  for (int i = 0; i < 20000; ++i) mixed += "\xF0\x9F\xA6\x99 <|im_end|>x1";
  EXPECT_EQ(tok->decode(tok->encode(mixed, false)), mixed);
}

// Writes `json` as tokenizer.json (and `config` as tokenizer_config.json when given) and loads it.
class JsonFiles {
 public:
  JsonFiles() : dir_("tokjson") {}
  std::string write(const std::string& json, const std::string& config = "") {
    std::ofstream(dir_.file("tokenizer.json"), std::ios::binary) << json;
    if (!config.empty()) std::ofstream(dir_.file("tokenizer_config.json"), std::ios::binary) << config;
    return dir_.file("tokenizer.json");
  }

 private:
  test::TempDir dir_;
};

// A minimal valid tokenizer.json with `model`, `pre` and extra top-level fields substituted.
std::string tokenizer_json(const std::string& model, const std::string& extra = "") {
  return R"({"added_tokens":[{"id":3,"content":"<s>","special":true}],"normalizer":null,)" + extra +
         R"("pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},)"
         R"("decoder":{"type":"ByteLevel"},"model":)" + model + "}";
}
const std::string kModel = R"({"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]})";

TEST(TokenizerErrors, MalformedTokenizerJson) {
  JsonFiles files;
  {  // the minimal file works
    const auto tok = Tokenizer::from_hf_json(files.write(tokenizer_json(kModel)));
    EXPECT_EQ(tok->encode("abab<s>", false), (std::vector<TokenId>{2, 2, 3}));
    EXPECT_EQ(tok->vocab_size(), 4);
  }
  expect_error(ErrorCode::NotFound, [&] { Tokenizer::from_hf_json("/nonexistent/tokenizer.json"); }, {"cannot open"});
  expect_error(ErrorCode::Io, [&] { Tokenizer::from_hf_json(files.write("{\"model\": ")); }, {"not valid JSON", "byte"});
  expect_error(ErrorCode::Io, [&] { Tokenizer::from_hf_json(files.write("[1, 2]")); }, {"must be an object"});
  expect_error(ErrorCode::Io, [&] { Tokenizer::from_hf_json(files.write("{}")); }, {"no 'model'"});
  expect_error(ErrorCode::Unsupported,
               [&] { Tokenizer::from_hf_json(files.write(tokenizer_json(R"({"type":"Unigram","vocab":[]})"))); },
               {"Unigram"});
  expect_error(ErrorCode::Io,
               [&] { Tokenizer::from_hf_json(files.write(tokenizer_json(R"({"type":"BPE","vocab":[1]})"))); },
               {"model.vocab"});
  expect_error(ErrorCode::Io,
               [&] { Tokenizer::from_hf_json(files.write(tokenizer_json(R"({"type":"BPE","vocab":{"a":"x"}})"))); },
               {"integer"});
  expect_error(ErrorCode::Io,
               [&] { Tokenizer::from_hf_json(files.write(tokenizer_json(R"({"type":"BPE","vocab":{"a":-4}})"))); },
               {"bad id -4"});
  expect_error(ErrorCode::InvalidArgument,
               [&] {
                 Tokenizer::from_hf_json(files.write(tokenizer_json(R"({"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b"]})")));
               },
               {"merge 0"});
  expect_error(ErrorCode::Io,
               [&] {
                 Tokenizer::from_hf_json(files.write(tokenizer_json(R"({"type":"BPE","vocab":{"a":0},"merges":["ab"]})")));
               },
               {"merge 0", "no space"});
  expect_error(ErrorCode::Io,
               [&] {
                 Tokenizer::from_hf_json(files.write(tokenizer_json(R"({"type":"BPE","vocab":{"a":0},"merges":[[1,2]]})")));
               },
               {"merge 0"});
  expect_error(ErrorCode::Unsupported,
               [&] { Tokenizer::from_hf_json(files.write(tokenizer_json(kModel, R"("normalizer":{"type":"Lowercase"},)"))); },
               {"normalizer", "Lowercase"});
  expect_error(ErrorCode::InvalidArgument,
               [&] {
                 Tokenizer::from_hf_json(files.write(R"({"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(a"},)"
                                                     R"("behavior":"Isolated"},"model":)" + kModel + "}"));
               },
               {"does not compile", "(a"});
  expect_error(ErrorCode::Io,
               [&] {
                 Tokenizer::from_hf_json(files.write(R"({"pre_tokenizer":{"type":"Split","pattern":{"Regex":"a"},)"
                                                     R"("behavior":"Sideways"},"model":)" + kModel + "}"));
               },
               {"Sideways"});
  expect_error(ErrorCode::Unsupported,
               [&] { Tokenizer::from_hf_json(files.write(R"({"decoder":{"type":"WordPiece"},"model":)" + kModel + "}")); },
               {"WordPiece"});
  expect_error(ErrorCode::Io,
               [&] {
                 Tokenizer::from_hf_json(files.write(R"({"added_tokens":[{"id":9}],"model":)" + kModel + "}"));
               },
               {"content"});
  expect_error(ErrorCode::Io,
               [&] { Tokenizer::from_hf_json(files.write(tokenizer_json(kModel), R"({"eos_token": "</nope>"})")); },
               {"eos_token", "</nope>"});
  expect_error(ErrorCode::InvalidArgument,
               [&] { Tokenizer::from_hf_json(files.write(tokenizer_json(kModel), R"({"add_eos_token": true})")); },
               {"add_eos"});
}

}  // namespace
}  // namespace rbee
