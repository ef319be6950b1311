// Conformance: the LLM decode step replayed as a device graph (llm/models/decode_graph.h).
//  - Graph vs eager: the same model loaded with decode graphs on and off, fed the same tokens (3 sequences of
//    different lengths, batched decode, a KV cache of 4-position blocks so that the block-table width crosses a
//    bucket and a second graph is recorded), must give bit-identical logits at every step, also when the graphed
//    model runs again on a second KV cache at other addresses; on a device that can capture, the steps must
//    really have been replayed.
//  - Decode vs prefill: the logits of those decode steps (bucketed table width, packed inputs, embeddings of the
//    packed token ids) must match one teacher-forced prefill pass over the same tokens (F32 weights, so the
//    two paths differ by float rounding only).
// Models are random-weight GGUFs at the tiny-llama shape written once per process (rbee random-model's code).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/harness.h"
#include "common/random_models.h"
#include "rbee/llm/kv_cache.h"
#include "rbee/llm/model.h"
#include "rbee/ops.h"

namespace rbee::test {
namespace {

const std::string& model_path(DType type) { return random_model_file("tiny-llama", type, 1234); }

// Whether `device` can record and replay a graph of one op (the emulator, for one, cannot).
bool can_capture(Device& device) {
  if (!device.supports_graphs()) return false;
  const Tensor x = Tensor::from_vector(std::vector<float>(64, 1.f), {64}, device);
  (void)ops::affine(x, 2.0, 1.0);  // warm-up
  try {
    device.begin_graph_capture();
  } catch (const Error&) {
    return false;
  }
  try {
    (void)ops::affine(x, 2.0, 1.0);
    device.release_graph(device.end_graph_capture());
  } catch (const Error&) {
    return false;
  }
  return true;
}

constexpr int kBlock = 4;  // cache block size: 57 + 12 positions need 18 blocks, past the first width bucket (16)
constexpr int kSteps = 12;
const std::vector<std::vector<int32_t>> kPrompts = {
    {5, 77, 300, 12, 9, 999, 41, 42, 43},
    {8, 1, 2, 3, 500, 501, 502, 7, 7, 7, 100, 200, 300, 400, 600, 700, 800, 900, 1000, 11, 22, 33, 44, 55, 66, 77, 88,
     99, 111, 222},
    {}};

std::vector<std::vector<int32_t>> prompts() {
  auto p = kPrompts;
  for (int i = 0; i < 57; ++i) p[2].push_back((i * 37 + 11) % 1024);
  return p;
}

llm::KvCache make_cache(llm::Model& model) {
  return llm::KvCache(model.device(), model.config(), (int)prompts().size() * ((57 + kSteps + kBlock) / kBlock + 1),
                      kBlock);
}

// Logits per decode step ([seqs x vocab] each) after prefilling the prompts in one batch. `tokens[s]` holds the
// tokens fed to sequence s after its prompt: chosen greedily when empty, else replayed.
std::vector<std::vector<float>> decode_run(llm::Model& model, std::vector<std::vector<int32_t>>& tokens) {
  const auto ps = prompts();
  const int n_seq = (int)ps.size();
  llm::KvCache cache = make_cache(model);
  std::vector<llm::SequenceKv> seqs((size_t)n_seq);
  llm::ForwardBatch prefill;
  for (int s = 0; s < n_seq; ++s) {
    EXPECT_TRUE(seqs[(size_t)s].reserve(cache, (int)ps[(size_t)s].size() + kSteps + 1));
    prefill.tokens.insert(prefill.tokens.end(), ps[(size_t)s].begin(), ps[(size_t)s].end());
    const int len = (int)ps[(size_t)s].size();
    prefill.seqs.push_back({&seqs[(size_t)s], len, len, false});
  }
  const bool choose = tokens.empty();
  if (choose) tokens.assign((size_t)n_seq, {});
  std::vector<float> last = model.forward(prefill, cache).to_vector<float>();
  for (int s = 0; s < n_seq; ++s) seqs[(size_t)s].length = (int)ps[(size_t)s].size();
  const int vocab = model.config().vocab_size;
  std::vector<std::vector<float>> steps;
  for (int step = 0; step < kSteps; ++step) {
    llm::ForwardBatch batch;
    for (int s = 0; s < n_seq; ++s) {
      if (choose) {
        const float* row = last.data() + (size_t)s * vocab;
        tokens[(size_t)s].push_back((int32_t)(std::max_element(row, row + vocab) - row));
      }
      batch.tokens.push_back(tokens[(size_t)s][(size_t)step]);
      batch.seqs.push_back({&seqs[(size_t)s], 1, seqs[(size_t)s].length + 1, false});
    }
    last = model.forward(batch, cache).to_vector<float>();
    for (auto& q : seqs) q.length += 1;
    steps.push_back(last);
  }
  return steps;
}

llm::LoadOptions load_options(Device& device, bool graphs) {
  llm::LoadOptions o;
  o.device = &device;
  o.decode_graphs = graphs;
  return o;
}

class DecodeGraph : public ::testing::TestWithParam<std::string> {};

TEST_P(DecodeGraph, ReplayedStepsEqualEagerSteps) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  const bool capture = can_capture(*device);
  for (const DType type : {DType::Q4_0, DType::F16}) {
    SCOPED_TRACE(dtype_name(type));
    auto graphed = llm::Model::load(model_path(type), load_options(*device, true));
    auto eager = llm::Model::load(model_path(type), load_options(*device, false));
    EXPECT_FALSE(eager->decode_graphs());
    std::vector<std::vector<int32_t>> tokens;
    const auto a = decode_run(*graphed, tokens);
    const auto b = decode_run(*eager, tokens);
    ASSERT_EQ(a.size(), b.size());
    for (size_t step = 0; step < a.size(); ++step) {
      ASSERT_EQ(a[step].size(), b[step].size());
      EXPECT_EQ(std::memcmp(a[step].data(), b[step].data(), a[step].size() * sizeof(float)), 0)
          << "decode step " << step << ": the replayed logits differ from the eager ones";
    }
    // Again with a new cache while another one holds the first cache's memory: the graphs recorded on the first
    // cache's addresses must not be replayed on the second (the prompt's keys would be missing).
    {
      llm::KvCache blocker = make_cache(*graphed);
      const auto again = decode_run(*graphed, tokens);
      for (size_t step = 0; step < again.size(); ++step) {
        EXPECT_EQ(std::memcmp(again[step].data(), b[step].data(), b[step].size() * sizeof(float)), 0)
            << "second cache, decode step " << step << ": the replayed logits differ from the eager ones";
      }
    }
    if (capture) {
      // 12 steps, two width buckets (16 and 32 blocks): each bucket's first step is eager, its second captured
      // and replayed, the rest replayed.
      EXPECT_TRUE(graphed->decode_graphs());
      EXPECT_GE(graphed->decode_graph_replays(), 2 * ((uint64_t)kSteps - 4));
    }
    EXPECT_EQ(eager->decode_graph_replays(), 0u);
  }
}

TEST_P(DecodeGraph, DecodeStepsMatchATeacherForcedPrefill) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  auto model = llm::Model::load(model_path(DType::F32), load_options(*device, true));
  std::vector<std::vector<int32_t>> tokens;
  const auto steps = decode_run(*model, tokens);
  const auto ps = prompts();
  const int n_seq = (int)ps.size(), vocab = model->config().vocab_size;
  // One pass over prompt + fed tokens with every position's logits; row (prompt_len + step) - 1 + 1 of sequence s is
  // the prediction after its decode step `step`.
  llm::KvCache cache(*device, model->config(), n_seq * ((57 + kSteps + kBlock) / kBlock + 1), kBlock);
  std::vector<llm::SequenceKv> seqs((size_t)n_seq);
  llm::ForwardBatch batch;
  std::vector<int> row0((size_t)n_seq);
  int rows = 0;
  for (int s = 0; s < n_seq; ++s) {
    std::vector<int32_t> all = ps[(size_t)s];
    all.insert(all.end(), tokens[(size_t)s].begin(), tokens[(size_t)s].end());
    ASSERT_TRUE(seqs[(size_t)s].reserve(cache, (int)all.size()));
    batch.tokens.insert(batch.tokens.end(), all.begin(), all.end());
    batch.seqs.push_back({&seqs[(size_t)s], (int)all.size(), (int)all.size(), true});
    row0[(size_t)s] = rows;
    rows += (int)all.size();
  }
  const auto full = model->forward(batch, cache).to_vector<float>();
  ASSERT_EQ(full.size(), (size_t)rows * vocab);
  double worst = 0;
  for (int step = 0; step < kSteps; ++step) {
    for (int s = 0; s < n_seq; ++s) {
      const float* want = full.data() + (size_t)(row0[(size_t)s] + (int)ps[(size_t)s].size() + step) * vocab;
      const float* got = steps[(size_t)step].data() + (size_t)s * vocab;
      double rms = 0, diff = 0;
      for (int v = 0; v < vocab; ++v) {
        rms += (double)want[v] * want[v];
        diff = std::max(diff, std::fabs((double)got[v] - want[v]));
      }
      rms = std::sqrt(rms / vocab);
      ASSERT_GT(rms, 0.0);
      worst = std::max(worst, diff / rms);
    }
  }
  EXPECT_LT(worst, 2e-3) << "decode logits vs teacher-forced prefill: max |diff| / RMS";
}

INSTANTIATE_TEST_SUITE_P(Llm, DecodeGraph, ::testing::ValuesIn(conformance_backends()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace rbee::test
