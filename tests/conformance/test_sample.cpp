// Conformance: the sample op (token sampling, op_table.def) on every backend.
//
// (a) against a naive reference written from the op's definition (sort everything, walk prefixes), on
//     synthetic logits with ties, banned (-inf) and NaN tokens, for each sampler setting: the ids must be equal,
//     since the definition fixes every rounding (backends/common/sampling.h supplies its arithmetic: the
//     weights, the key order and the random stream);
// (b) on stored logits (the tiny models' transformers logits, tests/data/tiny_models/*/logits.f32): the
//     backend's SampleBatch gives the ids llm::Sampler gives on the CPU, for each setting, with penalties and
//     biases from synthetic prompts and outputs (every other step through the host path of requests with
//     logprobs, which adjusts the logits itself);
// (c) bad arguments raise InvalidArgument naming the argument.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <random>

#include <fmt/format.h>

#include "backends/common/sampling.h"
#include "common/expect_error.h"
#include "common/harness.h"
#include "common/source_dir.h"
#include "conformance/op_suites.h"
#include "rbee/llm/sampler.h"
#include "rbee/ops.h"

namespace rbee::test {
namespace {

namespace s = ::rbee::sampling;

struct Setting {
  const char* name;
  float temperature, top_p, min_p, repetition, presence, frequency;
  int top_k;
  bool listed;  // tokens with penalties and biases
};
const std::vector<Setting> kSettings = {
    {"greedy", 0.f, 1.f, 0.f, 1.f, 0.f, 0.f, 0, false},
    {"greedy_penalties", 0.f, 1.f, 0.f, 1.3f, 0.4f, 0.2f, 0, true},
    {"temperature", 1.f, 1.f, 0.f, 1.f, 0.f, 0.f, 0, false},
    {"hot", 5.f, 1.f, 0.f, 1.f, 0.f, 0.f, 0, false},
    {"top_k", 0.7f, 1.f, 0.f, 1.f, 0.f, 0.f, 40, false},
    {"top_k1", 1.f, 1.f, 0.f, 1.f, 0.f, 0.f, 1, false},
    {"top_p", 1.f, 0.9f, 0.f, 1.f, 0.f, 0.f, 0, false},
    {"top_p_small", 1.f, 0.01f, 0.f, 1.f, 0.f, 0.f, 0, false},
    {"min_p", 1.f, 1.f, 0.05f, 1.f, 0.f, 0.f, 0, false},
    {"combined", 0.8f, 0.95f, 0.05f, 1.f, 0.f, 0.f, 50, false},
    {"penalties", 0.9f, 0.9f, 0.f, 1.3f, 0.4f, 0.2f, 0, true},
    {"everything", 0.8f, 0.95f, 0.02f, 1.1f, 0.5f, 0.1f, 100, true},
};

// The op's inputs for `rows` rows of one setting.
struct Inputs {
  int64_t rows = 0, h = 0;
  std::vector<float> params;
  std::vector<int64_t> control;
  std::vector<int32_t> tokens;  // [rows, h, 2]
  std::vector<float> bias;      // [rows, h]
};

Inputs make_inputs(const Setting& st, int64_t rows, int64_t vocab, uint64_t seed, int64_t draw) {
  Inputs in;
  in.rows = rows;
  in.h = st.listed ? 60 : 0;
  std::mt19937_64 rng(seed);
  for (int64_t r = 0; r < rows; ++r) {
    in.params.insert(in.params.end(), {st.temperature, st.top_p, st.min_p, st.repetition, st.presence, st.frequency});
    in.control.insert(in.control.end(), {(int64_t)st.top_k, (int64_t)(seed * 1000 + r), draw + r});
    // Distinct ids (some unused slots), counts -1 (bias only) .. 5, biases 0, +-2.5 or -inf (a ban).
    std::vector<int32_t> ids((size_t)vocab);
    for (int32_t i = 0; i < (int32_t)vocab; ++i) ids[(size_t)i] = i;
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int64_t j = 0; j < in.h; ++j) {
      const bool unused = j % 13 == 5;
      const int32_t count = (int32_t)(rng() % 7) - 1;
      in.tokens.push_back(unused ? -1 : ids[(size_t)j]);
      in.tokens.push_back(count);
      const int kind = (int)(rng() % 6);
      in.bias.push_back(kind == 0 ? -INFINITY : kind == 1 ? 2.5f : kind == 2 ? -2.5f : 0.f);
    }
  }
  return in;
}

// Synthetic logits [rows, vocab]: N(0, 2) with a few peaks, exact ties, -inf and NaN entries; the last row is
// all NaN (no candidate, no greedy pick), the one before has two finite tokens only.
std::vector<float> synthetic_logits(int64_t rows, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 2.f);
  std::vector<float> l((size_t)(rows * vocab));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = l.data() + r * vocab;
    for (int64_t i = 0; i < vocab; ++i) row[i] = normal(rng);
    for (int p = 0; p < 5; ++p) row[rng() % vocab] = 9.f + (float)p * 0.5f;
    for (int t = 0; t < 40; ++t) row[rng() % vocab] = row[rng() % vocab];  // ties
    row[rng() % vocab] = 11.f, row[rng() % vocab] = 11.f;                   // a tie at the top
    row[rng() % vocab] = -INFINITY;
    if (r % 3 == 1) row[rng() % vocab] = NAN;
    if (r == rows - 2) {
      for (int64_t i = 0; i < vocab; ++i) row[i] = -INFINITY;
      row[3] = 1.f, row[vocab - 2] = 0.5f;
    }
    if (r == rows - 1) {
      for (int64_t i = 0; i < vocab; ++i) row[i] = NAN;
    }
  }
  return l;
}

// The definition of kernels.h, written plainly: sort every candidate, walk the prefixes.
int32_t naive_sample(const float* logits, int64_t vocab, const float* p, const int64_t* ctl, const int32_t* tokens,
                     const float* bias, int64_t h) {
  std::vector<float> l(logits, logits + vocab);
  for (int64_t j = 0; j < h; ++j) {
    const int32_t id = tokens[2 * j];
    if (id >= 0) l[(size_t)id] = s::adjust(l[(size_t)id], bias[j], tokens[2 * j + 1], p[3], p[4], p[5]);
  }
  const float temperature = p[0];
  if (!(temperature > 0)) {
    int32_t best = -1;
    for (int32_t i = 0; i < (int32_t)vocab; ++i) {
      if (!std::isnan(l[(size_t)i]) && (best < 0 || l[(size_t)i] > l[(size_t)best])) best = i;
    }
    return best;
  }
  struct C {
    float c;
    int32_t id;
    uint64_t w;
  };
  std::vector<C> cand;
  for (int32_t i = 0; i < (int32_t)vocab; ++i) {
    const float v = l[(size_t)i];
    if (!std::isnan(v) && v != -INFINITY) cand.push_back({v / temperature, i, 0});
  }
  if (cand.empty()) return -1;
  std::stable_sort(cand.begin(), cand.end(), [](const C& a, const C& b) { return a.c > b.c; });  // ids ascend
  if (ctl[0] > 0 && ctl[0] < (int64_t)cand.size()) cand.resize((size_t)ctl[0]);
  uint64_t total = 0;
  for (C& x : cand) total += x.w = s::weight(x.c, cand[0].c);
  if (p[1] < 1) {
    uint64_t cum = 0;
    for (size_t i = 0; i < cand.size(); ++i) {
      cum += cand[i].w;
      if ((double)cum >= (double)total * (double)p[1]) {
        cand.resize(i + 1);
        break;
      }
    }
  }
  if (p[2] > 0) {
    std::vector<C> kept;
    for (const C& x : cand) {
      if ((double)x.w >= (double)p[2] * 1099511627776.0) kept.push_back(x);
    }
    cand = kept;
  }
  std::sort(cand.begin(), cand.end(), [](const C& a, const C& b) { return a.id < b.id; });
  uint64_t mass = 0;
  for (const C& x : cand) mass += x.w;
  const uint64_t r = s::scale_to(s::random_word((uint64_t)ctl[1], (uint64_t)ctl[2]), mass);
  uint64_t cum = 0;
  for (const C& x : cand) {
    cum += x.w;
    if (r < cum) return x.id;
  }
  return -2;  // unreachable
}

std::vector<int32_t> run_op(Device& device, const std::vector<float>& logits, int64_t vocab, const Inputs& in) {
  const Tensor l = Tensor::from_vector(logits, {in.rows, vocab}, device);
  const Tensor p = Tensor::from_vector(in.params, {in.rows, kSampleParams}, device);
  const Tensor c = Tensor::from_vector(in.control, {in.rows, kSampleControls}, device);
  const Tensor t = in.h > 0 ? Tensor::from_vector(in.tokens, {in.rows, in.h, 2}, device)
                            : Tensor::empty({in.rows, 0, 2}, DType::I32, device);
  const Tensor b =
      in.h > 0 ? Tensor::from_vector(in.bias, {in.rows, in.h}, device) : Tensor::empty({in.rows, 0}, DType::F32, device);
  poison_allocations(device, (size_t)in.rows * 4);
  return ops::sample(l, p, c, t, b).to_vector<int32_t>();
}

// ------------------------------------------------------------------------------ (a) the naive reference
using SampleParam = std::tuple<std::string, int>;
class SampleConformance : public ::testing::TestWithParam<SampleParam> {};

TEST_P(SampleConformance, MatchesNaiveReference) {
  const auto& [backend, setting] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const Setting& st = kSettings[(size_t)setting];
  const int64_t rows = 8, vocab = 5003;  // not a multiple of any block size
  const auto logits = synthetic_logits(rows, vocab, 7 + setting);
  for (int64_t draw = 0; draw < 3; ++draw) {
    const Inputs in = make_inputs(st, rows, vocab, 11 + (uint64_t)setting, draw * 100);
    const auto got = run_op(*device, logits, vocab, in);
    ASSERT_EQ(got.size(), (size_t)rows);
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t want = naive_sample(logits.data() + r * vocab, vocab, in.params.data() + r * kSampleParams,
                                        in.control.data() + r * kSampleControls, in.tokens.data() + r * in.h * 2,
                                        in.bias.data() + r * in.h, in.h);
      EXPECT_EQ(got[(size_t)r], want) << st.name << " row " << r << " draw " << in.control[r * kSampleControls + 2];
    }
    // The all-NaN row has no candidate, the two-token row samples one of its two.
    EXPECT_EQ(got[(size_t)rows - 1], -1);
    EXPECT_TRUE(got[(size_t)rows - 2] == 3 || got[(size_t)rows - 2] == vocab - 2 || st.listed);
  }
}

// Draws follow the weights: 2000 draws (draw index 0..1999 of one seed) of a row with probabilities
// 0.5 / 0.3 / 0.2 (logits ln p), every other token banned. Catches a stream or scale that is not uniform.
class SampleDistribution : public ::testing::TestWithParam<std::string> {};

TEST_P(SampleDistribution, DrawsFollowTheWeights) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  const int64_t rows = 2000, vocab = 300;
  std::vector<float> logits((size_t)(rows * vocab), -INFINITY);
  for (int64_t r = 0; r < rows; ++r) {
    logits[(size_t)(r * vocab + 10)] = std::log(0.5f);
    logits[(size_t)(r * vocab + 200)] = std::log(0.3f);
    logits[(size_t)(r * vocab + 299)] = std::log(0.2f);
  }
  Inputs in = make_inputs(kSettings[2], rows, vocab, 5, 0);
  for (int64_t r = 0; r < rows; ++r) in.control[(size_t)(r * kSampleControls + 1)] = 42;  // one stream
  const auto got = run_op(*device, logits, vocab, in);
  std::map<int32_t, int> n;
  for (int32_t id : got) n[id]++;
  EXPECT_EQ(n.size(), 3u);
  EXPECT_NEAR(n[10] / 2000.0, 0.5, 0.035);
  EXPECT_NEAR(n[200] / 2000.0, 0.3, 0.035);
  EXPECT_NEAR(n[299] / 2000.0, 0.2, 0.035);
}

INSTANTIATE_TEST_SUITE_P(Sample, SampleDistribution, ::testing::ValuesIn(conformance_backends()),
                         [](const auto& info) { return info.param; });
RBEE_CONFORMANCE_SUITE(Sample, SampleDistribution);

INSTANTIATE_TEST_SUITE_P(Sample, SampleConformance,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::Range(0, (int)kSettings.size())),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + kSettings[(size_t)std::get<1>(info.param)].name;
                         });
RBEE_CONFORMANCE_SUITE(Sample, SampleConformance);

// --------------------------------------------------------------------- (b) stored logits vs llm::Sampler
std::vector<float> read_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<float> out((size_t)in.tellg() / 4);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(out.data()), (std::streamsize)(out.size() * 4));
  return out;
}

llm::SamplingParams sampling_params(const Setting& st, uint64_t seed) {
  llm::SamplingParams sp;
  sp.temperature = st.temperature;
  sp.top_k = st.top_k;
  sp.top_p = st.top_p;
  sp.min_p = st.min_p;
  sp.repetition_penalty = st.repetition;
  sp.presence_penalty = st.presence;
  sp.frequency_penalty = st.frequency;
  if (st.listed) {
    sp.logit_bias[17] = -INFINITY;
    sp.logit_bias[42] = 3.0f;
    sp.logit_bias[99] = -1.5f;
  }
  sp.seed = seed;
  sp.has_seed = true;
  return sp;
}

class SampleStoredLogits : public ::testing::TestWithParam<SampleParam> {};

TEST_P(SampleStoredLogits, EqualsTheCpuSampler) {
  const auto& [backend, setting] = GetParam();
  RBEE_REQUIRE_DEVICE(backend, device);
  const Setting& st = kSettings[(size_t)setting];
  const int64_t vocab = 320;
  std::vector<float> logits;
  for (const char* arch : {"llama", "qwen2", "gemma2", "phi3"}) {
    const auto l = read_f32(test::source_dir() + "/tests/data/tiny_models/" + arch + "/logits.f32");
    logits.insert(logits.end(), l.begin(), l.end());
  }
  const int64_t rows = (int64_t)logits.size() / vocab;
  // Each row is a job with its own sampler, prompt and output so far; three steps of all of them.
  std::mt19937_64 rng(3);
  std::vector<std::vector<llm::TokenId>> prompts((size_t)rows), outputs((size_t)rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (int i = 0; i < 12; ++i) prompts[(size_t)r].push_back((llm::TokenId)(rng() % vocab));
    for (int i = 0; i < (int)(r % 9); ++i) outputs[(size_t)r].push_back((llm::TokenId)(rng() % 40));
  }
  std::vector<llm::Sampler> host, dev;
  for (int64_t r = 0; r < rows; ++r) {
    host.emplace_back(sampling_params(st, 1000 + (uint64_t)r));
    dev.emplace_back(sampling_params(st, 1000 + (uint64_t)r));
  }
  const Tensor on_device = Tensor::from_vector(logits, {rows, vocab}, *device);
  int64_t differing = 0;
  for (int step = 0; step < 3; ++step) {
    llm::SampleBatch batch;
    for (int64_t r = 0; r < rows; ++r) batch.add(dev[(size_t)r], prompts[(size_t)r], outputs[(size_t)r]);
    const auto got = batch.run(on_device);
    for (int64_t r = 0; r < rows; ++r) {
      const std::span<const float> row(logits.data() + r * vocab, (size_t)vocab);
      // Odd steps ask for log-probabilities: the host sampler then adjusts the logits itself (the path of
      // requests with logprobs or a grammar) and must still draw what the op draws.
      llm::TokenLogprob lp;
      llm::SampleStep host_step;
      if (step % 2 == 1) {
        host_step.top_logprobs = 0;
        host_step.logprobs = &lp;
      }
      const llm::TokenId want = host[(size_t)r].sample(row, prompts[(size_t)r], outputs[(size_t)r], host_step);
      if (got[(size_t)r] != want && differing++ < 5) {
        ADD_FAILURE() << st.name << " step " << step << " row " << r << ": " << backend << " " << got[(size_t)r]
                      << ", cpu sampler " << want;
      }
      outputs[(size_t)r].push_back(want);
    }
  }
  EXPECT_EQ(differing, 0);
}

INSTANTIATE_TEST_SUITE_P(Sample, SampleStoredLogits,
                         ::testing::Combine(::testing::ValuesIn(conformance_backends()),
                                            ::testing::Range(0, (int)kSettings.size())),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + kSettings[(size_t)std::get<1>(info.param)].name;
                         });
RBEE_CONFORMANCE_SUITE(Sample, SampleStoredLogits);

// ---------------------------------------------------------------------------------------- (c) bad input
class SampleArguments : public ::testing::TestWithParam<std::string> {};

TEST_P(SampleArguments, BadArgumentsAreInvalidArgument) {
  RBEE_REQUIRE_DEVICE(GetParam(), device);
  const Tensor l = ops::zeros({2, 10}, DType::F32, *device);
  const Tensor p = Tensor::from_vector(std::vector<float>{1, 1, 0, 1, 0, 0, 1, 1, 0, 1, 0, 0}, {2, 6}, *device);
  const Tensor c = ops::zeros({2, 3}, DType::I64, *device);
  const Tensor t = Tensor::empty({2, 0, 2}, DType::I32, *device);
  const Tensor b = Tensor::empty({2, 0}, DType::F32, *device);
  EXPECT_EQ(ops::sample(l, p, c, t, b).shape(), (Shape{2}));
  expect_invalid([&] { ops::sample(ops::zeros({2, 10}, DType::F16, *device), p, c, t, b); }, "logits must be f32");
  expect_invalid([&] { ops::sample(l, ops::zeros({2, 5}, DType::F32, *device), c, t, b); }, "params must be");
  expect_invalid([&] { ops::sample(l, p, ops::zeros({2, 3}, DType::I32, *device), t, b); }, "control must be");
  expect_invalid([&] { ops::sample(l, p, c, Tensor::empty({2, 1, 3}, DType::I32, *device), b); }, "tokens must be");
  expect_invalid([&] { ops::sample(l, p, c, t, Tensor::empty({2, 1}, DType::F32, *device)); }, "bias must be");
  expect_invalid([&] { ops::sample(Tensor(), p, c, t, b); }, "'logits' is an undefined tensor");
  if (device->host_accessible()) {
    const Tensor bad_p = Tensor::from_vector(std::vector<float>{1, 0, 0, 1, 0, 0, 1, 1, 0, 1, 0, 0}, {2, 6}, *device);
    expect_invalid([&] { ops::sample(l, bad_p, c, t, b); }, "top_p");
    const Tensor twice = Tensor::from_vector(std::vector<int32_t>{4, 1, 4, 2, -1, 0, -1, 0}, {2, 2, 2}, *device);
    expect_invalid([&] { ops::sample(l, p, c, twice, ops::zeros({2, 2}, DType::F32, *device)); }, "listed twice");
    const Tensor outside = Tensor::from_vector(std::vector<int32_t>{10, 1, -1, 0}, {2, 1, 2}, *device);
    expect_invalid([&] { ops::sample(l, p, c, outside, ops::zeros({2, 1}, DType::F32, *device)); },
                   "outside the vocabulary");
  }
}

INSTANTIATE_TEST_SUITE_P(Sample, SampleArguments, ::testing::ValuesIn(conformance_backends()),
                         [](const auto& info) { return info.param; });
RBEE_CONFORMANCE_SUITE(Sample, SampleArguments);

}  // namespace
}  // namespace rbee::test
