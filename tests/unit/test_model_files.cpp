// Random-weight models and re-quantization (rbee random-model / rbee quantize): what is written reads back
// with the GGUF reader, loads as a model, and a quantized copy holds the same weights within the block type's
// error.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <unistd.h>

#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/formats/gguf.h"
#include "rbee/llm/kv_cache.h"
#include "rbee/llm/model.h"
#include "rbee/llm/model_files.h"
#include "rbee/ops.h"

namespace rbee::llm {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("rbee_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

// f32 values of a tensor stored in a GGUF file, whatever its type.
std::vector<float> read_as_f32(const gguf::File& f, const std::string& name) {
  const gguf::TensorInfo* info = f.find_tensor(name);
  EXPECT_NE(info, nullptr) << name;
  auto bytes = f.tensor_bytes(*info);
  Device& cpu = Registry::global().cpu();
  Tensor t = Tensor::wrap(const_cast<uint8_t*>(bytes.data()), info->shape, info->dtype, cpu, nullptr);
  Tensor f32 = is_quantized(info->dtype) ? ops::dequantize(t) : ops::cast(t, DType::F32);
  return f32.to_vector<float>();
}

TEST(ModelFiles, RandomModelHasThePresetShapeAndRuns) {
  const std::string path = temp_path("tiny_llama_f16.gguf");
  write_random_model("tiny-llama", DType::F16, path, 3);
  const ShapePreset& p = shape_preset("tiny-llama");
  {
    gguf::File f = gguf::File::open(path);
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    EXPECT_EQ(f.get_int("llama.block_count"), p.layers);
    EXPECT_EQ(f.get_int("llama.attention.head_count_kv"), p.kv_heads);
    EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens").size(), (size_t)p.vocab);
    const gguf::TensorInfo* up = f.find_tensor("blk.1.ffn_up.weight");
    ASSERT_NE(up, nullptr);
    EXPECT_EQ(up->shape, Shape({p.ffn, p.hidden}));
    EXPECT_EQ(up->dtype, DType::F16);
    // Uniform in +-sqrt(3/cols): unit variance per output for unit inputs, and not all equal.
    const auto w = read_as_f32(f, "blk.1.ffn_up.weight");
    double sq = 0;
    for (float v : w) sq += (double)v * v;
    EXPECT_NEAR(sq / (double)w.size(), 1.0 / p.hidden, 0.1 / p.hidden);
  }
  auto model = Model::load(path);
  KvCache cache(model->device(), model->config(), 4, 16, DType::F32);
  SequenceKv seq;
  ASSERT_TRUE(seq.reserve(cache, 5));
  ForwardBatch batch;
  batch.tokens = {1, 300, 301, 302, 303};
  batch.seqs.push_back({&seq, 5, 5, false});
  const auto logits = model->forward(batch, cache).to_vector<float>();
  ASSERT_EQ(logits.size(), (size_t)p.vocab);
  float lo = logits[0], hi = logits[0];
  for (float v : logits) {
    ASSERT_TRUE(std::isfinite(v));
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GT(hi - lo, 0.1f);
  seq.release(cache);
  std::filesystem::remove(path);
}

TEST(ModelFiles, QuantizeKeepsWeightsWithinTheBlockTypesError) {
  const std::string f16 = temp_path("tiny_qwen2_f16.gguf"), q8 = temp_path("tiny_qwen2_q8_0.gguf");
  write_random_model("tiny-qwen2", DType::F16, f16, 5);
  quantize_model(f16, q8, DType::Q8_0);
  gguf::File a = gguf::File::open(f16), b = gguf::File::open(q8);
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  EXPECT_EQ(b.get_string("general.architecture"), "qwen2");
  EXPECT_EQ(b.find_tensor("blk.0.attn_q.weight")->dtype, DType::Q8_0);
  EXPECT_EQ(b.find_tensor("blk.0.attn_norm.weight")->dtype, DType::F32);  // 1-D tensors stay as they are
  const auto wa = read_as_f32(a, "blk.2.ffn_down.weight"), wb = read_as_f32(b, "blk.2.ffn_down.weight");
  ASSERT_EQ(wa.size(), wb.size());
  float amax = 0, err = 0;
  for (size_t i = 0; i < wa.size(); ++i) {
    amax = std::max(amax, std::fabs(wa[i]));
    err = std::max(err, std::fabs(wa[i] - wb[i]));
  }
  // Q8_0: step d = block max / 127, stored as f16: |x - q d'| <= d / 2 + 127 |d - d'| <= d (1/2 + 127 * 2^-11).
  EXPECT_GT(err, 0.0f);
  EXPECT_LE(err, amax / 127.0f * 0.57f);
  std::filesystem::remove(f16);
  std::filesystem::remove(q8);
}

TEST(ModelFiles, BadArgumentsGiveClearErrors) {
  EXPECT_THROW(write_random_model("no-such-shape", DType::F16, temp_path("x.gguf"), 1), Error);
  EXPECT_THROW(quantize_model(temp_path("missing.gguf"), temp_path("out.gguf"), DType::Q4_0), Error);
}

}  // namespace
}  // namespace rbee::llm
