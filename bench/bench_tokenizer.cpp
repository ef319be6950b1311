// Tokenizer throughput: encode and decode of a ~1 MB mixed text (code, prose, CJK, emoji, numbers) with the
// default model's tokenizer (SmolLM2, byte-level BPE) and Llama 2's SentencePiece vocabulary. The peer, HF
// tokenizers on the same text, is timed by tools/bench_tokenizer_peer.py (compare CPU times of one run).
#include <filesystem>
#include <fstream>
#include <sstream>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "rbee/formats/gguf.h"
#include "rbee/llm/tokenizer.h"

namespace {

// The golden texts of the tokenizer tests, repeated to ~1 MB (the peer script builds the same text).
const std::string& corpus() {
  static const std::string text = [] {
    std::ifstream in(std::string(RBEE_SOURCE_DIR) + "/tests/data/tokenizers/smollm2.golden.json");
    std::stringstream ss;
    ss << in.rdbuf();
    const auto j = nlohmann::json::parse(ss.str());
    std::string one;
    for (const auto& c : j["cases"]) {
      const std::string t = c["text"];
      if (t.find("<|") == std::string::npos && t.find("<file_sep>") == std::string::npos) one += t + "\n";
    }
    std::string all;
    while (all.size() < (1u << 20)) all += one;
    return all;
  }();
  return text;
}

const rbee::llm::Tokenizer& tokenizer(int which) {
  static const auto smol = rbee::llm::Tokenizer::from_gguf(
      rbee::gguf::File::open(std::string(RBEE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"));
  static const auto spm = rbee::llm::Tokenizer::from_gguf(
      rbee::gguf::File::open(std::string(RBEE_SOURCE_DIR) + "/tests/data/tokenizers/ggml-vocab-llama-spm.gguf"));
  return which == 0 ? *smol : *spm;
}

void BM_TokenizerEncode(benchmark::State& state) {
  const auto& tok = tokenizer(static_cast<int>(state.range(0)));
  const std::string& text = corpus();
  size_t n = 0;
  for (auto _ : state) {
    auto ids = tok.encode(text, false, true);
    n = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(n);
  state.SetLabel(state.range(0) == 0 ? "smollm2-bpe" : "llama2-spm");
}
BENCHMARK(BM_TokenizerEncode)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_TokenizerDecode(benchmark::State& state) {
  const auto& tok = tokenizer(static_cast<int>(state.range(0)));
  const auto ids = tok.encode(corpus(), false, true);
  for (auto _ : state) {
    auto text = tok.decode(ids);
    benchmark::DoNotOptimize(text.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * corpus().size()));
  state.SetLabel(state.range(0) == 0 ? "smollm2-bpe" : "llama2-spm");
}
BENCHMARK(BM_TokenizerDecode)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
