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

DraftModel::DraftModel(Model& model, KvCache& cache, bool prefix_cache)
    : model_(model), cache_(cache), prefix_cache_(prefix_cache) {
  if (!prefix_cache_) cache_.clear_prefix_index();
}

bool DraftModel::reserve(Sequence& seq, int positions) { return seq.kv.reserve(cache_, positions); }

void DraftModel::release(Sequence& seq) { seq.kv.release(cache_); }

void DraftModel::propose(std::vector<Proposal>& proposals) {
  std::vector<Proposal*> active;
  ForwardBatch batch;
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
    // Catch up: every context token not yet in the draft's cache, the last (the target's next token) included.
    const int n = ctx - kv.length;
    batch.tokens.insert(batch.tokens.end(), p.context.begin() + kv.length, p.context.end());
    batch.seqs.push_back({&kv, n, ctx, false});
    active.push_back(&p);
  }
  for (int step = 0; !active.empty(); ++step) {
    std::vector<int64_t> picks;
    try {
      const Tensor logits = model_.forward(batch, cache_);
      picks = ops::argmax(logits, 1).to_vector<int64_t>();
    } catch (const std::exception& e) {
      log::warn("event=draft_error sequences={} error=\"{}\"", active.size(), e.what());
      for (Proposal* p : active) p->drafts.clear();
      return;
    }
    std::vector<Proposal*> next;
    ForwardBatch more;
    for (size_t i = 0; i < active.size(); ++i) {
      Proposal& p = *active[i];
      SequenceKv& kv = p.seq->kv;
      kv.length = batch.seqs[i].ctx_len;
      p.drafts.push_back((TokenId)picks[i]);
      if ((int)p.drafts.size() >= p.k) continue;
      more.tokens.push_back(p.drafts.back());
      more.seqs.push_back({&kv, 1, kv.length + 1, false});
      next.push_back(&p);
    }
    active = std::move(next);
    batch = std::move(more);
  }
}

}  // namespace rbee::llm
