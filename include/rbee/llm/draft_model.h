// DraftModel: a smaller model with the target's tokenizer that proposes draft tokens for speculative decoding
// (speculative.h). It keeps its own paged KV cache, one SequenceKv per target sequence, and catches up on the
// tokens the target accepted since its last proposal before drafting (forward passes of at most max_step_tokens
// tokens over every sequence's catch-up, like the target's chunked prefill, then one per further draft token,
// each batched over the sequences). The memory plan counts the draft's weights, its cache and the activations of
// a max_step_tokens step on the device the target's logits come out on (memory_plan.h, PlanRequest::draft). Drafts are its greedy picks, so
// the proposal distribution is one-hot and the target's check (accept while its own draw equals the draft) is the
// standard acceptance rule: outputs keep the target's distribution.
// Its cache uses prefix caching like the target's: a shared system prompt is computed once by the draft too.
#pragma once

#include <span>
#include <vector>

#include "rbee/llm/kv_cache.h"
#include "rbee/llm/model.h"

namespace rbee::llm {

// Throws InvalidArgument naming the first difference when `draft` does not tokenize like `target` (vocabulary
// size, every token's text, BOS and EOS ids): draft tokens are fed to the target as they are.
void check_same_tokenizer(const Tokenizer& target, const Tokenizer& draft);

class DraftModel {
 public:
  // The model and the cache must outlive this object; cache belongs to `model`. max_step_tokens (>= 1): tokens
  // of one catch-up forward pass at most (the worker passes its plan's batch_tokens).
  DraftModel(Model& model, KvCache& cache, bool prefix_cache = true, int max_step_tokens = 512);

  // One sequence's state in the draft's cache.
  struct Sequence {
    SequenceKv kv;
  };
  // Reserves the draft cache for a sequence of `positions` positions at most; false when the cache is full.
  bool reserve(Sequence& seq, int positions);
  void release(Sequence& seq);
  // After the target kept `valid` positions of the sequence: the draft's positions beyond are stale.
  static void rollback(Sequence& seq, int valid) { seq.kv.length = std::min(seq.kv.length, valid); }

  struct Proposal {
    Sequence* seq = nullptr;
    std::span<const TokenId> context;  // every token of the sequence so far (the last one not yet in any cache)
    int k = 0;                         // drafts wanted (the sequence's room left may be smaller than k)
    std::vector<TokenId> drafts;       // out: up to k tokens
  };
  // Drafts for every proposal with k > 0, batched. A sequence whose draft forward fails gets no drafts (the
  // target then decodes it normally); the error is logged.
  void propose(std::vector<Proposal>& proposals);

  Model& model() { return model_; }

 private:
  Model& model_;
  KvCache& cache_;
  bool prefix_cache_;
  int max_step_tokens_;
};

}  // namespace rbee::llm
