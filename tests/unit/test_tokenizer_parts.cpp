// The tokenizer's building blocks on hand-checked inputs: UTF-8 helpers, GPT-2's byte alphabet, Unicode
// normalization (against Python's unicodedata), pre-tokenizer splits (the examples of HF's documentation),
// BPE and SentencePiece merging on tiny vocabularies worked out by hand, and added-token splitting.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "llm/tokenizer/added_tokens.h"
#include "llm/tokenizer/bpe.h"
#include "rbee/text/byte_level.h"
#include "llm/tokenizer/normalizer.h"
#include "llm/tokenizer/pre_tokenizer.h"
#include "llm/tokenizer/spm.h"
#include "rbee/text/utf8.h"
#include "rbee/core/error.h"
#include "tokenizer_goldens.h"

namespace rbee::llm {
namespace {

using Pieces = std::vector<std::string>;

TEST(TokenizerUtf8, FindsTheFirstInvalidByte) {
  EXPECT_EQ(text::utf8::find_invalid("plain ascii"), std::string_view::npos);
  EXPECT_EQ(text::utf8::find_invalid("caf\xC3\xA9 \xF0\x9F\xA6\x99 \xE4\xB8\xAD"), std::string_view::npos);
  EXPECT_EQ(text::utf8::find_invalid("ab\xFF"), 2u);                  // never a UTF-8 byte
  EXPECT_EQ(text::utf8::find_invalid("a\x80"), 1u);                   // lone continuation byte
  EXPECT_EQ(text::utf8::find_invalid("a\xC3"), 1u);                   // truncated
  EXPECT_EQ(text::utf8::find_invalid("\xC0\xAF"), 0u);                // overlong '/'
  EXPECT_EQ(text::utf8::find_invalid("\xE0\x80\xAF"), 0u);            // overlong, 3 bytes
  EXPECT_EQ(text::utf8::find_invalid("x\xED\xA0\x80"), 1u);           // surrogate U+D800
  EXPECT_EQ(text::utf8::find_invalid("\xF4\x90\x80\x80"), 0u);        // above U+10FFFF
  EXPECT_EQ(text::utf8::find_invalid("\xF4\x8F\xBF\xBF"), std::string_view::npos);  // U+10FFFF itself
}

TEST(TokenizerUtf8, CompletePrefixHoldsBackOnlyAnUnfinishedCharacter) {
  EXPECT_EQ(text::utf8::complete_prefix("abc"), 3u);
  EXPECT_EQ(text::utf8::complete_prefix("ab\xF0\x9F"), 2u);
  EXPECT_EQ(text::utf8::complete_prefix("ab\xF0\x9F\xA6"), 2u);
  EXPECT_EQ(text::utf8::complete_prefix("ab\xF0\x9F\xA6\x99"), 6u);
  EXPECT_EQ(text::utf8::complete_prefix("\xE4"), 0u);
  EXPECT_EQ(text::utf8::complete_prefix("a\xFF"), 2u);      // invalid: not worth waiting for
  EXPECT_EQ(text::utf8::complete_prefix("a\xE0\x80"), 3u);  // E0 80 can never become valid
}

TEST(TokenizerUtf8, SanitizeReplacesMaximalInvalidSubparts) {
  EXPECT_EQ(text::utf8::sanitize("ok"), "ok");
  EXPECT_EQ(text::utf8::sanitize("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(text::utf8::sanitize("\xF0\x9F\xA6"), "\xEF\xBF\xBD");                 // one U+FFFD for a truncated char
  EXPECT_EQ(text::utf8::sanitize("\xF0\x9F\xA6" "a"), "\xEF\xBF\xBD" "a");
  EXPECT_EQ(text::utf8::sanitize("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: 3 bytes, 3 marks
}

TEST(TokenizerByteLevel, IsGpt2sBijection) {
  EXPECT_EQ(text::byte_level::byte_to_codepoint(' '), 0x120u);   // "Ġ"
  EXPECT_EQ(text::byte_level::byte_to_codepoint('\n'), 0x10Au);  // "Ċ"
  EXPECT_EQ(text::byte_level::byte_to_codepoint('A'), 'A');
  EXPECT_EQ(text::byte_level::byte_to_codepoint(0xAD), 0x143u);  // soft hyphen: the last remapped byte
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = text::byte_level::byte_to_codepoint(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second);
    EXPECT_EQ(text::byte_level::codepoint_to_byte(cp), b);
  }
  EXPECT_EQ(text::byte_level::codepoint_to_byte(0x144), -1);
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(text::byte_level::decode(text::byte_level::encode(all)), all);
  EXPECT_EQ(text::byte_level::encode(" the"), "\xC4\xA0the");
}

TEST(TokenizerNormalizer, UnicodeFormsMatchPython) {
  std::ifstream in(test::tokenizer_data_dir() + "/unicode_norm.golden.json", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const auto j = nlohmann::json::parse(ss.str());
  ASSERT_GE(j["cases"].size(), 100u);
  const std::pair<const char*, UnicodeForm> forms[] = {
      {"NFC", UnicodeForm::NFC}, {"NFD", UnicodeForm::NFD}, {"NFKC", UnicodeForm::NFKC}, {"NFKD", UnicodeForm::NFKD}};
  for (const auto& c : j["cases"]) {
    const std::string text = c["text"];
    for (const auto& [name, form] : forms) {
      EXPECT_EQ(text::unicode_normalize(text, form), c[name].get<std::string>()) << name << " of " << test::escaped(text);
    }
  }
  EXPECT_EQ(text::unicode_normalize("e\xCC\x81", UnicodeForm::NFC), "\xC3\xA9");         // e + U+0301 -> é
  EXPECT_EQ(text::unicode_normalize("\xEA\xB0\x81", UnicodeForm::NFD), "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8");  // 각
  EXPECT_EQ(text::unicode_normalize("\xEF\xAC\x81", UnicodeForm::NFKC), "fi");           // ﬁ ligature
}

TEST(TokenizerNormalizer, PrependReplaceStrip) {
  Normalizer n;
  n.add_prepend("\xE2\x96\x81");
  n.add_replace_literal(" ", "\xE2\x96\x81");
  EXPECT_EQ(n.run("a b"), "\xE2\x96\x81" "a" "\xE2\x96\x81" "b");
  EXPECT_EQ(n.run(""), "");  // Prepend leaves an empty text alone
  Normalizer s;
  s.add_strip(true, true);
  EXPECT_EQ(s.run(" \t x y \xE3\x80\x80\n"), "x y");
  Normalizer r;
  r.add_replace_regex(" {2,}", " ");
  EXPECT_EQ(r.run("a  b     c d"), "a b c d");
}

Pieces split(const std::string& text, SplitBehavior b) {
  PreTokenizer p;
  p.add_split_literal("-", b);
  return p.run(text, true);
}

TEST(TokenizerPreTokenizer, SplitBehaviorsAsHfDocuments) {
  const std::string t = "the-final--countdown";
  EXPECT_EQ(split(t, SplitBehavior::Removed), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(split(t, SplitBehavior::Isolated), (Pieces{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split(t, SplitBehavior::MergedWithPrevious), (Pieces{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split(t, SplitBehavior::MergedWithNext), (Pieces{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split(t, SplitBehavior::Contiguous), (Pieces{"the", "-", "final", "--", "countdown"}));
}

TEST(TokenizerPreTokenizer, Gpt2AndLlama3Regexes) {
  const std::string t = "Hello world's  123\n\nfoo";
  PreTokenizer gpt2;
  gpt2.add_split(std::string(regexes::kGpt2), SplitBehavior::Isolated);
  EXPECT_EQ(gpt2.run(t, true), (Pieces{"Hello", " world", "'s", " ", " 123", "\n", "\n", "foo"}));
  PreTokenizer llama3;
  llama3.add_split(std::string(regexes::kLlama3), SplitBehavior::Isolated);
  EXPECT_EQ(llama3.run(t, true), (Pieces{"Hello", " world", "'s", " ", " ", "123", "\n\n", "foo"}));
  EXPECT_EQ(llama3.run("12345 I'M", true), (Pieces{"123", "45", " I", "'M"}));
  // Unicode classes: letters of any script, numbers of any script.
  EXPECT_EQ(gpt2.run("\xD0\xBF\xD1\x80\xD0\xB8 \xD9\xA3\xD9\xA4", true),
            (Pieces{"\xD0\xBF\xD1\x80\xD0\xB8", " \xD9\xA3\xD9\xA4"}));
}

TEST(TokenizerPreTokenizer, MetaspaceAndByteLevel) {
  PreTokenizer m;
  m.add_metaspace("\xE2\x96\x81", PrependScheme::First, true);
  EXPECT_EQ(m.run("Hey friend", true), (Pieces{"\xE2\x96\x81Hey", "\xE2\x96\x81" "friend"}));
  EXPECT_EQ(m.run("Hey", false), (Pieces{"Hey"}));  // "first": only at the start of the input
  PreTokenizer b;
  b.add_byte_level(/*add_prefix_space=*/true, /*use_regex=*/true);
  EXPECT_EQ(b.run("Hi there", true), (Pieces{"\xC4\xA0Hi", "\xC4\xA0there"}));
  EXPECT_TRUE(b.maps_bytes());
  EXPECT_THROW(PreTokenizer::for_gguf_pre("not-a-pre"), Error);
  EXPECT_THROW(PreTokenizer().add_split("(unclosed", SplitBehavior::Isolated), Error);
}

// A vocabulary of single letters and a few merges, ranked by hand.
Vocab tiny_vocab(const std::vector<std::string>& tokens, const std::vector<float>& scores = {}) {
  Vocab v;
  for (size_t i = 0; i < tokens.size(); ++i) v.push(tokens[i], TokenKind::Normal, scores.empty() ? 0.0f : scores[i]);
  return v;
}

std::vector<TokenId> bpe_ids(const BpeModel& m, std::string_view piece) {
  std::vector<TokenId> out;
  m.tokenize(piece, out);
  return out;
}

TEST(TokenizerBpe, MergesByRankLeftmostFirst) {
  //                          0    1    2    3     4     5      6
  const Vocab v = tiny_vocab({"a", "b", "c", "ab", "bc", "abc", "aa"});
  {
    // "ab" outranks "bc": abc -> ab c -> abc.
    const BpeModel m(v, {{"a", "b"}, {"b", "c"}, {"ab", "c"}}, {});
    EXPECT_EQ(bpe_ids(m, "abc"), (std::vector<TokenId>{5}));
    EXPECT_EQ(bpe_ids(m, "cab"), (std::vector<TokenId>{2, 3}));
  }
  {
    // "bc" outranks "ab": abc -> a bc, and no merge (a, bc) exists.
    const BpeModel m(v, {{"b", "c"}, {"a", "b"}, {"ab", "c"}}, {});
    EXPECT_EQ(bpe_ids(m, "abc"), (std::vector<TokenId>{0, 4}));
  }
  {
    // Equal pairs: the leftmost merges first, so "aaa" -> aa a.
    const BpeModel m(v, {{"a", "a"}}, {});
    EXPECT_EQ(bpe_ids(m, "aaa"), (std::vector<TokenId>{6, 0}));
    EXPECT_EQ(bpe_ids(m, "aaaa"), (std::vector<TokenId>{6, 6}));
  }
  {
    // ignore_merges: a piece that is a token is taken whole even without a merge path.
    BpeOptions o;
    o.ignore_merges = true;
    const BpeModel m(v, {}, o);
    EXPECT_EQ(bpe_ids(m, "abc"), (std::vector<TokenId>{5}));
    EXPECT_EQ(bpe_ids(m, "ca"), (std::vector<TokenId>{2, 0}));
  }
  EXPECT_THROW(BpeModel(v, {{"a", "x"}}, {}), Error);  // merge of an unknown token
  EXPECT_THROW(BpeModel(v, {{"c", "a"}}, {}), Error);  // merged text "ca" is not a token
}

TEST(TokenizerBpe, UnknownCharactersUseByteFallbackOrUnk) {
  Vocab v = tiny_vocab({"<unk>", "a", "<0xC3>", "<0xA9>"});
  BpeOptions o;
  o.byte_fallback = true;
  o.unk_id = 0;
  const BpeModel m(v, {}, o);
  EXPECT_EQ(bpe_ids(m, "a\xC3\xA9"), (std::vector<TokenId>{1, 2, 3}));  // é -> its two bytes
  EXPECT_EQ(bpe_ids(m, "a\xC3\xB1"), (std::vector<TokenId>{1, 0}));     // ñ: byte B1 missing -> unk
  o.byte_fallback = false;
  o.fuse_unk = true;
  const BpeModel u(v, {}, o);
  EXPECT_EQ(bpe_ids(u, "xyz"), (std::vector<TokenId>{0}));  // consecutive unknowns fuse
}

std::vector<TokenId> spm_ids(const SpmModel& m, std::string_view text) {
  std::vector<TokenId> out;
  m.tokenize(text, out);
  return out;
}

TEST(TokenizerSpm, MergesByScoreAndFallsBackToBytes) {
  //                          0        1    2    3    4     5     6       7
  const Vocab v = tiny_vocab({"<unk>", "a", "b", "c", "ab", "bc", "abc", "<0xE2>"},
                             {0, -1, -1, -1, -5, -2, -3, 0});
  const SpmModel m(v, 0);
  // "bc" (-2) beats "ab" (-5); then "a"+"bc" is the token "abc" (SentencePiece looks texts up, no merge list).
  EXPECT_EQ(spm_ids(m, "abc"), (std::vector<TokenId>{6}));
  const Vocab v2 = tiny_vocab({"<unk>", "a", "b", "c", "ab", "bc"}, {0, -1, -1, -1, -5, -2});
  const SpmModel m2(v2, 0);
  EXPECT_EQ(spm_ids(m2, "abc"), (std::vector<TokenId>{1, 5}));  // bc first, and "abc" is no token
  EXPECT_EQ(spm_ids(m2, "abab"), (std::vector<TokenId>{4, 4}));
  // "ab" alone merges.
  EXPECT_EQ(spm_ids(m, "ab"), (std::vector<TokenId>{4}));
  // "é" is not a token: its bytes C3 A9 are not tokens either -> unk for each; E2 has a byte token.
  EXPECT_EQ(spm_ids(m, "\xC3\xA9"), (std::vector<TokenId>{0, 0}));
  const Vocab w = tiny_vocab({"<unk>", "a", "b", "ab", "abab"}, {0, -1, -1, -1, -0.5f});
  const SpmModel mw(w, 0);
  // Ties on score go to the leftmost pair: abab -> ab ab -> abab.
  EXPECT_EQ(spm_ids(mw, "abab"), (std::vector<TokenId>{4}));
  EXPECT_EQ(spm_ids(mw, "ababa"), (std::vector<TokenId>{4, 1}));
}

TEST(TokenizerAddedTokens, LongestMatchAndSpecialOnlyWhenParsing) {
  std::vector<AddedToken> t(3);
  t[0] = {10, "<|a|>", true};
  t[1] = {11, "<|a|>x", true};
  t[2] = {12, "<user>", false};
  t[2].lstrip = t[2].rstrip = true;
  const AddedTokenMatcher m(t);
  const auto f = m.split("q<|a|>x <|a|>y  <user>  z", true);
  ASSERT_EQ(f.size(), 7u);
  EXPECT_EQ(f[0].token, -1);
  EXPECT_EQ(f[1].token, 11);  // the longer "<|a|>x" wins
  EXPECT_EQ(f[2].token, -1);  // " "
  EXPECT_EQ(f[3].token, 10);
  EXPECT_EQ(f[4].token, -1);  // "y" (the spaces went to <user> through lstrip)
  EXPECT_EQ(f[4].end - f[4].begin, 1u);
  EXPECT_EQ(f[5].token, 12);
  EXPECT_EQ(f[5].end - f[5].begin, 10u);  // "  <user>  ": lstrip and rstrip take the spaces around it
  EXPECT_EQ(f[6].token, -1);              // "z"
  EXPECT_EQ(f[6].end - f[6].begin, 1u);
  const auto g = m.split("<|a|> <user>", false);  // specials are plain text now, user-defined still match
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].token, -1);
  EXPECT_EQ(g[1].token, 12);
}

}  // namespace
}  // namespace rbee::llm

namespace rbee::llm {
namespace {

// The GGUF presets (llama.cpp's spelling of the regexes) split every golden text exactly as the pipelines of
// the HF tokenizer.json files, which the HF goldens verify end to end.
TEST(TokenizerPreTokenizer, GgufPresetsSplitLikeHfPipelines) {
  PreTokenizer hf_llama3, hf_qwen2, hf_smollm;
  hf_llama3.add_split(R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
                      SplitBehavior::Isolated);
  hf_llama3.add_byte_level(false, false);
  hf_qwen2.add_split(R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
                     SplitBehavior::Isolated);
  hf_qwen2.add_byte_level(false, false);
  hf_smollm.add_split(R"(\p{N})", SplitBehavior::Isolated);  // HF Digits(individual_digits=true)
  hf_smollm.add_byte_level(false, true);
  const std::pair<const char*, const PreTokenizer*> presets[] = {
      {"llama-bpe", &hf_llama3}, {"qwen2", &hf_qwen2}, {"smollm", &hf_smollm}};
  for (const auto& [name, hf] : presets) {
    const PreTokenizer gguf = PreTokenizer::for_gguf_pre(name);
    for (const char* golden : {"llama-bpe", "smollm2"}) {
      for (const auto& c : test::load_tokenizer_cases(golden)) {
        EXPECT_EQ(gguf.run(c.text, true), hf->run(c.text, true)) << name << ": " << test::escaped(c.text);
      }
    }
  }
}

}  // namespace
}  // namespace rbee::llm
