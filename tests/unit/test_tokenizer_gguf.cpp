// Tokenizers loaded from GGUF metadata: the default model SmolLM2-135M-Instruct (byte-level BPE, pre "smollm")
// against the HF tokenizers goldens, Llama 2's SentencePiece vocabulary (llama.cpp's ggml-vocab-llama-spm.gguf)
// against llama.cpp's test pairs and HF, the streaming decoder, and malformed tokenizer metadata.
#include <filesystem>

#include <gtest/gtest.h>

#include "formats_test_util.h"
#include "rbee/core/error.h"
#include "rbee/formats/gguf.h"
#include "tokenizer_goldens.h"

namespace rbee {
namespace {

using llm::StreamingDecoder;
using llm::TokenId;
using llm::Tokenizer;

const Tokenizer& smollm2() {
  static const std::unique_ptr<Tokenizer> tok = [] {
    EXPECT_TRUE(std::filesystem::exists(RBEE_DEFAULT_MODEL)) << RBEE_DEFAULT_MODEL << " is missing: run scripts/setup.sh";
    return Tokenizer::from_gguf(gguf::File::open(RBEE_DEFAULT_MODEL));
  }();
  return *tok;
}

const Tokenizer& llama_spm() {
  static const std::unique_ptr<Tokenizer> tok =
      Tokenizer::from_gguf(gguf::File::open(test::tokenizer_data_dir() + "/ggml-vocab-llama-spm.gguf"));
  return *tok;
}

TEST(GgufTokenizer, SmolLM2MatchesHfTokenizers) {
  const Tokenizer& tok = smollm2();
  const auto cases = test::load_tokenizer_cases("smollm2");
  ASSERT_GE(cases.size(), 200u);
  for (const auto& c : cases) {
    const auto ids = tok.encode(c.text, /*add_special=*/false, /*parse_special=*/true);
    EXPECT_EQ(ids, c.ids) << test::escaped(c.text);
    if (c.ids_plain) {
      EXPECT_EQ(tok.encode(c.text, false, false), *c.ids_plain) << test::escaped(c.text);
    }
    EXPECT_EQ(tok.decode(c.ids), *c.decoded) << test::escaped(c.text);
    EXPECT_EQ(tok.decode(ids), c.text) << "round trip " << test::escaped(c.text);
  }
}

TEST(GgufTokenizer, SmolLM2Metadata) {
  const Tokenizer& tok = smollm2();
  EXPECT_EQ(tok.vocab_size(), 49152);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.pad_id(), 2);
  EXPECT_EQ(tok.token_text(0), "<|endoftext|>");
  EXPECT_TRUE(tok.is_special(1));
  EXPECT_FALSE(tok.is_special(17));
  EXPECT_EQ(tok.token_text(17), "!");
  const auto eos = tok.eos_ids();
  EXPECT_NE(std::find(eos.begin(), eos.end(), 2), eos.end());
  EXPECT_EQ(tok.encode("Hi", /*add_special=*/true), tok.encode("Hi", false));  // add_bos_token is false
  // "Ġ" is the space byte in GPT-2's byte alphabet.
  const auto ids = tok.encode(" the", false);
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(tok.token_text(ids[0]), "\xC4\xA0the");
  EXPECT_EQ(tok.token_bytes(ids[0]), " the");
  // SmolLM2's vocabulary lacks the GPT-2 character of byte 0x14: HF tokenizers drops it, and so do we.
  EXPECT_EQ(tok.encode("a\x14" "b", false), std::vector<TokenId>({81, 82}));
}

TEST(GgufTokenizer, LlamaSpmMatchesLlamaCppPairs) {
  const Tokenizer& tok = llama_spm();
  const auto pairs = test::load_tokenizer_cases("llama-spm", /*llama_cpp_pairs=*/true);
  ASSERT_GE(pairs.size(), 40u);
  for (const auto& c : pairs) EXPECT_EQ(tok.encode(c.text, false, true), c.ids) << test::escaped(c.text);
}

TEST(GgufTokenizer, LlamaSpmMatchesHfTokenizers) {
  const Tokenizer& tok = llama_spm();
  for (const auto& c : test::load_tokenizer_cases("llama-spm")) {
    EXPECT_EQ(tok.encode(c.text, false, true), c.ids) << test::escaped(c.text);
    if (c.ids_plain) {
      EXPECT_EQ(tok.encode(c.text, false, false), *c.ids_plain) << test::escaped(c.text);
    }
    EXPECT_EQ(tok.decode(c.ids), *c.decoded) << test::escaped(c.text);
    if (!c.ids_plain) {
      EXPECT_EQ(tok.decode(tok.encode(c.text, false)), c.text) << "round trip " << test::escaped(c.text);
    }
  }
}

TEST(GgufTokenizer, LlamaSpmSpecials) {
  const Tokenizer& tok = llama_spm();
  EXPECT_EQ(tok.vocab_size(), 32000);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  const auto ids = tok.encode("Hello world", /*add_special=*/true);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 15043);  // "▁Hello"
  EXPECT_EQ(ids[2], 3186);   // "▁world"
  EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), "Hello world");
  EXPECT_EQ(tok.decode(ids, false), "<s> Hello world");
  // "</s>" is a control token: one id with parse_special, spelled out without.
  EXPECT_EQ(tok.encode("</s>", false, true), std::vector<TokenId>({2}));
  EXPECT_GT(tok.encode("</s>", false, false).size(), 1u);
}

// Feeding a multi-byte character one token at a time never yields a partial character, and the pieces add up
// to the tokens' bytes (for SentencePiece that includes the dummy-prefix space, which streaming keeps).
void expect_streams_whole_chars(const Tokenizer& tok, const std::string& text) {
  const auto ids = tok.encode(text, false);
  std::string expected;
  for (TokenId id : ids) expected += tok.token_bytes(id);
  StreamingDecoder dec(tok, /*skip_special=*/false);
  std::string out;
  for (TokenId id : ids) {
    const std::string piece = dec.push(id);
    // Every piece is valid UTF-8 on its own.
    EXPECT_EQ(tok.decode(tok.encode(piece, false, false)), piece);
    out += piece;
  }
  out += dec.flush();
  EXPECT_EQ(out, expected);
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(StreamingDecoder, NeverSplitsUtf8) {
  // 🦙, 👨‍👩‍👧‍👦 and CJK: SmolLM2 spells them with several byte-level tokens; Llama 2 with <0xXX> tokens.
  const std::string texts[] = {"\xF0\x9F\xA6\x99", "a \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 b",
                               "\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8 apple", "caf\xC3\xA9 \xF0\x9F\x98\x80!"};
  for (const auto& t : texts) {
    expect_streams_whole_chars(smollm2(), t);
    expect_streams_whole_chars(llama_spm(), t);
  }
  // The llama emoji is 4 byte tokens in Llama 2: nothing comes out until the last one.
  const auto ids = llama_spm().encode("\xF0\x9F\xA6\x99", false);
  ASSERT_EQ(ids.size(), 5u);  // "▁" + 4 bytes
  StreamingDecoder dec(llama_spm());
  EXPECT_EQ(dec.push(ids[0]), " ");
  EXPECT_EQ(dec.push(ids[1]), "");
  EXPECT_EQ(dec.push(ids[2]), "");
  EXPECT_EQ(dec.push(ids[3]), "");
  EXPECT_EQ(dec.push(ids[4]), "\xF0\x9F\xA6\x99");
  EXPECT_EQ(dec.flush(), "");
}

TEST(StreamingDecoder, FlushReplacesAnUnfinishedCharacterAndSkipsSpecials) {
  const Tokenizer& tok = llama_spm();
  const auto ids = tok.encode("\xF0\x9F\xA6\x99", false);
  StreamingDecoder dec(tok);
  dec.push(ids[0]);
  EXPECT_EQ(dec.push(ids[1]), "");
  EXPECT_EQ(dec.push(ids[2]), "");
  EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD");  // U+FFFD for the truncated sequence
  EXPECT_EQ(dec.push(tok.eos_id()), "");  // skip_special drops control tokens
  // A byte that can never start a character is replaced at once, not held back.
  const TokenId ff = tok.encode("\xC3\xBF", false).back();  // "ÿ" = C3 BF; the BF byte token alone is invalid
  StreamingDecoder dec2(tok);
  EXPECT_EQ(dec2.push(ff), tok.token_bytes(ff) == "\xBF" ? "\xEF\xBF\xBD" : tok.token_bytes(ff));
  EXPECT_THROW(dec2.push(tok.vocab_size()), Error);
  EXPECT_THROW(dec2.push(-1), Error);
}

// ---- malformed tokenizer metadata --------------------------------------------------------------------

// A minimal GGUF v3 writer for metadata-only files.
class GgufBuilder {
 public:
  GgufBuilder& str(const std::string& key, const std::string& v) {
    kv(key, 8);
    s(v);
    ++count_;
    return *this;
  }
  GgufBuilder& u32(const std::string& key, uint32_t v) {
    kv(key, 4);
    pod(v);
    ++count_;
    return *this;
  }
  GgufBuilder& strs(const std::string& key, const std::vector<std::string>& v) {
    kv(key, 9);
    pod(uint32_t{8});
    pod(uint64_t{v.size()});
    for (const auto& x : v) s(x);
    ++count_;
    return *this;
  }
  GgufBuilder& i32s(const std::string& key, const std::vector<int32_t>& v) {
    kv(key, 9);
    pod(uint32_t{5});
    pod(uint64_t{v.size()});
    for (int32_t x : v) pod(x);
    ++count_;
    return *this;
  }
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out;
    auto put = [&](const void* p, size_t n) { out.insert(out.end(), (const uint8_t*)p, (const uint8_t*)p + n); };
    put("GGUF", 4);
    const uint32_t version = 3;
    const uint64_t tensors = 0, count = count_;
    put(&version, 4);
    put(&tensors, 8);
    put(&count, 8);
    out.insert(out.end(), body_.begin(), body_.end());
    while (out.size() % 32) out.push_back(0);
    return out;
  }

 private:
  template <class T>
  void pod(T v) {
    body_.insert(body_.end(), (const uint8_t*)&v, (const uint8_t*)&v + sizeof(T));
  }
  void s(const std::string& v) {
    pod(uint64_t{v.size()});
    body_.insert(body_.end(), v.begin(), v.end());
  }
  void kv(const std::string& key, uint32_t type) {
    s(key);
    pod(type);
  }
  std::vector<uint8_t> body_;
  uint64_t count_ = 0;
};

void expect_error(ErrorCode code, const std::vector<uint8_t>& bytes, const std::string& part) {
  try {
    const gguf::File f = gguf::File::parse(bytes);
    Tokenizer::from_gguf(f);
    ADD_FAILURE() << "expected an error mentioning '" << part << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(GgufTokenizer, MalformedMetadataGivesClearErrors) {
  const std::vector<std::string> toks = {"a", "b", "ab", "<s>"};
  expect_error(ErrorCode::NotFound, GgufBuilder().u32("x", 1).bytes(), "tokenizer.ggml.model");
  expect_error(ErrorCode::Unsupported, GgufBuilder().str("tokenizer.ggml.model", "bert").bytes(), "bert");
  expect_error(ErrorCode::Io, GgufBuilder().str("tokenizer.ggml.model", "gpt2").bytes(), "tokenizer.ggml.tokens");
  expect_error(ErrorCode::Io, GgufBuilder().str("tokenizer.ggml.model", "gpt2").strs("tokenizer.ggml.tokens", toks).bytes(),
               "tokenizer.ggml.merges");
  expect_error(ErrorCode::Io,
               GgufBuilder().str("tokenizer.ggml.model", "gpt2").strs("tokenizer.ggml.tokens", toks)
                   .strs("tokenizer.ggml.merges", {"a b", "ab"}).bytes(),
               "merge 1");
  expect_error(ErrorCode::InvalidArgument,
               GgufBuilder().str("tokenizer.ggml.model", "gpt2").strs("tokenizer.ggml.tokens", toks)
                   .strs("tokenizer.ggml.merges", {"a c"}).bytes(),
               "merge 0");
  expect_error(ErrorCode::Io,
               GgufBuilder().str("tokenizer.ggml.model", "llama").strs("tokenizer.ggml.tokens", toks)
                   .i32s("tokenizer.ggml.token_type", {1, 1}).bytes(),
               "tokenizer.ggml.token_type");
  expect_error(ErrorCode::Io,
               GgufBuilder().str("tokenizer.ggml.model", "llama").strs("tokenizer.ggml.tokens", toks)
                   .u32("tokenizer.ggml.bos_token_id", 9).bytes(),
               "bos_token_id");
  expect_error(ErrorCode::Unsupported,
               GgufBuilder().str("tokenizer.ggml.model", "gpt2").str("tokenizer.ggml.pre", "no-such-pre")
                   .strs("tokenizer.ggml.tokens", toks).strs("tokenizer.ggml.merges", {"a b"}).bytes(),
               "no-such-pre");
  expect_error(ErrorCode::InvalidArgument,
               GgufBuilder().str("tokenizer.ggml.model", "llama").strs("tokenizer.ggml.tokens", {"a", "\xFF"}).bytes(),
               "not valid UTF-8");
  // A well-formed minimal BPE works: "ab" merges.
  const auto ok = GgufBuilder().str("tokenizer.ggml.model", "gpt2").str("tokenizer.ggml.pre", "gpt-2")
                      .strs("tokenizer.ggml.tokens", toks).strs("tokenizer.ggml.merges", {"a b"}).bytes();
  const auto tok = Tokenizer::from_gguf(gguf::File::parse(ok));
  EXPECT_EQ(tok->encode("abab", false), std::vector<TokenId>({2, 2}));
  EXPECT_EQ(tok->encode("ba", false), std::vector<TokenId>({1, 0}));
}

}  // namespace
}  // namespace rbee
