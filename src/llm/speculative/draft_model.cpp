#include "rbee/llm/draft_model.h"

#include <algorithm>

#include "rbee/core/error.h"
#include "rbee/core/log.h"
#include "rbee/ops.h"

namespace rbee::llm {

void check_same_tokenizer(const Tokenizer& target, const Tokenizer& draft) {
  RBEE_CHECK(target.vocab_size() == draft.vocab_size(),
             "--draft: the draft model's vocabulary has {} tokens, the model's {}: they must share a tokenizer",
             draft.vocab_size(), target.vocab_size());
  for (TokenId id = 0; id < target.vocab_size(); ++id) {
    RBEE_CHECK(target.token_text(id) == draft.token_text(id),
               "--draft: token {} is \"{}\" in the draft model's vocabulary and \"{}\" in the model's: they must share "
               "a tokenizer",
               id, draft.token_text(id), target.token_text(id));
  }
  RBEE_CHECK(target.bos_id() == draft.bos_id() && target.eos_id() == draft.eos_id(),
             "--draft: BOS/EOS ids differ (draft {}/{}, model {}/{})", draft.bos_id(), draft.eos_id(), target.bos_id(),
             target.eos_id());
}

DraftModel::DraftModel(Model& model, KvCache& cache, bool prefix_cache, int max_step_tokens)
    : model_(model), cache_(cache), prefix_cache_(prefix_cache), max_step_tokens_(max_step_tokens) {
  RBEE_CHECK(max_step_tokens >= 1, "draft model: max_step_tokens must be >= 1, got {}", max_step_tokens);
  if (!prefix_cache_) cache_.clear_prefix_index();
}

bool DraftModel::reserve(Sequence& seq, int positions) { return seq.kv.reserve(cache_, positions); }

void DraftModel::release(Sequence& seq) { seq.kv.release(cache_); }

void DraftModel::propose(std::vector<Proposal>& proposals) {
  std::vector<Proposal*> pending;  // still catching up, in order
  for (Proposal& p : proposals) {
    p.drafts.clear();
    if (p.k <= 0 || p.context.empty()) continue;
    SequenceKv& kv = p.seq->kv;
    const int ctx = (int)p.context.size();
    RBEE_ASSERT(kv.length < ctx, "draft sequence holds {} positions of a {}-token context", kv.length, ctx);
    if (prefix_cache_) {
      // Only verified positions are below kv.length (rollback() drops the rest): publish, then reuse.
      kv.publish_full_blocks(cache_, p.context);
      kv.adopt_cached_prefix(cache_, p.context, ctx - 1);
    }
    pending.push_back(&p);
  }
  // Runs `batch` and returns each sequence's greedy pick; on failure every proposal gets no drafts.
  auto run = [&](const ForwardBatch& batch, size_t sequences, std::vector<int64_t>& picks) {
    try {
      const Tensor logits = model_.forward(batch, cache_);
      picks = ops::argmax(logits, 1).to_vector<int64_t>();
      return true;
    } catch (const std::exception& e) {
      log::warn("event=draft_error sequences={} error=\"{}\"", sequences, e.what());
      for (Proposal& p : proposals) p.drafts.clear();
      return false;
    }
  };
  // Catch up: every context token not yet in the draft's cache, the last (the target's next token) included, in
  // passes of at most max_step_tokens_ tokens. A sequence whose last context token is in a pass gets its first
  // draft from that pass's row.
  std::vector<Proposal*> active;
  std::vector<int64_t> picks;
  while (!pending.empty()) {
    ForwardBatch batch;
    std::vector<Proposal*> in_pass, later;
    int budget = max_step_tokens_;
    for (Proposal* p : pending) {
      SequenceKv& kv = p->seq->kv;
      const int ctx = (int)p->context.size();
      const int n = std::min(ctx - kv.length, budget);
      if (n <= 0) {
        later.push_back(p);
        continue;
      }
      budget -= n;
      batch.tokens.insert(batch.tokens.end(), p->context.begin() + kv.length, p->context.begin() + kv.length + n);
      batch.seqs.push_back({&kv, n, kv.length + n, false});
      in_pass.push_back(p);
    }
    if (!run(batch, in_pass.size(), picks)) return;
    for (size_t i = 0; i < in_pass.size(); ++i) {
      Proposal& p = *in_pass[i];
      p.seq->kv.length = batch.seqs[i].ctx_len;
      if (p.seq->kv.length < (int)p.context.size()) {
        later.push_back(&p);  // more context next pass; this row's pick is not a draft
        continue;
      }
      p.drafts.push_back((TokenId)picks[i]);
      if ((int)p.drafts.size() < p.k) active.push_back(&p);
    }
    pending = std::move(later);
  }
  // Further drafts: one token per sequence per pass.
  while (!active.empty()) {
    ForwardBatch batch;
    for (Proposal* p : active) {
      SequenceKv& kv = p->seq->kv;
      batch.tokens.push_back(p->drafts.back());
      batch.seqs.push_back({&kv, 1, kv.length + 1, false});
    }
    if (!run(batch, active.size(), picks)) return;
    std::vector<Proposal*> next;
    for (size_t i = 0; i < active.size(); ++i) {
      Proposal& p = *active[i];
      p.seq->kv.length = batch.seqs[i].ctx_len;
      p.drafts.push_back((TokenId)picks[i]);
      if ((int)p.drafts.size() < p.k) next.push_back(&p);
    }
    active = std::move(next);
  }
}

}  // namespace rbee::llm
