#include "bench_verify.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/llm/kv_cache.h"

namespace rbee::cli {

std::vector<VerifyResult> bench_verify(llm::Model& model, DType kv_dtype, const std::vector<int>& ks, int batch,
                                       int context, int repetitions, uint64_t seed) {
  RBEE_CHECK(batch >= 1 && batch <= 1024, "bench: --verify-batch must be in [1, 1024], got {}", batch);
  RBEE_CHECK(context >= 1, "bench --verify: the context (--n-prompt) must be >= 1, got {}", context);
  for (int k : ks) RBEE_CHECK(k >= 1 && k <= 64, "bench: --verify values must be in [1, 64], got {}", k);
  const int k_max = ks.empty() ? 0 : *std::max_element(ks.begin(), ks.end());
  const int bs = 16;
  const int per_seq = context + k_max + 1;
  llm::KvCache cache(model.kv_layout(), batch * ((per_seq + bs - 1) / bs), bs, kv_dtype);  // the model's placement
  std::vector<llm::SequenceKv> seqs((size_t)batch);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> token(0, model.config().vocab_size - 1);
  // Fill every sequence's context with random tokens, one prompt pass each.
  for (auto& s : seqs) {
    RBEE_CHECK(s.reserve(cache, per_seq), "bench --verify: the KV cache has no room");
    llm::ForwardBatch fill;
    for (int i = 0; i < context; ++i) fill.tokens.push_back(token(rng));
    fill.seqs.push_back({&s, context, context, false});
    model.forward(fill, cache);
    s.length = context;
  }
  model.device().synchronize();
  auto timed = [&](int k) {
    llm::ForwardBatch b;
    for (auto& s : seqs) {
      for (int i = 0; i <= k; ++i) b.tokens.push_back(token(rng));
      b.seqs.push_back({&s, k + 1, context + k + 1, k > 0});
    }
    model.forward(b, cache);  // warm-up (and, for k = 0, the decode graph's recording)
    model.forward(b, cache);
    model.device().synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < repetitions; ++r) model.forward(b, cache);
    model.device().synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / repetitions;
  };
  std::vector<VerifyResult> out;
  const double decode = timed(0);
  out.push_back({0, batch, context, decode, 1.0});
  for (int k : ks) {
    const double s = timed(k);
    out.push_back({k, batch, context, s, s / decode});
  }
  for (auto& s : seqs) s.release(cache);
  return out;
}

}  // namespace rbee::cli
