// ModelConfig from Hugging Face config.json and GGUF metadata, one case per architecture, with what transformers
// and llama.cpp make of the same keys written out by hand: which layers slide, the per-family traits (Gemma's
// GELU, scaled and tied embeddings, (1 + w) norms; Qwen2's biases; Phi-3's fused projections), rope layout and
// local rope base, and the refusals of unknown architectures. Also the architecture registry itself.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include <unistd.h>

#include "common/source_dir.h"
#include "llm/models/architecture.h"
#include "rbee/core/error.h"
#include "rbee/formats/gguf.h"
#include "rbee/formats/gguf_writer.h"
#include "rbee/llm/model.h"
#include "rbee/llm/model_config.h"
#include "rbee/llm/model_files.h"
#include "rbee/llm/prompt.h"
#include "rbee/llm/tokenizer.h"

namespace rbee::llm {
namespace {

nlohmann::json base_config(const std::string& model_type, int layers) {
  return {{"model_type", model_type},   {"vocab_size", 100},       {"hidden_size", 64},
          {"intermediate_size", 128},   {"num_hidden_layers", layers}, {"num_attention_heads", 4},
          {"num_key_value_heads", 2},   {"rms_norm_eps", 1e-6},    {"rope_theta", 10000.0}};
}

std::vector<bool> bools(std::initializer_list<int> v) {
  std::vector<bool> out;
  for (int x : v) out.push_back(x != 0);
  return out;
}

TEST(ModelConfigHf, LlamaIsThePlainPreNormDecoder) {
  const ModelConfig c = config_from_hf(base_config("llama", 2));
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rotary_dim, 16);
  EXPECT_EQ(c.rope_mode, RopeMode::Neox);  // Hugging Face layout
  EXPECT_EQ(c.activation, Activation::Silu);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_FALSE(c.qkv_bias || c.qk_norm || c.post_norms || c.fused_qkv || c.fused_gate_up || c.norm_weight_plus_one);
  EXPECT_FLOAT_EQ(c.embedding_scale, 1.0f);
  EXPECT_FLOAT_EQ(c.attn_scale, 0.25f);  // 1/sqrt(16)
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.layer_is_local, bools({0, 0}));
}

TEST(ModelConfigHf, MistralSlidesEveryLayer) {
  auto j = base_config("mistral", 3);
  j["sliding_window"] = 16;
  const ModelConfig c = config_from_hf(j);
  EXPECT_EQ(c.arch, "mistral");
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_EQ(c.layer_is_local, bools({1, 1, 1}));
}

TEST(ModelConfigHf, Qwen2HasQkvBiasAndSlidesOnlyWhenAsked) {
  auto j = base_config("qwen2", 2);
  j["sliding_window"] = 16;
  j["use_sliding_window"] = false;
  ModelConfig c = config_from_hf(j);
  EXPECT_EQ(c.arch, "qwen2");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.layer_is_local, bools({0, 0}));
  j["use_sliding_window"] = true;
  c = config_from_hf(j);
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_EQ(c.layer_is_local, bools({1, 1}));
}

TEST(ModelConfigHf, Phi3FusesProjectionsAndRotatesPartially) {
  auto j = base_config("phi3", 2);
  j["partial_rotary_factor"] = 0.5;
  j["sliding_window"] = 32;
  const ModelConfig c = config_from_hf(j);
  EXPECT_EQ(c.arch, "phi3");
  EXPECT_TRUE(c.fused_qkv);
  EXPECT_TRUE(c.fused_gate_up);
  EXPECT_EQ(c.rotary_dim, 8);
  EXPECT_EQ(c.sliding_window, 32);
  EXPECT_EQ(c.layer_is_local, bools({1, 1}));
}

TEST(ModelConfigHf, GemmaScalesEmbeddingsTiesThemAndAddsOneToNorms) {
  auto j = base_config("gemma", 2);
  j["tie_word_embeddings"] = false;  // Gemma ties whatever the file says (transformers' Gemma has no lm_head)
  const ModelConfig c = config_from_hf(j);
  EXPECT_EQ(c.arch, "gemma");
  EXPECT_EQ(c.activation, Activation::GeluTanh);
  EXPECT_FLOAT_EQ(c.embedding_scale, 8.0f);  // sqrt(64)
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_TRUE(c.norm_weight_plus_one);
  EXPECT_FALSE(c.post_norms);
  EXPECT_EQ(c.sliding_window, 0);
}

TEST(ModelConfigHf, Gemma2SlidesEvenLayersWithSandwichNorms) {
  auto j = base_config("gemma2", 4);
  j["sliding_window"] = 16;
  j["query_pre_attn_scalar"] = 64;
  j["attn_logit_softcapping"] = 50.0;
  j["final_logit_softcapping"] = 30.0;
  const ModelConfig c = config_from_hf(j);
  EXPECT_EQ(c.arch, "gemma2");
  EXPECT_TRUE(c.post_norms);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_TRUE(c.norm_weight_plus_one);
  EXPECT_FLOAT_EQ(c.attn_scale, 0.125f);  // 1/sqrt(64)
  EXPECT_FLOAT_EQ(c.attn_softcap, 50.0f);
  EXPECT_FLOAT_EQ(c.final_softcap, 30.0f);
  EXPECT_EQ(c.layer_is_local, bools({1, 0, 1, 0}));
}

TEST(ModelConfigHf, Gemma3TextConfigInsideTheMultimodalOne) {
  auto text = base_config("gemma3_text", 7);
  text["sliding_window"] = 16;
  text["sliding_window_pattern"] = 3;
  text["rope_theta"] = 1000000.0;
  text["rope_local_base_freq"] = 10000.0;
  const nlohmann::json j = {{"model_type", "gemma3"}, {"text_config", text}};
  const ModelConfig c = config_from_hf(j);
  EXPECT_EQ(c.arch, "gemma3");
  EXPECT_EQ(c.n_layers, 7);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.post_norms);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c.rope_theta_local, 1e4f);
  EXPECT_EQ(c.layer_is_local, bools({1, 1, 0, 1, 1, 0, 1}));  // every 3rd layer is global
}

TEST(ModelConfigHf, Gemma3RopeParametersPerLayerKindAndLayerTypes) {
  auto j = base_config("gemma3_text", 4);
  j.erase("rope_theta");
  j["sliding_window"] = 16;
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 5000.0}}}};
  j["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention", "full_attention"};
  const ModelConfig c = config_from_hf(j);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c.rope_theta_local, 5000.0f);
  EXPECT_EQ(c.layer_is_local, bools({0, 1, 1, 0}));
}

TEST(ModelConfigHf, UnknownModelTypeIsRefusedByName) {
  try {
    config_from_hf(base_config("gpt_neox", 2));
    FAIL() << "gpt_neox was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("gpt_neox"), std::string::npos) << e.what();
  }
  auto j = base_config("llama", 2);
  j.erase("model_type");
  EXPECT_THROW(config_from_hf(j), Error);
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("rbee_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

ModelConfig gguf_config_of_preset(const std::string& preset) {
  const std::string path = temp_path(preset + ".gguf");
  write_random_model(preset, DType::F32, path, 1);
  ModelConfig c = config_from_gguf(gguf::File::open(path));
  std::filesystem::remove(path);
  return c;
}

TEST(ModelConfigGguf, LlamaKeepsLlamaCppsPermutedRope) {
  const ModelConfig c = gguf_config_of_preset("tiny-llama");
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.rope_mode, RopeMode::Normal);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_TRUE(c.rope_llamacpp_angles);
}

TEST(ModelConfigGguf, Qwen2IsNeoxWithBiasAndTied) {
  const ModelConfig c = gguf_config_of_preset("tiny-qwen2");
  EXPECT_EQ(c.arch, "qwen2");
  EXPECT_EQ(c.rope_mode, RopeMode::Neox);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.tie_embeddings);
}

TEST(ModelConfigGguf, Gemma3NormsAreStoredPlusOneAndFiveOfSixLayersSlide) {
  const ModelConfig c = gguf_config_of_preset("tiny-gemma3");
  EXPECT_EQ(c.arch, "gemma3");
  EXPECT_FALSE(c.norm_weight_plus_one);  // llama.cpp's converter stored 1 + w
  EXPECT_TRUE(c.qk_norm && c.post_norms && c.tie_embeddings);
  EXPECT_EQ(c.activation, Activation::GeluTanh);
  EXPECT_FLOAT_EQ(c.embedding_scale, 16.0f);  // sqrt(256)
  EXPECT_FLOAT_EQ(c.rope_theta_local, 10000.0f);  // llama.cpp's default without rope.freq_base_swa
  EXPECT_EQ(c.layer_is_local, bools({1, 1, 1, 1, 1, 0}));
}

TEST(ModelConfigGguf, UnknownArchitectureIsRefusedByName) {
  const std::string path = temp_path("gpt2_arch.gguf");
  gguf::Writer w;
  w.add_string("general.architecture", "gpt2");
  w.write(path);
  try {
    config_from_gguf(gguf::File::open(path));
    FAIL() << "gpt2 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("'gpt2'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gemma3"), std::string::npos) << "lists the known ones: " << e.what();
  }
  std::filesystem::remove(path);
}

TEST(ChatFamily, FromTheArchitectureOrTheLlamaVocabulary) {
  const std::string dir = test::source_dir() + "/tests/data/tokenizers/";
  const auto smollm2 = Tokenizer::from_hf_json(dir + "smollm2/tokenizer.json");  // a Llama with ChatML tokens
  const auto llama2 = Tokenizer::from_gguf(gguf::File::open(dir + "ggml-vocab-llama-spm.gguf"));
  const auto llama3 = Tokenizer::from_hf_json(dir + "llama-bpe/tokenizer.json");
  ModelConfig c;
  const std::vector<std::pair<std::string, std::string>> fixed = {
      {"qwen2", "chatml"}, {"phi3", "phi3"}, {"mistral", "mistral"},
      {"gemma", "gemma"},  {"gemma2", "gemma"}, {"gemma3", "gemma"}};
  for (const auto& [arch, family] : fixed) {
    c.arch = arch;
    EXPECT_EQ(chat_family(c, *llama2), family) << arch;
  }
  c.arch = "llama";
  EXPECT_EQ(chat_family(c, *smollm2), "chatml");
  EXPECT_EQ(chat_family(c, *llama2), "llama2");
  EXPECT_EQ(chat_family(c, *llama3), "llama3");
}


TEST(ArchitectureRegistry, EachEntryIsCompleteAndFoundByItsNames) {
  std::set<std::string> names, hf_types, presets;
  for (const Architecture* a : architectures()) {
    ASSERT_NE(a, nullptr);
    EXPECT_TRUE(names.insert(a->name).second) << "two entries named " << a->name;
    EXPECT_EQ(&architecture(a->name), a);
    EXPECT_EQ(find_architecture(a->name), a);
    EXPECT_NE(a->layer, nullptr) << a->name;
    EXPECT_NE(a->chat_family, nullptr) << a->name;
    EXPECT_FALSE(a->hf_layer_names.empty()) << a->name;
    ASSERT_FALSE(a->hf_model_types.empty()) << a->name;
    for (const std::string& t : a->hf_model_types) {
      EXPECT_TRUE(hf_types.insert(t).second) << "model_type " << t << " claimed twice";
      EXPECT_EQ(find_hf_architecture(t), a) << t;
    }
    for (const ShapePreset& p : a->shape_presets) {
      EXPECT_EQ(p.arch, a->name) << p.name;
      EXPECT_TRUE(presets.insert(p.name).second) << "preset " << p.name << " twice";
    }
  }
  EXPECT_EQ(names.size(), 7u);  // llama, mistral, qwen2, phi3, gemma, gemma2, gemma3
  EXPECT_EQ(presets.size(), shape_presets().size());
  EXPECT_EQ(find_architecture("gpt2"), nullptr);
  EXPECT_EQ(find_hf_architecture("gpt2"), nullptr);
  try {
    architecture("gpt2");
    FAIL() << "gpt2 was found";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("llama, mistral"), std::string::npos) << e.what();
  }
}

// Every preset writes a random model whose config reads back as its architecture and loads (the per-layer
// tensors of random_layer_vectors are the ones the architecture's loader asks for).
TEST(ArchitectureRegistry, EveryShapePresetsTinyModelLoads) {
  for (const ShapePreset& p : shape_presets()) {
    if (p.name.rfind("tiny-", 0) != 0) continue;  // the real-size ones take minutes to write
    const std::string path = temp_path(p.name + "_load.gguf");
    write_random_model(p.name, DType::F32, path, 2);
    auto model = Model::load(path);
    EXPECT_EQ(model->config().arch, p.arch);
    EXPECT_EQ(model->config().n_layers, p.layers);
    std::filesystem::remove(path);
  }
}

}  // namespace
}  // namespace rbee::llm
