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

TEST(SdTinyModelErrors, BadShapesAndConfigs) {
  Device& cpu = rbee::test::cpu_device();
  Weights w = Weights::open(tiny_sd("sd15/unet"), cpu);
  UNetConfig cfg = UNetConfig::from_json(w.config());
  UNet unet = UNet::load(w, cfg);
  Tensor ctx = ops::zeros({1, 77, 32}, DType::F32, cpu);
  EXPECT_THROW(unet.forward(ops::zeros({1, 3, 8, 8}, DType::F32, cpu), 10, ctx), Error);   // channels
  EXPECT_THROW(unet.forward(ops::zeros({1, 4, 6, 8}, DType::F32, cpu), 10, ctx), Error);   // not a multiple of 4
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
}

}  // namespace
}  // namespace rbee::sd
