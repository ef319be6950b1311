// Every supported architecture against Hugging Face transformers: a tiny random-weight model per family
// (tests/data/tiny_models/<arch>/, made by tools/goldens/make_tiny_models.py from the family's real config with
// the sizes cut down) is loaded both as the Hugging Face directory (safetensors) and as the GGUF file that
// llama.cpp's converter made of it, and its logits for a fixed 40-token sequence are compared with
// transformers' f32 logits (eager attention). The sequence is longer than every sliding window.
//
// Tolerance. Weights, activations and the KV cache are f32 in both engines; what differs is summation order,
// fused vs separate steps (add + rms_norm) and exp/tanh/erf approximations, each a few f32 ulps, compounded
// over 2-6 layers. A logit passes when |ours - hf| <= kRelTol * max|hf| + kRelTol * |hf| (relative 1e-4 on
// the sequence's logit scale); a feature done wrong (a window off by one, rope on the wrong half, a missing
// bias or soft-cap) moves logits by 1e-2 of that scale or more: the golden script checks that switching each
// feature off moves them by more than 1e-2.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include <gtest/gtest.h>

#include "golden_util.h"
#include "rbee/backend/device.h"
#include "rbee/llm/kv_cache.h"
#include "rbee/llm/model.h"

namespace rbee {
namespace {

constexpr double kRelTol = 1e-4;

const char* const kArchs[] = {"llama", "mistral", "qwen2", "phi3", "gemma", "gemma2", "gemma3"};

std::string arch_dir(const std::string& arch) { return test::golden_data_dir() + "/tiny_models/" + arch; }

struct Golden {
  std::vector<llm::TokenId> ids;
  int64_t rows = 0, vocab = 0;
  std::vector<float> logits;
};

// The golden for this format: the GGUF's own file where its converter drops a setting.
Golden load_golden(const std::string& arch, bool gguf) {
  const nlohmann::json j = test::read_json(arch_dir(arch) + "/golden.json");
  Golden g;
  g.ids = j.at("ids").get<std::vector<llm::TokenId>>();
  g.rows = j.at("shape")[0].get<int64_t>();
  g.vocab = j.at("shape")[1].get<int64_t>();
  const std::string file = gguf && j.contains("logits_gguf") ? j.at("logits_gguf").get<std::string>()
                                                             : j.at("logits").get<std::string>();
  g.logits = test::read_f32(arch_dir(arch) + "/" + file);
  RBEE_CHECK((int64_t)g.logits.size() == g.rows * g.vocab && g.rows == (int64_t)g.ids.size(),
             "{}: golden shape does not match its data", arch);
  return g;
}

::testing::AssertionResult logits_close(const std::vector<float>& got, const Golden& g, const std::string& what) {
  if (got.size() != g.logits.size()) {
    return ::testing::AssertionFailure() << what << ": " << got.size() << " logits, golden has " << g.logits.size();
  }
  double scale = 0;
  for (float v : g.logits) scale = std::max(scale, (double)std::fabs(v));
  double max_rel = 0;
  int64_t bad = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = g.logits[i], err = std::fabs((double)got[i] - want);
    max_rel = std::max(max_rel, err / scale);
    if (!(err <= kRelTol * scale + kRelTol * std::fabs(want))) {
      if (bad++ == 0) {
        first = fmt::format("position {} token {}: ours {}, transformers {}", (int64_t)i / g.vocab,
                            (int64_t)i % g.vocab, got[i], want);
      }
    }
  }
  std::printf("[ %-24s ] max |diff| / max |logit| = %.2e (logit scale %.2f)\n", what.c_str(), max_rel, scale);
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << got.size()
                                       << " logits outside tolerance; first at " << first;
}

struct Case {
  std::string arch;
  bool gguf;
};

class TinyModel : public ::testing::TestWithParam<Case> {
 protected:
  std::string path() const {
    return GetParam().gguf ? arch_dir(GetParam().arch) + "/model.gguf" : arch_dir(GetParam().arch);
  }
  std::string label(const char* how) const {
    return GetParam().arch + (GetParam().gguf ? " gguf " : " hf ") + how;
  }
};

TEST_P(TinyModel, LoadsWithItsFamilysSettings) {
  const auto model = llm::Model::load(path());
  const llm::ModelConfig& c = model->config();
  const std::string& arch = GetParam().arch;
  // The Mistral GGUF is a llama to llama.cpp's converter.
  EXPECT_EQ(c.arch, arch == "mistral" && GetParam().gguf ? "llama" : arch);
  EXPECT_EQ(c.vocab_size, 320);
  EXPECT_EQ(c.hidden_size, 48);
  if (arch == "qwen2") {
    EXPECT_TRUE(c.qkv_bias);
  }
  if (arch == "phi3") {
    EXPECT_TRUE(c.fused_qkv && c.fused_gate_up);
  }
  if (arch == "gemma2") {
    EXPECT_FLOAT_EQ(c.attn_softcap, 50.0f);
    EXPECT_FLOAT_EQ(c.final_softcap, 30.0f);
    EXPECT_EQ(c.layer_is_local, (std::vector<bool>{true, false, true, false}));
  }
  if (arch == "gemma3") {
    EXPECT_TRUE(c.qk_norm);
    EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
    EXPECT_FLOAT_EQ(c.rope_theta_local, 1e4f);
    EXPECT_EQ(c.layer_is_local, (std::vector<bool>{true, true, true, true, true, false}));
    EXPECT_EQ(c.rope_scaling.kind, ops::RopeScaling::Kind::Linear);
  }
  if (arch == "llama" && !GetParam().gguf) {
    EXPECT_EQ(c.rope_scaling.kind, ops::RopeScaling::Kind::Llama3);
  }
  if (arch == "mistral" && !GetParam().gguf) {
    EXPECT_EQ(c.sliding_window, 8);
  }
}

// The whole sequence as one prefill batch with every position's logits.
TEST_P(TinyModel, PrefillMatchesTransformers) {
  const Golden g = load_golden(GetParam().arch, GetParam().gguf);
  const auto model = llm::Model::load(path());
  llm::KvCache cache(model->device(), model->config(), 4, 16, DType::F32);
  EXPECT_TRUE(logits_close(test::run_sequence(*model, cache, g.ids, g.ids.size()), g, label("prefill")));
}

// 13 tokens of prefill, then one token per step through the paged cache (crosses two cache blocks).
TEST_P(TinyModel, DecodeMatchesTransformers) {
  const Golden g = load_golden(GetParam().arch, GetParam().gguf);
  const auto model = llm::Model::load(path());
  llm::KvCache cache(model->device(), model->config(), 4, 16, DType::F32);
  EXPECT_TRUE(logits_close(test::run_sequence(*model, cache, g.ids, 13), g, label("decode")));
}

// Two sequences of different lengths in one batch, their blocks interleaved in the cache: each row block must
// equal the single-sequence golden (causal, so the shorter one is the golden's prefix).
TEST_P(TinyModel, BatchOfTwoSequencesMatchesTransformers) {
  const Golden g = load_golden(GetParam().arch, GetParam().gguf);
  const auto model = llm::Model::load(path());
  llm::KvCache cache(model->device(), model->config(), 8, 16, DType::F32);
  llm::SequenceKv a, b;
  const int la = (int)g.ids.size(), lb = 23;
  // Blocks handed out alternately, so neither sequence's blocks are contiguous.
  ASSERT_TRUE(a.reserve(cache, 16));
  ASSERT_TRUE(b.reserve(cache, 16));
  ASSERT_TRUE(a.reserve(cache, 32));
  ASSERT_TRUE(b.reserve(cache, lb));
  ASSERT_TRUE(a.reserve(cache, la));
  llm::ForwardBatch batch;
  batch.tokens.assign(g.ids.begin(), g.ids.begin() + lb);
  batch.tokens.insert(batch.tokens.end(), g.ids.begin(), g.ids.end());
  batch.seqs.push_back({&b, lb, lb, true});
  batch.seqs.push_back({&a, la, la, true});
  const std::vector<float> rows = model->forward(batch, cache).to_vector<float>();
  ASSERT_EQ(rows.size(), (size_t)(la + lb) * g.vocab);
  Golden prefix = g;
  prefix.logits.assign(g.logits.begin(), g.logits.begin() + (long)lb * g.vocab);
  EXPECT_TRUE(logits_close(std::vector<float>(rows.begin(), rows.begin() + (long)lb * g.vocab), prefix,
                           label("batch short")));
  EXPECT_TRUE(logits_close(std::vector<float>(rows.begin() + (long)lb * g.vocab, rows.end()), g, label("batch long")));
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (const char* a : kArchs) {
    out.push_back({a, false});
    out.push_back({a, true});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Goldens, TinyModel, ::testing::ValuesIn(all_cases()), [](const auto& info) {
  return info.param.arch + (info.param.gguf ? "_gguf" : "_safetensors");
});

// Bad input to a loaded model is refused with an Error naming the problem, never a crash.
TEST(TinyModelErrors, TokenOutsideTheVocabulary) {
  const auto model = llm::Model::load(arch_dir("llama"));
  llm::KvCache cache(model->device(), model->config(), 2, 16, DType::F32);
  llm::SequenceKv seq;
  ASSERT_TRUE(seq.reserve(cache, 2));
  llm::ForwardBatch batch;
  batch.tokens = {1, 320};
  batch.seqs.push_back({&seq, 2, 2, true});
  try {
    model->forward(batch, cache);
    FAIL() << "token 320 of a 320-token vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("320"), std::string::npos) << e.what();
  }
}

TEST(TinyModelErrors, BatchWhoseSequencesDoNotAddUp) {
  const auto model = llm::Model::load(arch_dir("llama"));
  llm::KvCache cache(model->device(), model->config(), 2, 16, DType::F32);
  llm::SequenceKv seq;
  ASSERT_TRUE(seq.reserve(cache, 3));
  llm::ForwardBatch batch;
  batch.tokens = {1, 5, 6};
  batch.seqs.push_back({&seq, 2, 2, true});
  EXPECT_THROW(model->forward(batch, cache), Error);
  batch.seqs[0] = {&seq, 3, 40, true};  // more positions than the sequence holds blocks for
  EXPECT_THROW(model->forward(batch, cache), Error);
}

TEST(TinyModelErrors, DirectoryWithAMissingTensor) {
  namespace fs = std::filesystem;
  const fs::path tmp = fs::temp_directory_path() / "rbee_tiny_missing_tensor";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(fs::path(arch_dir("llama")) / f, tmp / f);
  }
  // A config whose layer count exceeds what the weights hold.
  nlohmann::json cfg = test::read_json((tmp / "config.json").string());
  cfg["num_hidden_layers"] = 3;
  std::ofstream(tmp / "config.json") << cfg.dump();
  fs::copy_file(fs::path(arch_dir("llama")) / "model.safetensors", tmp / "model.safetensors");
  try {
    llm::Model::load(tmp.string());
    FAIL() << "a model without layer 2's weights loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.2"), std::string::npos) << e.what();
  }
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace rbee
