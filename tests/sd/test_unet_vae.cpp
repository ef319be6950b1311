// UNet (one forward) and VAE (decode, encode) of the tiny SD 1.5 and 2.1 pipelines against diffusers
// (tools/goldens/make_tiny_sd.py). Tolerances: outputs of magnitude ~1-10, f32 with other summation orders.
#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "rbee/sd/unet.h"
#include "rbee/sd/vae.h"
#include "sd_test_util.h"

namespace rbee::sd {
namespace {

using test::tiny_sd;

class SdTinyModels : public ::testing::TestWithParam<const char*> {};

// Noise (SD 1.5) or v (SD 2.1) prediction for random latents at t = 500 within 1e-3 + 1e-4 * max|ref|.
TEST_P(SdTinyModels, UNetStepMatchesDiffusers) {
  const std::string name = GetParam();
  Device& cpu = rbee::test::cpu_device();
  Weights w = Weights::open(tiny_sd(name + "/unet"), cpu);
  UNet unet = UNet::load(w, UNetConfig::from_json(w.config()));
  auto g = safetensors::File::open(tiny_sd(name + "/goldens.safetensors"));
  rbee::test::poison_allocations(cpu, 2 * 4 * 8 * 8 * 4, 8);
  Tensor out = unet.forward(g.tensor("unet_sample", cpu), 500.0, g.tensor("unet_context", cpu));
  RBEE_EXPECT_TENSOR_NEAR(out, g.tensor("unet_out", cpu), 1e-3, 1e-4);
}

// Decoded image (values ~1) within 5e-4 absolute; encoded mean within 5e-4 absolute.
TEST_P(SdTinyModels, VaeMatchesDiffusers) {
  const std::string name = GetParam();
  Device& cpu = rbee::test::cpu_device();
  Weights w = Weights::open(tiny_sd(name + "/vae"), cpu);
  VaeConfig cfg = VaeConfig::from_json(w.config());
  Vae vae = Vae::load(w, cfg);
  auto g = safetensors::File::open(tiny_sd(name + "/goldens.safetensors"));
  Tensor z = ops::affine(g.tensor("vae_latent", cpu), 1.0 / cfg.scaling_factor, 0.0);
  RBEE_EXPECT_TENSOR_NEAR(vae.decode(z), g.tensor("vae_image", cpu), 5e-4, 1e-4);
  RBEE_EXPECT_TENSOR_NEAR(vae.encode(g.tensor("vae_enc_image", cpu)), g.tensor("vae_enc_mean", cpu), 5e-4, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Tiny, SdTinyModels, ::testing::Values("sd15", "sd21"));

class SdUNetFields : public ::testing::TestWithParam<const char*> {};

// One unet/config.json field away from its default per tiny UNet (tests/data/tiny_sd/unet_fields,
// tools/goldens/make_tiny_sd_folders.py), each taking effect as in diffusers: output at t = 321 on a 5x6 latent within
// 1e-3 + 1e-4 * max |ref|. "no_effect" sets fields diffusers reads that change nothing here (upcast_attention,
// dropout, options of other block types).
TEST_P(SdUNetFields, ForwardMatchesDiffusers) {
  const std::string name = GetParam();
  Device& cpu = rbee::test::cpu_device();
  Weights w = Weights::open(tiny_sd("unet_fields/" + name), cpu);
  UNet unet = UNet::load(w, UNetConfig::from_json(w.config()));
  auto g = safetensors::File::open(tiny_sd("unet_fields/goldens.safetensors"));
  rbee::test::poison_allocations(cpu, 2 * 4 * 5 * 6 * 4, 8);
  Tensor out = unet.forward(g.tensor("sample", cpu), 321.0, g.tensor("context", cpu));
  Tensor want = g.tensor(name + "/out", cpu);
  RBEE_EXPECT_TENSOR_NEAR(out, want, 1e-3, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Fields, SdUNetFields,
                         ::testing::Values("center_input_sample", "mid_block_scale_factor", "scale_shift",
                                           "time_embedding_dim", "conv_kernels", "mid_plain", "mid_none",
                                           "downsample_padding_0", "sinusoid", "no_effect"));

// The fields a config may set that are not implemented: each refused with Unsupported, naming the field.
TEST(SdUNetFieldsRefused, EachNamesItsField) {
  Device& cpu = rbee::test::cpu_device();
  const nlohmann::json base = Weights::open(tiny_sd("sd15/unet"), cpu).config();
  const std::vector<std::pair<const char*, nlohmann::json>> refused = {
      {"time_embedding_type", "fourier"},
      {"resnet_time_scale_shift", "spatial"},
      {"only_cross_attention", true},
      {"dual_cross_attention", true},
      {"encoder_hid_dim", 32},
      {"encoder_hid_dim_type", "text_proj"},
      {"class_embed_type", "timestep"},
      {"num_class_embeds", 10},
      {"time_embedding_act_fn", "silu"},
      {"timestep_post_act", "silu"},
      {"time_cond_proj_dim", 256},
      {"attention_type", "gated"},
      {"act_fn", "gelu"},
      {"num_attention_heads", 2},
      {"reverse_transformer_layers_per_block", nlohmann::json::array({nlohmann::json::array({1})})},
      {"mid_block_type", "UNetMidBlock2DSimpleCrossAttn"},
      {"norm_num_groups", nullptr},
      {"layers_per_block", nlohmann::json::array({1, 2, 2})},
      {"cross_attention_dim", nlohmann::json::array({32, 64, 32})},
  };
  for (const auto& [key, value] : refused) {
    nlohmann::json c = base;
    c[key] = value;
    try {
      (void)UNetConfig::from_json(c);
      ADD_FAILURE() << key << " was not refused";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Unsupported) << key << ": " << e.message();
      EXPECT_NE(e.message().find(key), std::string::npos) << e.message();
    }
  }
  // A list of equal values is the one value.
  nlohmann::json c = base;
  c["layers_per_block"] = nlohmann::json::array({2, 2, 2});
  EXPECT_EQ(UNetConfig::from_json(c).layers_per_block, 2);
}

TEST(SdTinyModelErrors, BadShapesAndConfigs) {
  Device& cpu = rbee::test::cpu_device();
  Weights w = Weights::open(tiny_sd("sd15/unet"), cpu);
  UNetConfig cfg = UNetConfig::from_json(w.config());
  UNet unet = UNet::load(w, cfg);
  Tensor ctx = ops::zeros({1, 77, 32}, DType::F32, cpu);
  EXPECT_THROW(unet.forward(ops::zeros({1, 3, 8, 8}, DType::F32, cpu), 10, ctx), Error);   // channels
  EXPECT_THROW(unet.forward(ops::zeros({1, 4, 0, 8}, DType::F32, cpu), 10, ctx), Error);   // empty
  // Sides that are not multiples of 4 run (issue 16: as diffusers, the up blocks upsample to each skip's size).
  EXPECT_EQ(unet.forward(ops::zeros({1, 4, 6, 9}, DType::F32, cpu), 10, ctx).shape(), Shape({1, 4, 6, 9}));
  EXPECT_THROW(unet.forward(ops::zeros({2, 4, 8, 8}, DType::F32, cpu), 10, ctx), Error);   // batch mismatch
  EXPECT_THROW(unet.forward(ops::zeros({1, 4, 8, 8}, DType::F32, cpu), 10, ops::zeros({1, 77, 16}, DType::F32, cpu)),
               Error);
  UNetConfig wide = cfg;
  wide.cross_attention_dim = 64;  // attn2.to_k has the wrong shape in the file
  EXPECT_THROW(UNet::load(w, wide), Error);
  nlohmann::json bad = w.config();
  bad["addition_embed_type"] = "text_time";
  EXPECT_THROW(UNetConfig::from_json(bad), Error);
  bad = w.config();
  bad["down_block_types"][0] = "SimpleCrossAttnDownBlock2D";
  EXPECT_THROW(UNetConfig::from_json(bad), Error);
  bad = w.config();
  bad["block_out_channels"] = nlohmann::json::array({16, 32});
  EXPECT_THROW(UNetConfig::from_json(bad), Error);

  Weights vw = Weights::open(tiny_sd("sd15/vae"), cpu);
  Vae vae = Vae::load(vw, VaeConfig::from_json(vw.config()));
  EXPECT_THROW(vae.decode(ops::zeros({1, 3, 8, 8}, DType::F32, cpu)), Error);
  EXPECT_THROW(vae.encode(ops::zeros({1, 3, 30, 32}, DType::F32, cpu)), Error);
  Vae dec_only = Vae::load(vw, VaeConfig::from_json(vw.config()), /*with_encoder=*/false);
  EXPECT_THROW(dec_only.encode(ops::zeros({1, 3, 32, 32}, DType::F32, cpu)), Error);
  EXPECT_THROW(Weights::open(tiny_sd("sd15/no_such"), cpu), Error);
  // vae/config.json fields the SD pipelines read that are not implemented: refused, named.
  for (const auto& [key, value] : std::vector<std::pair<const char*, nlohmann::json>>{
           {"latents_mean", nlohmann::json::array({0.1, 0.2, 0.3, 0.4})},
           {"latents_std", nlohmann::json::array({1.0, 1.0, 1.0, 1.0})},
           {"down_block_types", nlohmann::json::array({"AttnDownEncoderBlock2D", "DownEncoderBlock2D",
                                                       "DownEncoderBlock2D"})}}) {
    nlohmann::json c = vw.config();
    c[key] = value;
    try {
      (void)VaeConfig::from_json(c);
      ADD_FAILURE() << key << " was not refused";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Unsupported) << key;
      EXPECT_NE(e.message().find(key), std::string::npos) << e.message();
    }
  }
}

}  // namespace
}  // namespace rbee::sd
