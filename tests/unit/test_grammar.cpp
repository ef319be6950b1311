// Grammars: GBNF parsing and its errors, what a grammar accepts (against hand-written expectations and, for
// integer ranges, against the arithmetic), JSON Schema conversion (valid documents accepted, invalid refused),
// and token masks on a real tokenizer against a token-by-token reference.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "rbee/core/error.h"
#include "rbee/llm/grammar.h"
#include "rbee/llm/sampler.h"
#include "rbee/llm/tokenizer.h"

namespace rbee::llm::grammar {
namespace {

bool gbnf_accepts(const std::string& g, const std::string& text) { return accepts(*Grammar::parse(g), text); }
nlohmann::ordered_json oj(const char* text) { return nlohmann::ordered_json::parse(text); }

TEST(Grammar, Basics) {
  EXPECT_TRUE(gbnf_accepts(R"(root ::= "yes" | "no")", "yes"));
  EXPECT_FALSE(gbnf_accepts(R"(root ::= "yes" | "no")", "ye"));
  EXPECT_FALSE(gbnf_accepts(R"(root ::= "yes" | "no")", "yess"));
  const std::string list = R"(
    root ::= "[" item ("," item)* "]"   # a list
    item ::= [a-c]+ | num
    num  ::= [0-9]{2,3}
  )";
  EXPECT_TRUE(gbnf_accepts(list, "[ab,12,cab,999]"));
  EXPECT_FALSE(gbnf_accepts(list, "[ab,1]"));
  EXPECT_FALSE(gbnf_accepts(list, "[ab,1234]"));
  EXPECT_FALSE(gbnf_accepts(list, "[]"));
  EXPECT_TRUE(gbnf_accepts(R"(root ::= [^a-z]* "!")", "ABC 123 ü!"));
  EXPECT_FALSE(gbnf_accepts(R"(root ::= [^a-z]* "!")", "aB!"));
  EXPECT_FALSE(gbnf_accepts(R"(root ::= [α-ω]+ "\x41" "\u00e9")", "λόγος" "A" "\xc3\xa9"));  // ό is not in α-ω
  EXPECT_TRUE(gbnf_accepts(R"(root ::= [α-ω]+ "\x41" "\u00e9")", "λογος" "A" "\xc3\xa9"));
  EXPECT_TRUE(gbnf_accepts(R"(root ::= .{3})", "a€😀"));
  EXPECT_FALSE(gbnf_accepts(R"(root ::= .{3})", "a€"));
  EXPECT_FALSE(gbnf_accepts(R"(root ::= .)", "\xff")) << "invalid UTF-8 is never a character";
  EXPECT_TRUE(gbnf_accepts("root ::= (\n  \"a\"\n  | \"b\"\n)+", "abba"));
  EXPECT_TRUE(gbnf_accepts(R"(root ::= "x"?)", ""));
}

TEST(Grammar, ErrorsNameTheLine) {
  auto message = [](const std::string& g) {
    try {
      Grammar::parse(g);
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_NE(message("root ::= foo").find("\"foo\" is used but never defined"), std::string::npos);
  EXPECT_NE(message("start ::= \"a\"").find("no \"root\" rule"), std::string::npos);
  EXPECT_NE(message("root ::= \"a\"\nroot ::= \"b\"").find("line 2"), std::string::npos);
  EXPECT_NE(message("root ::= x\nx ::= x \"a\" | \"b\"").find("left-recursive"), std::string::npos);
  EXPECT_NE(message("root ::= \"abc").find("unterminated"), std::string::npos);
  EXPECT_NE(message("root ::= [z-a]").find("out of order"), std::string::npos);
  EXPECT_NE(message("root ::= \"a\"{3,2}").find("m <= n"), std::string::npos);
  EXPECT_NE(message("root ::= \"a\" @").find("line 1, column 14"), std::string::npos);
}

// Integer ranges against the arithmetic: every n in a window around the bounds.
TEST(Grammar, IntegerRangesAreExact) {
  std::mt19937 rng(7);
  const std::vector<std::pair<int64_t, int64_t>> fixed = {{0, 0},     {0, 9},    {1, 10},  {7, 1234}, {-15, 15},
                                                          {-999, -10}, {95, 105}, {100, 100}, {-1, 0}, {19, 21000}};
  std::vector<std::pair<int64_t, int64_t>> ranges = fixed;
  for (int i = 0; i < 20; ++i) {
    int64_t a = (int64_t)(rng() % 20000) - 10000, b = (int64_t)(rng() % 20000) - 10000;
    ranges.push_back({std::min(a, b), std::max(a, b)});
  }
  for (auto [lo, hi] : ranges) {
    nlohmann::ordered_json schema = oj(R"({"type": "integer"})");
    schema["minimum"] = lo;
    schema["maximum"] = hi;
    const auto g = Grammar::parse(json_schema_to_gbnf(schema));
    for (int64_t n = lo - 30; n <= hi + 30; n += (hi - lo > 400 ? 7 : 1)) {
      EXPECT_EQ(accepts(*g, std::to_string(n)), n >= lo && n <= hi) << n << " in [" << lo << ", " << hi << "]";
    }
    const std::string padded = std::string(1, '0') + std::to_string(std::abs(lo) + 1);
    EXPECT_FALSE(accepts(*g, padded)) << "leading zeros";
  }
  const auto pos = Grammar::parse(json_schema_to_gbnf(oj(R"({"type": "integer", "exclusiveMinimum": 0})")));
  EXPECT_FALSE(accepts(*pos, "0"));
  EXPECT_TRUE(accepts(*pos, "1"));
  EXPECT_TRUE(accepts(*pos, "123456789"));
  EXPECT_FALSE(accepts(*pos, "-3"));
}

TEST(Grammar, NumberRangesStayInside) {
  const auto g = Grammar::parse(json_schema_to_gbnf(oj(R"({"type": "number", "minimum": -2.5, "maximum": 3})")));
  for (const char* ok : {"0", "-2", "-2.0", "-1.99", "2.75", "3", "0.001"}) EXPECT_TRUE(accepts(*g, ok)) << ok;
  for (const char* bad : {"3.5", "-2.6", "-3", "4", "1e3", "3.01"}) EXPECT_FALSE(accepts(*g, bad)) << bad;
}

struct SchemaCase {
  const char* schema;
  std::vector<std::string> valid, invalid;
};

TEST(Grammar, JsonSchemaAcceptsValidAndRefusesInvalid) {
  const std::vector<SchemaCase> cases = {
      {R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
           "required": ["name", "age"], "additionalProperties": false})",
       {R"({"name":"Bo","age":3})", "{\"name\": \"B\\\"o\",\n  \"age\": 0}"},
       {R"({"age":3,"name":"Bo"})", R"({"name":"Bo"})", R"({"name":"Bo","age":-1})", R"({"name":"Bo","age":3} )"}},
      {R"({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}, "c": {"type": "number"}},
           "required": ["b"]})",
       {R"({"b":null})", R"({"a":true,"b":null})", R"({"b":null,"c":-1.5e3})", R"({"a":false,"b":null,"c":0})"},
       {R"({"a":true})", R"({"b":null,"a":true})", R"({})"}},
      {R"({"type": "array", "items": {"enum": ["red", "green", 3, null]}, "minItems": 1, "maxItems": 3})",
       {R"(["red"])", R"([3, null, "green"])"},
       {R"([])", R"(["blue"])", R"([3,3,3,3])"}},
      {R"({"type": "string", "pattern": "^[A-Z]{2}-\\d{3,4}$"})",
       {R"("AB-123")", R"("ZZ-0000")"},
       {R"("ab-123")", R"("AB-12")", R"("AB-12345")", R"("AB123")"}},
      {R"({"type": "string", "minLength": 2, "maxLength": 3})",
       {R"("ab")", R"("a\nb")", "\"\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\""},
       {R"("a")", R"("abcd")"}},
      {R"({"type": "string", "format": "date"})", {R"("2024-02-29")"}, {R"("2024-13-01")", R"("24-01-01")"}},
      {R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]})",
       {"7", R"("x")"},
       {R"("xy")", "true"}},
      {R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
           "next": {"$ref": "#/$defs/node"}}, "required": ["v"]}}, "$ref": "#/$defs/node"})",
       {R"({"v":1})", R"({"v":1,"next":{"v":2,"next":{"v":3}}})"},
       {R"({"next":{"v":2}})", R"({"v":1,"next":{}})"}},
      {R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false})",
       {R"(["a",1])", R"(["a"])", R"([])"},
       {R"(["a",1,2])", R"([1,"a"])"}},
      {R"({"type": "object", "additionalProperties": {"type": "integer"}})",
       {R"({})", R"({"x":1,"y":2})"},
       {R"({"x":"a"})"}},
      {R"({"const": {"k": [1, 2]}})", {R"({"k":[1,2]})"}, {R"({"k":[1,2,3]})"}},
      {R"({})", {"1", "\"s\"", "[1,{\"a\":null}]", "{\"a\": {\"b\": []}}"}, {"{a:1}", "[1,]"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string gbnf = json_schema_to_gbnf(oj(cases[i].schema));
    const auto g = Grammar::parse(gbnf);
    for (const auto& v : cases[i].valid) EXPECT_TRUE(accepts(*g, v)) << "schema " << i << " should accept " << v << "\n" << gbnf;
    for (const auto& v : cases[i].invalid) EXPECT_FALSE(accepts(*g, v)) << "schema " << i << " should refuse " << v << "\n" << gbnf;
  }
}

TEST(Grammar, UnsupportedSchemaKeywordsAreRefused) {
  const std::vector<std::pair<const char*, std::string>> cases = {
      {R"({"type": "integer", "multipleOf": 3})", "multipleOf"},
      {R"({"type": "array", "uniqueItems": true})", "uniqueItems"},
      {R"({"properties": {"a": {"not": {"type": "string"}}}})", "/properties/a"},
      {R"({"$ref": "#/$defs/missing"})", "points nowhere"},
      {R"({"type": "strng"})", "unknown type"},
      {R"({"type": "string", "pattern": "(?=a)b"})", "lookaround"}};
  for (const auto& [schema, needle] : cases) {
    try {
      json_schema_to_gbnf(oj(schema));
      ADD_FAILURE() << schema << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
      EXPECT_EQ(e.message().rfind("json_schema: at ", 0), 0u) << e.message();
    }
  }
}

// A toy vocabulary where every token's bytes are known: masks against a direct check of each token.
class ToyTokenizer final : public Tokenizer {
 public:
  explicit ToyTokenizer(std::vector<std::string> tokens) : t_(std::move(tokens)) {}
  std::vector<TokenId> encode(std::string_view, bool, bool) const override { return {}; }
  std::string decode(std::span<const TokenId> ids, bool) const override {
    std::string s;
    for (TokenId i : ids) s += t_[(size_t)i];
    return s;
  }
  std::string token_bytes(TokenId id) const override { return t_[(size_t)id]; }
  const std::string& token_text(TokenId id) const override { return t_[(size_t)id]; }
  int32_t vocab_size() const override { return (int32_t)t_.size(); }
  bool is_special(TokenId id) const override { return id == 0; }
  TokenId bos_id() const override { return -1; }
  TokenId eos_id() const override { return 0; }
  std::vector<TokenId> eos_ids() const override { return {0}; }
  TokenId pad_id() const override { return -1; }

 private:
  std::vector<std::string> t_;
};

TEST(Grammar, MasksMatchATokenByTokenCheck) {
  // Many tokens sharing prefixes, some crossing grammar boundaries.
  std::vector<std::string> vocab = {"</s>"};
  const std::string pieces[] = {"{", "}", "\"", ":", ",", " ", "\"a\"", "\"ab", "true", "tr", "ue", "false", "null",
                                "1", "12", "0", "-", ".", "e", "a", "b", "ab", "\":", "\",", "{\"", "\"}", "}}", "[", "]",
                                "[1", "1,", "\n", "  ", "x", "é", "\\", "\\\"", "u00", "nul", "l"};
  for (const auto& p : pieces) vocab.push_back(p);
  const auto tok = std::make_shared<ToyTokenizer>(vocab);
  const auto v = std::make_shared<Vocabulary>(*tok);
  const auto g = Grammar::parse(json_schema_to_gbnf(oj(
      R"({"type": "object", "properties": {"a": {"type": "boolean"}, "ab": {"type": "array", "items": {"type": "integer"}}},
          "required": ["a"]})")));
  // Random walks: at every step the mask must equal "the text so far + this token is a prefix of some accepted
  // text", checked with accepts() on completions the test knows.
  std::mt19937 rng(3);
  for (int walk = 0; walk < 40; ++walk) {
    auto c = make_constraint(g, v)->clone();
    std::string text;
    for (int step = 0; step < 60 && !c->finished(); ++step) {
      const auto& mask = c->allowed();
      std::vector<TokenId> allowed;
      for (TokenId id = 0; id < (TokenId)vocab.size(); ++id) {
        const bool bit = (mask[(size_t)id >> 6] >> (id & 63)) & 1;
        if (bit) allowed.push_back(id);
        // Reference: a token is allowed when text + token still leads to an accepted document. The grammar's
        // language is small enough to test that by trying a few completions.
        if (id == 0) {
          EXPECT_EQ(bit, accepts(*g, text)) << "end allowed exactly where the text is complete: " << text;
          continue;
        }
        const std::string next = text + vocab[(size_t)id];
        bool completes = false;
        for (const char* tail : {"", "}", "\":true}", ":true}", "true}", "rue}", "ue}", "e}", "]}", "1]}", "]}}",
                                 ":[1]}", "\":[1]}", ",\"ab\":[]}", "\"ab\":[]}", "b\":[]}", "\":[]}", ":[]}",
                                 "[]}", "\":false}", "alse}", "lse}", "false}", "a\":true}", "\"a\":true}",
                                 " \"a\":true}", "2]}", ".5]}", "0]}"}) {
          if (accepts(*g, next + tail)) {
            completes = true;
            break;
          }
        }
        if (completes) {
          EXPECT_TRUE(bit) << "token " << vocab[(size_t)id] << " after " << text;
        }
        // The trie walk must agree with walking the token's own bytes.
        bool direct = true;
        try {
          c->clone()->accept(id);
        } catch (const Error&) {
          direct = false;
        }
        EXPECT_EQ(bit, direct) << "token " << vocab[(size_t)id] << " after " << text;
      }
      ASSERT_FALSE(allowed.empty()) << "dead end after " << text;
      const TokenId pick = allowed[rng() % allowed.size()];
      if (pick == 0) break;
      c->accept(pick);
      text += vocab[(size_t)pick];
    }
  }
  // A token outside the mask is refused.
  auto c = make_constraint(g, v)->clone();
  EXPECT_THROW(c->accept(10), Error);  // "}" cannot start an object
}

TEST(Grammar, SampledOutputAlwaysParses) {
  std::vector<std::string> vocab = {"</s>"};
  for (int c = 32; c < 127; ++c) vocab.push_back(std::string(1, (char)c));
  for (const char* p : {"\": ", "\", \"", "true", "false", "null", "{\"", "\"}", "12", "345", ", ", "}, {", "ing"}) vocab.push_back(p);
  const auto tok = std::make_shared<ToyTokenizer>(vocab);
  const auto v = std::make_shared<Vocabulary>(*tok);
  const auto g = Grammar::parse(json_object_gbnf());
  std::mt19937 rng(11);
  for (int run = 0; run < 30; ++run) {
    auto c = make_constraint(g, v)->clone();
    SamplingParams sp;
    sp.temperature = 1.0f;
    sp.has_seed = true;
    sp.seed = (uint64_t)run;
    Sampler s(sp);
    std::vector<float> logits(vocab.size());
    std::string text;
    std::normal_distribution<float> n(0.f, 2.f);
    bool ended = false;
    for (int step = 0; step < 400 && !c->finished(); ++step) {
      for (auto& l : logits) l = n(rng);
      logits[0] += (float)step / 20.f;  // the end gets likelier, so documents close
      SampleStep st;
      st.allowed = &c->allowed();
      const TokenId t = s.sample(logits, {}, {}, st);
      if (t == 0) {
        ended = true;
        break;
      }
      c->accept(t);
      text += vocab[(size_t)t];
    }
    if (!ended && !c->finished()) continue;  // ran out of steps inside a long string: not a complete document
    nlohmann::json parsed;
    ASSERT_NO_THROW(parsed = nlohmann::json::parse(text)) << text;
    EXPECT_TRUE(parsed.is_object()) << text;
  }
}

TEST(Grammar, CacheSharesAutomataBySource) {
  std::vector<std::string> vocab = {"</s>", "a", "b", "ab"};
  const auto tok = std::make_shared<ToyTokenizer>(vocab);
  ConstraintCache cache(std::make_shared<Vocabulary>(*tok), 2);
  const auto g1 = Grammar::parse(R"(root ::= "a"+)");
  const auto g1_again = Grammar::parse(R"(root ::= "a"+)");
  const auto g2 = Grammar::parse(R"(root ::= "b")");
  auto a = cache.get(g1)->clone(), b = cache.get(g1_again)->clone(), c = cache.get(g2)->clone();
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(&a->allowed(), &b->allowed()) << "the same source shares one automaton (and its masks)";
  EXPECT_NE(&a->allowed(), &c->allowed());
  EXPECT_EQ(a->allowed()[0], 0b0010u) << "only \"a\" may start";
  a->accept(1);
  EXPECT_EQ(a->allowed()[0], 0b0011u) << "then \"a\" or the end";
  EXPECT_EQ(b->allowed()[0], 0b0010u) << "a second matcher on the shared automaton keeps its own state";
  EXPECT_THROW(b->accept(2), Error) << "and its own refusals";
  EXPECT_EQ(c->allowed()[0], 0b0100u);
}

TEST(Grammar, CacheDropsTheLeastRecentlyUsed) {
  std::vector<std::string> vocab = {"</s>", "a", "b", "c"};
  const auto tok = std::make_shared<ToyTokenizer>(vocab);
  const auto v = std::make_shared<Vocabulary>(*tok);
  const auto ga = Grammar::parse(R"(root ::= "a")"), gb = Grammar::parse(R"(root ::= "b")"),
             gc = Grammar::parse(R"(root ::= "c")");
  ConstraintCache cache(v, 2);
  auto a1 = cache.get(ga)->clone();
  auto b1 = cache.get(gb)->clone();
  auto a2 = cache.get(ga)->clone();  // a is now the most recently used: c pushes b out
  auto c1 = cache.get(gc)->clone();
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(&cache.get(ga)->clone()->allowed(), &a1->allowed()) << "a was kept";
  auto b2 = cache.get(gb)->clone();
  EXPECT_NE(&b2->allowed(), &b1->allowed()) << "b was dropped and built again";
  EXPECT_EQ(b2->allowed()[0], 0b0100u);
  EXPECT_EQ(b1->allowed()[0], 0b0100u) << "a matcher on a dropped automaton still works";
  // A byte budget smaller than any automaton keeps only the last one asked for.
  ConstraintCache tight(v, 8, 1);
  tight.get(ga);
  tight.get(gb);
  EXPECT_EQ(tight.size(), 1u);
  // A grammar no token can start is refused (and the cache stays usable).
  EXPECT_THROW(cache.get(Grammar::parse(R"(root ::= "z")")), Error);
  EXPECT_EQ(cache.get(gc)->clone()->allowed()[0], 0b1000u);
}

TEST(Grammar, CachedAutomatonServesThreadsAtOnce) {
  // Four threads walk the same schema through one cached automaton (masks built lazily, concurrently); each
  // thread's masks must equal those of a private automaton at the same text.
  std::vector<std::string> vocab = {"</s>"};
  for (int ch = 32; ch < 127; ++ch) vocab.push_back(std::string(1, (char)ch));
  for (const char* p : {"\": ", "{\"", "\"}", "true", "false", "12", ", \""}) vocab.push_back(p);
  const auto tok = std::make_shared<ToyTokenizer>(vocab);
  const auto v = std::make_shared<Vocabulary>(*tok);
  const std::string schema =
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "n": {"type": "integer"},
          "ok": {"type": "boolean"}}, "required": ["name", "n", "ok"], "additionalProperties": false})";
  ConstraintCache cache(v);
  std::vector<std::string> failures(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const auto g = Grammar::parse(json_schema_to_gbnf(oj(schema.c_str())));  // own parse, same source
      auto shared = cache.get(g)->clone();
      auto own = make_constraint(g, v)->clone();
      std::mt19937 rng((unsigned)t);
      for (int step = 0; step < 80 && !shared->finished(); ++step) {
        const auto mask = shared->allowed();  // (copy: compared after the other's call)
        if (mask != own->allowed()) {
          failures[(size_t)t] = "masks differ at step " + std::to_string(step);
          return;
        }
        std::vector<TokenId> ok;
        for (TokenId id = 1; id < (TokenId)vocab.size(); ++id) {
          if ((mask[(size_t)id >> 6] >> (id & 63)) & 1) ok.push_back(id);
        }
        if (ok.empty()) break;
        const TokenId pick = ok[rng() % ok.size()];
        shared->accept(pick);
        own->accept(pick);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(failures[(size_t)t], "") << "thread " << t;
  EXPECT_EQ(cache.size(), 1u);
}

}  // namespace
}  // namespace rbee::llm::grammar
