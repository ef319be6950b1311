// Continuous batching rests on one property of the forward pass: a sequence's logits do not depend on which
// other sequences share its batch. This checks it bit for bit on the default model, for prompt chunks and for
// decode rows, against each sequence run alone.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "rbee/llm/model.h"
#include "rbee/llm/prompt.h"

namespace rbee::llm {
namespace {

// Logits rows [rows, vocab] as host floats.
std::vector<float> run(Model& model, KvCache& cache, const ForwardBatch& batch) {
  return model.forward(batch, cache).to_vector<float>();
}

TEST(BatchInvariance, RowsEqualAloneBitForBit) {
  if (!std::filesystem::exists(RBEE_DEFAULT_MODEL)) GTEST_SKIP() << "default model missing: run scripts/setup.sh";
  auto model = Model::load(RBEE_DEFAULT_MODEL);
  const int64_t vocab = model->config().vocab_size;
  const std::vector<std::string> texts = {"The capital of France is", "Once upon a time, a small bee",
                                          "def fibonacci(n):", "The three primary colors are"};
  std::vector<std::vector<TokenId>> prompts;
  for (const auto& t : texts) prompts.push_back(text_tokens(*model, t));

  // Alone: each prompt prefilled, then one decode step with token 42.
  std::vector<std::vector<float>> alone_prefill, alone_decode;
  for (const auto& p : prompts) {
    KvCache cache(model->device(), model->config(), 8, 16);
    SequenceKv kv;
    ASSERT_TRUE(kv.reserve(cache, (int)p.size() + 1));
    ForwardBatch b{p, {{&kv, (int)p.size(), (int)p.size(), false}}};
    alone_prefill.push_back(run(*model, cache, b));
    kv.length = (int)p.size();
    ForwardBatch d{{42}, {{&kv, 1, kv.length + 1, false}}};
    alone_decode.push_back(run(*model, cache, d));
  }

  // Together: all prompts in one batch, then one decode batch of all sequences.
  KvCache cache(model->device(), model->config(), 32, 16);
  std::vector<SequenceKv> kvs(prompts.size());
  ForwardBatch b, d;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(kvs[i].reserve(cache, (int)prompts[i].size() + 1));
    b.tokens.insert(b.tokens.end(), prompts[i].begin(), prompts[i].end());
    b.seqs.push_back({&kvs[i], (int)prompts[i].size(), (int)prompts[i].size(), false});
  }
  const auto together_prefill = run(*model, cache, b);
  for (size_t i = 0; i < prompts.size(); ++i) {
    kvs[i].length = (int)prompts[i].size();
    d.tokens.push_back(42);
    d.seqs.push_back({&kvs[i], 1, kvs[i].length + 1, false});
  }
  const auto together_decode = run(*model, cache, d);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(alone_prefill[i].data(), together_prefill.data() + i * vocab, vocab * sizeof(float)))
        << "prompt " << i << ": prefill logits depend on the batch";
    EXPECT_EQ(0, std::memcmp(alone_decode[i].data(), together_decode.data() + i * vocab, vocab * sizeof(float)))
        << "prompt " << i << ": decode logits depend on the batch";
  }
}

}  // namespace
}  // namespace rbee::llm
