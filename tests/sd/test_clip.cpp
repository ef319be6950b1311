// CLIP tokenizer and text encoder against transformers (tools/goldens/make_tiny_sd.py).
#include <fstream>

#include "rbee/core/error.h"
#include "rbee/sd/clip_text_model.h"
#include "rbee/sd/clip_tokenizer.h"
#include "sd_test_util.h"

namespace rbee::sd {
namespace {

using test::tiny_sd;

std::vector<int32_t> ints(const nlohmann::json& a) {
  std::vector<int32_t> v;
  for (const auto& x : a) v.push_back(x.get<int32_t>());
  return v;
}

// Every golden text: ids equal (exactly) to CLIPTokenizer's, with and without padding/truncation to 77.
TEST(SdClipTokenizer, MatchesTransformers) {
  ClipTokenizer tok = ClipTokenizer::from_folder(tiny_sd("sd15/tokenizer"));
  std::ifstream in(tiny_sd("tokenizer_goldens.json"));
  ASSERT_TRUE(in.good());
  nlohmann::json g = nlohmann::json::parse(in);
  ASSERT_GE(g.size(), 8u);
  for (const auto& c : g) {
    const std::string text = c["text"].get<std::string>();
    std::vector<int32_t> want = ints(c["ids"]);
    std::vector<int32_t> body(want.begin() + 1, want.end() - 1);
    EXPECT_EQ(tok.encode(text), body) << text;
    EXPECT_EQ(tok.encode_padded(text, 77), ints(c["padded"])) << text;
  }
}

// Non-Latin text as transformers 5's (fast) CLIPTokenizer encodes it (tools/goldens/make_clip_unicode_goldens.py):
// Unicode lower case (Cyrillic, Greek, Armenian, full-width, Deseret, U+0130), CJK runs kept whole, NFC, every
// Unicode space, control characters kept, upper-cased special-token text BPE-encoded; with the SD 2.1 tokenizer the
// pad token "!" is an added token wherever it appears. Ids equal, padded and not.
TEST(SdClipTokenizer, UnicodeMatchesTransformers5) {
  std::ifstream in(tiny_sd("tokenizer_unicode_goldens.json"));
  ASSERT_TRUE(in.good());
  nlohmann::json g = nlohmann::json::parse(in);
  for (const char* name : {"sd15", "sd21"}) {
    ClipTokenizer tok = ClipTokenizer::from_folder(tiny_sd(std::string(name) + "/tokenizer"));
    ASSERT_GE(g[name].size(), 16u);
    for (const auto& c : g[name]) {
      const std::string text = c["text"].get<std::string>();
      std::vector<int32_t> want = ints(c["ids"]);
      EXPECT_EQ(tok.encode(text), std::vector<int32_t>(want.begin() + 1, want.end() - 1)) << name << ": " << text;
      EXPECT_EQ(tok.encode_padded(text, 77), ints(c["padded"])) << name << ": " << text;
    }
  }
  // Upper and lower case of other scripts give one encoding.
  ClipTokenizer tok = ClipTokenizer::from_folder(tiny_sd("sd15/tokenizer"));
  EXPECT_EQ(tok.encode("ПРИВЕТ ΣΟΦΙΑ"), tok.encode("привет σοφια"));
}

// A tokenizer folder with tokenizer.json only (transformers 5's save_pretrained; tests/data/tiny_sd/sd15_l4) reads
// the same vocabulary and merges as vocab.json + merges.txt.
TEST(SdClipTokenizer, TokenizerJsonOnlyFolder) {
  ClipTokenizer files = ClipTokenizer::from_folder(tiny_sd("sd15/tokenizer"));
  ClipTokenizer json = ClipTokenizer::from_folder(tiny_sd("sd15_l4/tokenizer"));
  EXPECT_EQ(json.vocab_size(), files.vocab_size());
  EXPECT_EQ(json.pad_id(), files.pad_id());
  std::ifstream in(tiny_sd("tokenizer_goldens.json"));
  nlohmann::json g = nlohmann::json::parse(in);
  for (const auto& c : g) EXPECT_EQ(json.encode_padded(c["text"].get<std::string>(), 77), ints(c["padded"]));
  EXPECT_THROW(ClipTokenizer::from_tokenizer_json(tiny_sd("sd15/tokenizer/vocab.json")), Error);
}

TEST(SdClipTokenizer, PadTokenFromConfig) {
  ClipTokenizer v1 = ClipTokenizer::from_folder(tiny_sd("sd15/tokenizer"));
  ClipTokenizer v2 = ClipTokenizer::from_folder(tiny_sd("sd21/tokenizer"));
  EXPECT_EQ(v1.pad_id(), v1.eos_id());
  EXPECT_NE(v2.pad_id(), v2.eos_id());
  auto f = safetensors::File::open(tiny_sd("sd21/goldens.safetensors"));
  std::vector<int32_t> want = f.tensor("ids_uncond", rbee::test::cpu_device()).to_vector<int32_t>();
  EXPECT_EQ(v2.encode_padded("", 77), want);
}

TEST(SdClipTokenizer, Errors) {
  ClipTokenizer tok = ClipTokenizer::from_folder(tiny_sd("sd15/tokenizer"));
  EXPECT_THROW(tok.encode("bad \xff utf8"), Error);
  EXPECT_THROW(tok.encode_padded("x", 1), Error);
  EXPECT_THROW(ClipTokenizer::from_folder(tiny_sd("no_such_dir")), Error);
  EXPECT_THROW(ClipTokenizer::from_files(tiny_sd("sd15/tokenizer/vocab.json"), tiny_sd("sd15/tokenizer/merges.txt"),
                                         "<|no_such_token|>"),
               Error);
}

class SdClipText : public ::testing::TestWithParam<const char*> {};

// Last hidden state within 2e-4 absolute (activations of magnitude ~1-5; f32 with different summation order).
TEST_P(SdClipText, EmbeddingsMatchTransformers) {
  const std::string name = GetParam();
  Device& cpu = rbee::test::cpu_device();
  Weights w = Weights::open(tiny_sd(name + "/text_encoder"), cpu);
  ClipTextModel model = ClipTextModel::load(w, ClipTextConfig::from_json(w.config()));
  ClipTokenizer tok = ClipTokenizer::from_folder(tiny_sd(name + "/tokenizer"));
  auto g = safetensors::File::open(tiny_sd(name + "/goldens.safetensors"));
  std::vector<int32_t> ids = tok.encode_padded("a photograph of an astronaut riding a horse", 77);
  ASSERT_EQ(ids, g.tensor("ids_cond", cpu).to_vector<int32_t>());
  rbee::test::poison_allocations(cpu, 77 * 32 * 4, 8);
  ClipTextOutput out = model.forward({ids, tok.encode_padded("", 77)});
  RBEE_EXPECT_TENSOR_NEAR(out.last_hidden.narrow(0, 0, 1), g.tensor("text_cond", cpu), 2e-4, 0);
  RBEE_EXPECT_TENSOR_NEAR(out.last_hidden.narrow(0, 1, 1), g.tensor("text_uncond", cpu), 2e-4, 0);
}

INSTANTIATE_TEST_SUITE_P(Tiny, SdClipText, ::testing::Values("sd15", "sd21"));

TEST(SdClipTextErrors, BadInputs) {
  Device& cpu = rbee::test::cpu_device();
  Weights w = Weights::open(tiny_sd("sd15/text_encoder"), cpu);
  ClipTextConfig cfg = ClipTextConfig::from_json(w.config());
  ClipTextModel model = ClipTextModel::load(w, cfg);
  EXPECT_THROW(model.forward({}), Error);
  EXPECT_THROW(model.forward({std::vector<int32_t>(78, 1)}), Error);
  EXPECT_THROW(model.forward({{1, 2}, {1}}), Error);
  EXPECT_THROW(model.forward({{1, (int32_t)cfg.vocab_size}}), Error);
  ClipTextConfig wrong = cfg;
  wrong.hidden_size = 48;  // shapes in the file no longer match
  wrong.num_heads = 4;
  EXPECT_THROW(ClipTextModel::load(w, wrong), Error);
  ClipTextConfig more = cfg;
  more.num_layers = cfg.num_layers + 1;  // a missing tensor
  EXPECT_THROW(ClipTextModel::load(w, more), Error);
  nlohmann::json bad = w.config();
  bad["hidden_act"] = "relu";
  EXPECT_THROW(ClipTextConfig::from_json(bad), Error);
  bad = w.config();
  bad["num_attention_heads"] = 5;
  EXPECT_THROW(ClipTextConfig::from_json(bad), Error);
}

}  // namespace
}  // namespace rbee::sd
