// The VAE decoder with channels-last activations (RBEE_SD_VAE_CHANNELS_LAST=1; off by default until the NHWC group
// norm handles large maps) on the CPU against the same diffusers goldens as the channels-first decode
// (test_unet_vae.cpp, test_sdxl.cpp), so CI covers the NHWC wiring (weights permuted at load, NHWC resnets and
// upsampling, the mid block's attention on the [N, HW, C] view, the permutes at both ends) without a GPU; the
// encoder stays NCHW.
#include <string>

#include "common/scoped_env.h"
#include "rbee/ops.h"
#include "rbee/sd/vae.h"
#include "sd_test_util.h"

namespace rbee::sd {
namespace {

using test::tiny_sd;

Vae load_vae(const Weights& w, const char* channels_last) {
  rbee::test::ScopedEnv env("RBEE_SD_VAE_CHANNELS_LAST", channels_last);  // read at load
  return Vae::load(w, VaeConfig::from_json(w.config()));
}

class SdVaeChannelsLast : public ::testing::TestWithParam<const char*> {};

// Same tolerances as the channels-first tests: decode 5e-4 + 1e-4 * max|ref|; against the channels-first decode of
// the same weights 1e-5 (the same sums in another order).
TEST_P(SdVaeChannelsLast, DecodeMatchesDiffusersAndChannelsFirst) {
  const std::string name = GetParam();
  Device& cpu = rbee::test::cpu_device();
  Weights w = Weights::open(tiny_sd(name + "/vae"), cpu);
  const Vae nhwc = load_vae(w, "1"), nchw = load_vae(w, "0");
  auto g = safetensors::File::open(tiny_sd(name + "/goldens.safetensors"));
  const Tensor z = ops::affine(g.tensor("vae_latent", cpu), 1.0 / nhwc.config().scaling_factor, 0.0);
  rbee::test::poison_allocations(cpu, 2 * 3 * 32 * 32 * 4, 8);
  const Tensor image = nhwc.decode(z);
  ASSERT_EQ(image.shape(), g.tensor("vae_image", cpu).shape());  // the image comes back NCHW
  RBEE_EXPECT_TENSOR_NEAR(image, g.tensor("vae_image", cpu), 5e-4, 1e-4);
  RBEE_EXPECT_TENSOR_NEAR(image, nchw.decode(z), 1e-5, 1e-5);
  // The encoder is untouched by the switch.
  RBEE_EXPECT_TENSOR_NEAR(nhwc.encode(g.tensor("vae_enc_image", cpu)), g.tensor("vae_enc_mean", cpu), 5e-4, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Tiny, SdVaeChannelsLast, ::testing::Values("sd15", "sd21", "sdxl"));

}  // namespace
}  // namespace rbee::sd
