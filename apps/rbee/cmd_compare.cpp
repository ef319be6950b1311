// `rbee compare`: runs one model on two backends (by default the chosen one against the CPU) and checks that
// they agree: the logits of every position of a few fixed prompts, the same prompts run as one batch of
// sequences of different lengths, and greedy decoding over --steps tokens. Exit code 0 when they agree.
//
// Agreement: for each prompt, max |logit_a - logit_b| over all positions and the vocabulary, divided by the RMS
// of the reference logits, stays under --tol; greedy tokens are equal, or they split at a step where the
// reference's top-2 margin is under --margin (a near tie that rounding may flip; the margin is printed).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "commands.h"
#include "model_options.h"
#include "rbee/backend/device.h"
#include "rbee/core/error.h"

namespace rbee::cli {

namespace {

struct CompareOptions {
  ModelOptions model;
  std::string reference = "cpu";
  int steps = 64;
  double tol = 0.05;
  double margin = 0.1;
  uint64_t seed = 7;
};

// Logits [rows, vocab] as host rows.
std::vector<std::vector<float>> host_rows(const Tensor& logits) {
  const int64_t rows = logits.shape()[0], vocab = logits.shape()[1];
  const std::vector<float> all = logits.to_vector<float>();
  std::vector<std::vector<float>> out((size_t)rows);
  for (int64_t r = 0; r < rows; ++r) out[(size_t)r].assign(all.begin() + r * vocab, all.begin() + (r + 1) * vocab);
  return out;
}

struct Top2 {
  llm::TokenId id = 0;
  float margin = 0;  // best minus second best
};
Top2 top2(const std::vector<float>& row) {
  size_t best = 0;
  for (size_t i = 1; i < row.size(); ++i) {
    if (row[i] > row[best]) best = i;
  }
  float second = -INFINITY;
  for (size_t i = 0; i < row.size(); ++i) {
    if (i != best) second = std::max(second, row[i]);
  }
  return {(llm::TokenId)best, row[best] - second};
}

struct ErrorStats {
  double max_abs = 0, ref_sq = 0;
  int64_t n = 0, top1_equal = 0, rows = 0;
  void add(const std::vector<float>& ref, const std::vector<float>& got) {
    for (size_t i = 0; i < ref.size(); ++i) {
      max_abs = std::max(max_abs, (double)std::fabs(ref[i] - got[i]));
      ref_sq += (double)ref[i] * ref[i];
    }
    n += (int64_t)ref.size();
    top1_equal += top2(ref).id == top2(got).id;
    rows += 1;
  }
  double relative() const { return max_abs / std::sqrt(ref_sq / (double)std::max<int64_t>(n, 1)); }
};

// One model loaded on one backend with its own cache.
struct Side {
  LoadedModel m;
  std::string name;
};

// Prefill of all prompts (each alone, or all in one batch) with logits for every position.
std::vector<std::vector<std::vector<float>>> prefill(Side& side, const std::vector<std::vector<llm::TokenId>>& prompts,
                                                     bool one_batch) {
  std::vector<llm::SequenceKv> seqs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    RBEE_CHECK(seqs[i].reserve(*side.m.cache, (int)prompts[i].size()), "compare: the KV cache is too small");
  }
  std::vector<std::vector<std::vector<float>>> out(prompts.size());
  auto run = [&](size_t first, size_t last) {
    llm::ForwardBatch batch;
    for (size_t i = first; i < last; ++i) {
      batch.tokens.insert(batch.tokens.end(), prompts[i].begin(), prompts[i].end());
      batch.seqs.push_back({&seqs[i], (int)prompts[i].size(), (int)prompts[i].size(), true});
    }
    auto rows = host_rows(side.m.model->forward(batch, *side.m.cache));
    size_t r = 0;
    for (size_t i = first; i < last; ++i) {
      out[i].assign(rows.begin() + (long)r, rows.begin() + (long)(r + prompts[i].size()));
      r += prompts[i].size();
    }
  };
  if (one_batch) {
    run(0, prompts.size());
  } else {
    for (size_t i = 0; i < prompts.size(); ++i) run(i, i + 1);
  }
  for (auto& s : seqs) s.release(*side.m.cache);
  return out;
}

// Greedy decoding: the token chosen at each step and the logits row it was chosen from.
struct Greedy {
  std::vector<llm::TokenId> tokens;
  std::vector<std::vector<float>> rows;
};
Greedy greedy(Side& side, const std::vector<llm::TokenId>& prompt, int steps) {
  llm::SequenceKv seq;
  RBEE_CHECK(seq.reserve(*side.m.cache, (int)prompt.size() + steps), "compare: the KV cache is too small");
  llm::ForwardBatch batch;
  batch.tokens = prompt;
  batch.seqs.push_back({&seq, (int)prompt.size(), (int)prompt.size(), false});
  Greedy g;
  std::vector<float> row = host_rows(side.m.model->forward(batch, *side.m.cache))[0];
  seq.length = (int)prompt.size();
  for (int i = 0; i < steps; ++i) {
    const llm::TokenId next = top2(row).id;
    g.tokens.push_back(next);
    g.rows.push_back(row);
    if (i + 1 == steps) break;
    llm::ForwardBatch step;
    step.tokens = {next};
    step.seqs.push_back({&seq, 1, seq.length + 1, false});
    row = host_rows(side.m.model->forward(step, *side.m.cache))[0];
    seq.length += 1;
  }
  seq.release(*side.m.cache);
  return g;
}

int run_compare(const CompareOptions& opt) {
  Side test{load_model(opt.model), opt.model.backend};
  ModelOptions ref_opt = opt.model;
  ref_opt.backend = opt.reference;
  ref_opt.device = 0;
  ref_opt.devices.clear();  // the reference runs whole on one device
  ref_opt.gpu_layers = "auto";
  ref_opt.split_ratio.clear();
  Side ref{load_model(ref_opt), opt.reference};
  std::printf("compare: %s on %s (%s) against %s (%s)\n", opt.model.model.c_str(),
              test.m.model->device().id().c_str(), test.m.model->device().info().name.c_str(),
              ref.m.model->device().id().c_str(), ref.m.model->device().info().name.c_str());

  // Fixed prompts of random token ids (the model need not have a real vocabulary), three lengths.
  const int vocab = (int)test.m.model->config().vocab_size;
  std::mt19937_64 rng(opt.seed);
  std::uniform_int_distribution<int> pick(3, vocab - 1);
  std::vector<std::vector<llm::TokenId>> prompts;
  for (int len : {7, 32, 61}) {
    std::vector<llm::TokenId> p((size_t)len);
    for (auto& t : p) t = pick(rng);
    prompts.push_back(std::move(p));
  }

  bool ok = true;
  const auto ref_rows = prefill(ref, prompts, false);
  for (bool one_batch : {false, true}) {
    const auto got = prefill(test, prompts, one_batch);
    for (size_t i = 0; i < prompts.size(); ++i) {
      ErrorStats e;
      for (size_t r = 0; r < ref_rows[i].size(); ++r) e.add(ref_rows[i][r], got[i][r]);
      const bool pass = e.relative() <= opt.tol;
      ok = ok && pass;
      std::printf("prefill %-7s prompt %zu (%3zu tokens): max|diff| %.4g = %.4f x RMS(ref), top-1 equal %lld/%lld  %s\n",
                  one_batch ? "batched" : "alone", i, prompts[i].size(), e.max_abs, e.relative(),
                  (long long)e.top1_equal, (long long)e.rows, pass ? "ok" : "FAIL");
    }
  }

  for (size_t i = 0; i < prompts.size(); ++i) {
    const Greedy a = greedy(ref, prompts[i], opt.steps);
    const Greedy b = greedy(test, prompts[i], opt.steps);
    int split = -1;
    for (int s = 0; s < opt.steps; ++s) {
      if (a.tokens[(size_t)s] != b.tokens[(size_t)s]) {
        split = s;
        break;
      }
    }
    if (split < 0) {
      std::printf("greedy prompt %zu: %d/%d tokens equal  ok\n", i, opt.steps, opt.steps);
      continue;
    }
    const float ref_margin = top2(a.rows[(size_t)split]).margin;
    const bool near_tie = ref_margin < opt.margin;
    ok = ok && near_tie;
    std::printf("greedy prompt %zu: split at step %d (%s token %d, %s token %d); %s top-2 margin there %.4f  %s\n", i,
                split, ref.name.c_str(), a.tokens[(size_t)split], test.name.c_str(), b.tokens[(size_t)split],
                ref.name.c_str(), ref_margin, near_tie ? "ok (near tie)" : "FAIL");
  }
  std::printf("compare: %s\n", ok ? "AGREE" : "DISAGREE");
  return ok ? 0 : 1;
}

}  // namespace

Command add_compare_command(CLI::App& app) {
  auto opt = std::make_shared<CompareOptions>();
  CLI::App* sub = app.add_subcommand(
      "compare", "Check that a backend gives the same logits and greedy tokens as a reference backend (the CPU)");
  add_model_options(*sub, opt->model);
  sub->add_option("--reference", opt->reference, "Reference backend")->capture_default_str();
  sub->add_option("--steps", opt->steps, "Greedy decoding steps compared")->capture_default_str()->check(
      CLI::Range(1, 4096));
  sub->add_option("--tol", opt->tol, "Largest max|diff| / RMS(reference logits) accepted")->capture_default_str();
  sub->add_option("--margin", opt->margin,
                  "A greedy split is accepted where the reference's top-2 logit margin is below this")
      ->capture_default_str();
  sub->add_option("--seed", opt->seed, "Seed of the random prompt tokens")->capture_default_str();
  return [opt] { return run_compare(*opt); };
}

}  // namespace rbee::cli
