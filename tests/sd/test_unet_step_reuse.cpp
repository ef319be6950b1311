// Work taken out of the UNet step, against the per-step paths it replaces (their switches off), on the CPU:
// - the context's cross-attention keys and values projected once (UNet::project_context; sd::UNetStepGraph once per
//   context, RBEE_SD_CONTEXT_KV_ONCE): a step with the projections equals a step with the context bit for bit, and
//   a pipeline that serves a second prompt projects it anew (not the first prompt's keys);
// - the resnets' time projections as one product (sd/unet_time_projections.h, RBEE_SD_TIME_PROJ_FUSED): the UNet's
//   output equals the one with a product per resnet, on the tiny SD 1.5 / SDXL UNets and the scale-shift and
//   time_embedding_dim variants of unet_fields (other projection widths).
// Each comparison also checks that the compared outputs move when their inputs do (so a test can fail), and the
// outputs stay within the diffusers goldens' tolerance.
#include <string>

#include "common/scoped_env.h"
#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "rbee/sd/pipeline.h"
#include "rbee/sd/unet.h"
#include "sd_test_util.h"

namespace rbee::sd {
namespace {

using rbee::test::ScopedEnv;
using test::max_diff;
using test::tiny_sd;

UNet load_unet(const std::string& folder, const char* fused_time = "1") {
  ScopedEnv env("RBEE_SD_TIME_PROJ_FUSED", fused_time);  // read at load
  Weights w = Weights::open(tiny_sd(folder), rbee::test::cpu_device());
  return UNet::load(w, UNetConfig::from_json(w.config()));
}

UNet::AddedConditions sdxl_added(const safetensors::File& g) {
  Device& cpu = rbee::test::cpu_device();
  return {g.tensor("unet_text_embeds", cpu), g.tensor("unet_time_ids", cpu)};
}

class SdUNetContextProjections : public ::testing::TestWithParam<const char*> {};

TEST_P(SdUNetContextProjections, StepWithProjectionsEqualsStepWithContext) {
  const std::string name = GetParam();
  Device& cpu = rbee::test::cpu_device();
  const UNet unet = load_unet(name + "/unet");
  auto g = safetensors::File::open(tiny_sd(name + "/goldens.safetensors"));
  const Tensor sample = g.tensor("unet_sample", cpu), context = g.tensor("unet_context", cpu);
  const UNet::AddedConditions added = name == "sdxl" ? sdxl_added(g) : UNet::AddedConditions{};
  const UNet::Conditioning cond = unet.condition(sample.dim(0), 500.0, added, cpu);

  const UNet::ContextProjections kv = unet.project_context(context);
  ASSERT_FALSE(kv.keys.empty());
  ASSERT_EQ(kv.keys.size(), kv.values.size());
  EXPECT_EQ(kv.keys[0].dim(0), context.dim(0));
  EXPECT_EQ(kv.keys[0].dim(1), context.dim(1));
  const Tensor per_step = unet.denoise(sample, cond, context);
  const Tensor once = unet.denoise(sample, cond, kv);
  EXPECT_EQ(max_diff(once, per_step).max_abs, 0.0);  // the same products of the same inputs
  RBEE_EXPECT_TENSOR_NEAR(once, g.tensor("unet_out", cpu), 1e-3, 1e-4);

  // The projections are what the step reads: those of another context give another prediction.
  const Tensor other = unet.denoise(sample, cond, unet.project_context(ops::affine(context, 0.5, 0.25)));
  EXPECT_GT(max_diff(other, per_step).max_abs, 1e-3);

  // Projections that do not fit the UNet or the batch are refused.
  UNet::ContextProjections short_kv = kv;
  short_kv.keys.pop_back();
  short_kv.values.pop_back();
  EXPECT_THROW(unet.denoise(sample, cond, short_kv), Error);
  EXPECT_THROW(unet.denoise(sample.narrow(0, 0, 1), unet.condition(1, 500.0, {}, cpu), kv), Error);
  EXPECT_THROW(unet.project_context(ops::zeros({2, 7, 3}, DType::F32, cpu)), Error);
}

INSTANTIATE_TEST_SUITE_P(Tiny, SdUNetContextProjections, ::testing::Values("sd15", "sd21", "sdxl"));

// Fused against one product per resnet: the CPU sums each output alone, so the two agree to rounding (1e-6 of the
// values allowed); goldens at the diffusers tolerance of test_unet_vae.cpp.
TEST(SdUNetTimeProjections, FusedEqualsOneProductPerResnet) {
  Device& cpu = rbee::test::cpu_device();
  for (const std::string name : {"sd15", "sdxl"}) {
    SCOPED_TRACE(name);
    auto g = safetensors::File::open(tiny_sd(name + "/goldens.safetensors"));
    const Tensor sample = g.tensor("unet_sample", cpu), context = g.tensor("unet_context", cpu);
    const UNet::AddedConditions added = name == "sdxl" ? sdxl_added(g) : UNet::AddedConditions{};
    const Tensor fused = load_unet(name + "/unet").forward(sample, 500.0, context, added);
    const UNet separate = load_unet(name + "/unet", "0");
    const Tensor want = separate.forward(sample, 500.0, context, added);
    RBEE_EXPECT_TENSOR_NEAR(fused, want, 1e-6, 1e-6);
    RBEE_EXPECT_TENSOR_NEAR(fused, g.tensor("unet_out", cpu), 1e-3, 1e-4);
    // The time projections matter: another timestep moves the prediction well beyond that tolerance.
    EXPECT_GT(max_diff(separate.forward(sample, 100.0, context, added), want).max_abs, 1e-3);
  }
}

class SdUNetFieldsTimeProjections : public ::testing::TestWithParam<const char*> {};

TEST_P(SdUNetFieldsTimeProjections, FusedEqualsOneProductPerResnet) {
  const std::string name = GetParam();
  Device& cpu = rbee::test::cpu_device();
  auto g = safetensors::File::open(tiny_sd("unet_fields/goldens.safetensors"));
  const Tensor sample = g.tensor("sample", cpu), context = g.tensor("context", cpu);
  const Tensor fused = load_unet("unet_fields/" + name).forward(sample, 321.0, context);
  const Tensor want = load_unet("unet_fields/" + name, "0").forward(sample, 321.0, context);
  RBEE_EXPECT_TENSOR_NEAR(fused, want, 1e-6, 1e-6);
  RBEE_EXPECT_TENSOR_NEAR(fused, g.tensor(name + "/out", cpu), 1e-3, 1e-4);
}

// scale_shift: projections twice as wide (scale | shift); time_embedding_dim: another embedding width.
INSTANTIATE_TEST_SUITE_P(Fields, SdUNetFieldsTimeProjections, ::testing::Values("scale_shift", "time_embedding_dim"));

GenerateRequest request(const std::string& prompt, double guidance) {
  GenerateRequest r;
  r.prompt = prompt;
  r.steps = 3;
  r.guidance_scale = guidance;
  r.width = r.height = 32;
  r.seed = 7;
  r.sampler = DiffusionSchedulerKind::Euler;
  return r;
}

// A pipeline that projects each context once serves a second prompt with that prompt's keys and values: its latent
// equals the per-step pipeline's for the same request (the CPU runs the same products: equal to rounding), and
// differs from the first prompt's.
void expect_second_prompt_projected_anew(const std::string& folder, double guidance) {
  Pipeline once = Pipeline::load(tiny_sd(folder)), per_step = Pipeline::load(tiny_sd(folder));
  const GenerateRequest first = request("a photograph of an astronaut riding a horse", guidance);
  const GenerateRequest second = request("a red cube on a wooden table", guidance);
  Tensor first_latent, second_latent, want;
  {
    ScopedEnv env("RBEE_SD_CONTEXT_KV_ONCE", "1");  // read when the pipeline makes its step runner (first request)
    first_latent = once.generate_latents(first);
  }
  second_latent = once.generate_latents(second);
  {
    ScopedEnv env("RBEE_SD_CONTEXT_KV_ONCE", "0");
    want = per_step.generate_latents(second);
  }
  RBEE_EXPECT_TENSOR_NEAR(second_latent, want, 1e-6, 1e-6);
  EXPECT_GT(max_diff(first_latent, second_latent).max_abs, 1e-2);
  // The first prompt again (a third context) after the second.
  RBEE_EXPECT_TENSOR_NEAR(once.generate_latents(first), first_latent, 1e-6, 1e-6);
}

TEST(SdPipelineContextOnce, SecondPromptIsProjectedAnew) {
  expect_second_prompt_projected_anew("sd15", 7.5);
  expect_second_prompt_projected_anew("sd15", 1.0);  // no guidance: one context row, maybe the prompt cache's tensor
  expect_second_prompt_projected_anew("sdxl", 5.0);
}

}  // namespace
}  // namespace rbee::sd
