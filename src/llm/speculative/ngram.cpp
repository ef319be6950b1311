// Prompt-lookup drafting (speculative.h): n-gram matching of the sequence's tail against its own earlier tokens.
#include <algorithm>

#include "rbee/core/error.h"
#include "rbee/llm/speculative.h"

namespace rbee::llm {

const char* speculative_method_name(SpeculativeOptions::Method m) {
  switch (m) {
    case SpeculativeOptions::Method::Off: return "off";
    case SpeculativeOptions::Method::PromptLookup: return "prompt-lookup";
    case SpeculativeOptions::Method::DraftModel: return "draft-model";
  }
  return "off";
}

void validate(const SpeculativeOptions& o) {
  RBEE_CHECK(o.tokens >= 1 && o.tokens <= 16, "spec_tokens: must be in [1, 16], got {}", o.tokens);
  RBEE_CHECK(o.ngram_min >= 1 && o.ngram_min <= o.ngram_max && o.ngram_max <= 64,
             "spec_ngram: need 1 <= min ({}) <= max ({}) <= 64", o.ngram_min, o.ngram_max);
}

std::vector<TokenId> prompt_lookup_draft(std::span<const TokenId> context, int k, int ngram_min, int ngram_max) {
  const int64_t len = (int64_t)context.size();
  if (k <= 0) return {};
  for (int n = std::min<int64_t>(ngram_max, len - 1); n >= ngram_min; --n) {
    const auto suffix = context.subspan((size_t)(len - n));
    // Most recent occurrence first: start positions s with s + n <= len - 1 (not the suffix itself).
    for (int64_t s = len - n - 1; s >= 0; --s) {
      if (!std::equal(suffix.begin(), suffix.end(), context.begin() + s)) continue;
      const int64_t from = s + n;
      const int64_t count = std::min<int64_t>(k, len - from);
      return std::vector<TokenId>(context.begin() + from, context.begin() + from + count);
    }
  }
  return {};
}

}  // namespace rbee::llm
