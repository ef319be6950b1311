// `rbee bench --verify K1,K2,...`: what speculative decoding's verification costs on this model and device
// (issue 15). At a context of P positions (the first --n-prompt value), for B sequences (--verify-batch):
//   decode  one forward pass of 1 token per sequence (a plain decode step; replayed from a graph where the device
//           has them, as the worker runs it)
//   verify  one forward pass of K + 1 tokens per sequence with every row's logits (the next token and K drafts)
// Each is timed `repetitions` times at the same depth (the pass rewrites the same cache slots) after one warm-up.
// The ratio verify / decode is the number of decode steps one verification costs: speculation wins when a step
// emits more tokens than that on average (accepted drafts + 1). Acceptance itself needs real weights and text;
// this measures only the cost, so it runs on random-weight models at real shapes (rbee random-model).
#pragma once

#include <cstdint>
#include <vector>

#include "rbee/core/dtype.h"
#include "rbee/llm/model.h"

namespace rbee::cli {

struct VerifyResult {
  int k = 0;               // drafts verified (0: the plain decode step)
  int batch = 0, context = 0;
  double seconds = 0;      // mean per pass
  double ratio = 0;        // seconds / the decode step's seconds
};

// The first result is the decode step (k = 0), then one per k.
std::vector<VerifyResult> bench_verify(llm::Model& model, DType kv_dtype, const std::vector<int>& ks, int batch,
                                       int context, int repetitions, uint64_t seed);

}  // namespace rbee::cli
