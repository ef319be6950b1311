// Constrained sampling: the cost of a grammar's token mask per generated token, for a JSON Schema (nested
// object, arrays, enum, numbers, a pattern) over a large vocabulary.
//
// Vocabulary: the GGUF named by RBEE_BENCH_VOCAB (for the 151,646-token Qwen2 vocabulary, llama.cpp's
// models/ggml-vocab-qwen2.gguf from the llama-cpp-python 0.3.36 sdist: `pip download --no-binary :all:
// --no-deps llama-cpp-python==0.3.36`), else the default model's (SmolLM2, 49,152 tokens). The output is a fixed
// document the schema accepts, tokenized with that vocabulary; each iteration walks it token by token: mask, then
// advance.
//   cold  a new automaton per document: every state's mask is built on first use (what one request pays)
//   warm  the automaton kept across documents: masks come from its cache (repeated requests of one schema)
//   apply the sampler applying a mask to one row of logits (SampleStep::allowed), per token
#include <cstdlib>
#include <random>

#include <benchmark/benchmark.h>

#include "rbee/formats/gguf.h"
#include "rbee/llm/grammar.h"
#include "rbee/llm/sampler.h"
#include "rbee/llm/tokenizer.h"

namespace {

using namespace rbee::llm;

struct Setup {
  std::unique_ptr<Tokenizer> tok;
  std::shared_ptr<const grammar::Vocabulary> vocab;
  std::shared_ptr<const grammar::Grammar> grammar;
  std::vector<TokenId> doc;
  std::string label;
};

const Setup& setup() {
  static const Setup s = [] {
    Setup out;
    const char* env = std::getenv("RBEE_BENCH_VOCAB");
    const std::string path = env && *env ? env : std::string(RBEE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    out.tok = Tokenizer::from_gguf(rbee::gguf::File::open(path));
    out.vocab = std::make_shared<grammar::Vocabulary>(*out.tok);
    const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(R"({
      "type": "object",
      "properties": {
        "name": {"type": "string", "maxLength": 40},
        "id": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "score": {"type": "number"},
        "role": {"enum": ["admin", "editor", "viewer"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
        "address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"},
                    "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["city"]},
        "active": {"type": "boolean"}
      },
      "required": ["name", "id", "age", "role", "tags", "address", "active"]
    })");
    out.grammar = grammar::Grammar::parse(grammar::json_schema_to_gbnf(schema));
    const std::string text =
        R"({"name": "Ada Lovelace, Countess of Lovelace", "id": "ADA-1815", "age": 36, "score": 99.5, )"
        R"("role": "admin", "tags": ["mathematics", "analytical engine", "poetry", "notes on Menabrea"], )"
        R"("address": {"street": "12 St James's Square", "city": "London", "zip": "12345"}, "active": true})";
    out.doc = out.tok->encode(text, false, false);
    if (!grammar::accepts(*out.grammar, text)) std::abort();
    out.label = std::to_string(out.tok->vocab_size()) + " tokens, " + std::to_string(out.doc.size()) + "-token doc";
    return out;
  }();
  return s;
}

// One document, token by token: the mask, then the token.
void walk(const TokenConstraint& start, benchmark::State& state) {
  const Setup& s = setup();
  auto c = start.clone();
  for (TokenId t : s.doc) {
    const auto& m = c->allowed();
    benchmark::DoNotOptimize(m.data());
    if (!((m[(size_t)t >> 6] >> (t & 63)) & 1)) state.SkipWithError("the document's token is masked out");
    c->accept(t);
  }
}

void BM_GrammarMaskCold(benchmark::State& state) {
  const Setup& s = setup();
  for (auto _ : state) {
    const auto start = grammar::make_constraint(s.grammar, s.vocab);  // new automaton: nothing cached
    walk(*start, state);
  }
  state.counters["us_per_token"] = benchmark::Counter((double)s.doc.size() * 1e-6,
                                                      benchmark::Counter::kIsIterationInvariantRate |
                                                          benchmark::Counter::kInvert);
  state.SetLabel(s.label);
}
BENCHMARK(BM_GrammarMaskCold)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void BM_GrammarMaskWarm(benchmark::State& state) {
  const Setup& s = setup();
  const auto start = grammar::make_constraint(s.grammar, s.vocab);
  walk(*start, state);  // fills the automaton's caches
  for (auto _ : state) walk(*start, state);
  state.counters["us_per_token"] = benchmark::Counter((double)s.doc.size() * 1e-6,
                                                      benchmark::Counter::kIsIterationInvariantRate |
                                                          benchmark::Counter::kInvert);
  state.SetLabel(s.label);
}
BENCHMARK(BM_GrammarMaskWarm)->Unit(benchmark::kMillisecond);

// What a later request with the same schema costs in the worker: its grammar parsed again (a new Grammar object),
// its automaton found in the service's ConstraintCache by source, masks already built by earlier requests.
void BM_GrammarMaskCachedRequest(benchmark::State& state) {
  const Setup& s = setup();
  grammar::ConstraintCache cache(s.vocab);
  walk(*cache.get(grammar::Grammar::parse(s.grammar->source())), state);  // the first request
  for (auto _ : state) {
    state.PauseTiming();  // the request's own parse, paid with or without the cache
    const auto again = grammar::Grammar::parse(s.grammar->source());
    state.ResumeTiming();
    walk(*cache.get(again), state);
  }
  state.counters["us_per_token"] = benchmark::Counter((double)s.doc.size() * 1e-6,
                                                      benchmark::Counter::kIsIterationInvariantRate |
                                                          benchmark::Counter::kInvert);
  state.SetLabel(s.label);
}
BENCHMARK(BM_GrammarMaskCachedRequest)->Unit(benchmark::kMillisecond);

// The sampler's side: greedy pick over one row with and without a mask (the difference is the mask's cost).
void BM_SampleWithMask(benchmark::State& state) {
  const Setup& s = setup();
  const bool masked = state.range(0) != 0;
  const auto c = grammar::make_constraint(s.grammar, s.vocab)->clone();
  const auto& mask = c->allowed();
  std::vector<float> logits((size_t)s.vocab->size());
  std::mt19937 rng(1);
  std::normal_distribution<float> n(0.f, 3.f);
  for (auto& l : logits) l = n(rng);
  SamplingParams p;
  p.temperature = 0;
  Sampler sampler(p);
  SampleStep step;
  if (masked) step.allowed = &mask;
  for (auto _ : state) benchmark::DoNotOptimize(sampler.sample(logits, {}, {}, step));
  state.SetLabel(std::string(masked ? "masked, " : "plain, ") + s.label);
}
BENCHMARK(BM_SampleWithMask)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
