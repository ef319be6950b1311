// RBEE_TP_OVERLAP=1 (StepContext::tp_overlap, llm/models/overlapped_reduce.h): a tensor split's decode steps cut each
// row-parallel product (attention output, down projection) in two by output columns and run the first half's
// all-reduce beside the second half's product. Each element is still summed in rank order with rank 0's residual
// added first, so the logits must be bit-identical to the switch-off schedule: checked here over two ranks on the
// CPU (the host communicator; side stream calls do nothing) and, where a GPU backend has two devices (the emulator
// with RBEE_EMU_DEVICES=2, or two GPUs), over those (their side streams and peer-to-peer all-reduces), for decode
// batches of one and of several sequences (rows of the cut halves are strided in the [rows, hidden] output), with
// the fused decoder ops (Llama, Phi-3's stacked qkv and gate/up; F16 weights) and without (Gemma 2's sandwich norms
// through mlp_block); on the CPU also with uneven parts (RBEE_TP_OVERLAP_SPLIT 75 and 10: on the tiny models' 48
// columns the latter leaves too few to cut, so the counter must stay still there). The counter of cut products
// must move with the switch on and stay still with it off.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/random_models.h"
#include "common/scoped_env.h"
#include "common/two_gpu_backend.h"
#include "golden/golden_util.h"
#include "llm/models/overlapped_reduce.h"
#include "rbee/backend/device.h"
#include "rbee/llm/generate.h"
#include "rbee/llm/kv_cache.h"
#include "rbee/llm/memory_plan.h"
#include "rbee/llm/model.h"

namespace rbee::llm {
namespace {

std::string tiny(const std::string& arch) { return test::golden_data_dir() + "/tiny_models/" + arch + "/model.gguf"; }

std::unique_ptr<Model> load_split(const std::string& path, const std::vector<Device*>& devices) {
  PlanRequest req;
  req.devices = devices;
  req.split = SplitMode::Tensor;
  req.ctx_size = 256;
  LoadOptions o;
  o.placement = plan_memory(describe_model(path), req).placement;
  return Model::load(path, o);
}

// Three sequences prefilled one by one (5, 7 and 4 tokens: not decode steps), then 5 decode steps of all three in
// one batch (three rows a step), teacher-forced with fixed tokens; every decode row's logits, then greedy tokens of
// generate() (decode steps of one row).
struct Run {
  std::vector<float> batch_logits;
  std::vector<TokenId> greedy;
};

Run run(Model& m) {
  Run r;
  const int vocab = m.config().vocab_size;
  KvCache cache(m.kv_layout(), 16, 16);
  const std::vector<int> prompt = {5, 7, 4};
  constexpr int kSteps = 5;
  std::vector<SequenceKv> seqs(prompt.size());
  for (size_t s = 0; s < prompt.size(); ++s) {
    EXPECT_TRUE(seqs[s].reserve(cache, prompt[s] + kSteps));
    ForwardBatch b;
    for (int i = 0; i < prompt[s]; ++i) b.tokens.push_back((TokenId)((i * 31 + 7 * (int)s + 3) % vocab));
    b.seqs.push_back({&seqs[s], prompt[s], prompt[s], false});
    m.forward(b, cache);
    seqs[s].length = prompt[s];
  }
  for (int step = 0; step < kSteps; ++step) {
    ForwardBatch b;
    for (size_t s = 0; s < prompt.size(); ++s) {
      b.tokens.push_back((TokenId)((step * 13 + (int)s * 5 + 1) % vocab));
      b.seqs.push_back({&seqs[s], 1, seqs[s].length + 1, false});
    }
    const std::vector<float> rows = m.forward(b, cache).to_vector<float>();
    r.batch_logits.insert(r.batch_logits.end(), rows.begin(), rows.end());
    for (auto& s : seqs) ++s.length;
  }
  for (auto& s : seqs) s.release(cache);
  GenerateRequest req;
  for (int i = 0; i < 9; ++i) req.prompt.push_back((TokenId)((i * 37 + 11) % vocab));
  req.max_tokens = 12;
  req.sampling.temperature = 0;
  req.ignore_eos = true;
  r.greedy = generate(m, cache, req, [](const std::string&) { return true; }).tokens;
  return r;
}

// One load and run per schedule (a decode graph keeps the schedule it was recorded with); split: the first part's
// share of the columns in percent (RBEE_TP_OVERLAP_SPLIT).
void expect_overlap_bit_identical(const std::string& path, const std::vector<Device*>& devices,
                                  const std::string& split = "50") {
  SCOPED_TRACE(path + " on " + devices[0]->id() + ", " + devices[1]->id() + ", first part " + split + "%");
  Run off, on;
  {
    test::ScopedEnv env("RBEE_TP_OVERLAP", "0");
    const uint64_t before = overlapped_reductions();
    auto m = load_split(path, devices);
    ASSERT_EQ(m->placement().split, SplitMode::Tensor);
    off = run(*m);
    EXPECT_EQ(overlapped_reductions(), before) << "the switch is off, but products were cut";
  }
  {
    test::ScopedEnv env("RBEE_TP_OVERLAP", "1"), first("RBEE_TP_OVERLAP_SPLIT", split);
    const uint64_t before = overlapped_reductions();
    auto m = load_split(path, devices);
    on = run(*m);
    // 10% of a 48-column output is under 16 columns: nothing to cut (the 256-wide random model still cuts).
    const bool cuts = split != "10" || m->config().hidden_size >= 160;
    if (cuts) EXPECT_GT(overlapped_reductions(), before) << "the switch is on, but no product was cut";
    else EXPECT_EQ(overlapped_reductions(), before) << "a part of less than 16 columns was cut";
  }
  ASSERT_EQ(off.batch_logits.size(), on.batch_logits.size());
  ASSERT_FALSE(off.batch_logits.empty());
  size_t differ = 0;
  for (size_t i = 0; i < off.batch_logits.size(); ++i) {
    differ += std::memcmp(&off.batch_logits[i], &on.batch_logits[i], sizeof(float)) != 0;
  }
  EXPECT_EQ(differ, 0u) << "of " << off.batch_logits.size() << " decode logits";
  EXPECT_EQ(off.greedy, on.greedy);
  EXPECT_EQ(on.greedy.size(), 12u);
}

const std::vector<std::string>& models() {
  static const std::vector<std::string> m = {tiny("llama"), tiny("phi3"), tiny("gemma2"),
                                             test::random_model_file("tiny-llama", DType::F16, 99)};
  return m;
}

TEST(TpOverlap, BitIdenticalOnCpuRanks) {
  Registry& registry = Registry::global();
  for (const std::string& path : models()) {
    for (const char* split : {"50", "75", "10"}) {
      expect_overlap_bit_identical(path, {&registry.select("cpu", 0), &registry.select("cpu", 3)}, split);
    }
  }
}

TEST(TpOverlap, BitIdenticalOnGpuRanks) {
  Backend* gpu = test::two_gpu_backend();
  if (!gpu) GTEST_SKIP() << "no GPU backend with two devices (the emulator: RBEE_EMU_DEVICES=2)";
  for (const std::string& path : models()) expect_overlap_bit_identical(path, {&gpu->device(0), &gpu->device(1)});
}

}  // namespace
}  // namespace rbee::llm
