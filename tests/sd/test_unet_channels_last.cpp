// The UNet with channels-last activations (RBEE_SD_CHANNELS_LAST=1, the GPU default) on the CPU against the same
// diffusers goldens as the channels-first runs of test_unet_vae.cpp: the tiny SD 1.5 / 2.1 UNets and every
// one-field UNet of tests/data/tiny_sd/unet_fields (scale-shift resnets, asymmetric downsample padding, other
// conv_in / conv_out kernels, mid blocks, ...), so CI covers the NHWC wiring (weights permuted at load, NHWC ops,
// transformer views, concat on the last axis, upsampling, the time embedding inside norm2) without a GPU.
#include <cstdlib>
#include <optional>
#include <string>

#include "rbee/sd/unet.h"
#include "sd_test_util.h"

namespace rbee::sd {
namespace {

using test::tiny_sd;

// Loads a UNet with RBEE_SD_CHANNELS_LAST=1 (read at load time), restoring the variable afterwards.
UNet load_channels_last(const Weights& w) {
  const char* old = std::getenv("RBEE_SD_CHANNELS_LAST");
  const std::optional<std::string> saved = old ? std::optional<std::string>(old) : std::nullopt;
  setenv("RBEE_SD_CHANNELS_LAST", "1", 1);
  UNet unet = UNet::load(w, UNetConfig::from_json(w.config()));
  if (saved) setenv("RBEE_SD_CHANNELS_LAST", saved->c_str(), 1);
  else unsetenv("RBEE_SD_CHANNELS_LAST");
  return unet;
}

class SdUNetChannelsLast : public ::testing::TestWithParam<const char*> {};

// Same tolerance as the channels-first test: 1e-3 + 1e-4 * max|ref|.
TEST_P(SdUNetChannelsLast, TinyStepMatchesDiffusers) {
  const std::string name = GetParam();
  Device& cpu = rbee::test::cpu_device();
  Weights w = Weights::open(tiny_sd(name + "/unet"), cpu);
  UNet unet = load_channels_last(w);
  auto g = safetensors::File::open(tiny_sd(name + "/goldens.safetensors"));
  rbee::test::poison_allocations(cpu, 2 * 4 * 8 * 8 * 4, 8);
  Tensor out = unet.forward(g.tensor("unet_sample", cpu), 500.0, g.tensor("unet_context", cpu));
  ASSERT_EQ(out.shape(), g.tensor("unet_out", cpu).shape());  // the prediction comes back NCHW
  RBEE_EXPECT_TENSOR_NEAR(out, g.tensor("unet_out", cpu), 1e-3, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Tiny, SdUNetChannelsLast, ::testing::Values("sd15", "sd21"));

class SdUNetFieldsChannelsLast : public ::testing::TestWithParam<const char*> {};

TEST_P(SdUNetFieldsChannelsLast, ForwardMatchesDiffusers) {
  const std::string name = GetParam();
  Device& cpu = rbee::test::cpu_device();
  Weights w = Weights::open(tiny_sd("unet_fields/" + name), cpu);
  UNet unet = load_channels_last(w);
  auto g = safetensors::File::open(tiny_sd("unet_fields/goldens.safetensors"));
  rbee::test::poison_allocations(cpu, 2 * 4 * 5 * 6 * 4, 8);
  Tensor out = unet.forward(g.tensor("sample", cpu), 321.0, g.tensor("context", cpu));
  RBEE_EXPECT_TENSOR_NEAR(out, g.tensor(name + "/out", cpu), 1e-3, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Fields, SdUNetFieldsChannelsLast,
                         ::testing::Values("center_input_sample", "mid_block_scale_factor", "scale_shift",
                                           "time_embedding_dim", "conv_kernels", "mid_plain", "mid_none",
                                           "downsample_padding_0", "sinusoid", "no_effect"));

}  // namespace
}  // namespace rbee::sd
