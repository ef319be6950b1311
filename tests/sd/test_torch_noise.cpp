// NoiseKind::Torch: PyTorch's CPU generator and torch.randn (tests/data/sd/torch_randn.json,
// tools/goldens/make_torch_randn_goldens.py), and whole images that equal diffusers' default-generator images for the
// same seed on the tiny 4-level pipeline (tools/goldens/make_tiny_sd_folders.py): Euler ancestral (noise at every
// step), DDIM, img2img (the posterior sampled with the generator before the noise) and inpaint (image posterior,
// noise, the masked image's posterior draw, then the step noises).
#include <fstream>

#include "rbee/sd/pipeline.h"
#include "sd/torch_generator.h"
#include "sd_test_util.h"
#include "tiny_l4_pipeline.h"

namespace rbee::sd {
namespace {

using test::sd_data;
using test::tiny_sd;

// Values within 2e-6 absolute (float Box-Muller; torch's AVX2 path rounds sin/cos/log differently by an ulp or so).
TEST(SdTorchNoise, RandnMatchesTorch) {
  std::ifstream in(sd_data("torch_randn.json"));
  ASSERT_TRUE(in.good());
  nlohmann::json g = nlohmann::json::parse(in);
  ASSERT_GE(g["cases"].size(), 5u);
  for (const auto& c : g["cases"]) {
    TorchGenerator gen(c["seed"].get<uint64_t>());
    for (size_t k = 0; k < c["sizes"].size(); ++k) {
      const int64_t n = c["sizes"][k].get<int64_t>();
      std::vector<float> got = gen.randn(n);
      const auto& want = c["values"][k];
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], want[i].get<double>(), 2e-6) << "seed " << c["seed"] << " tensor " << k << " [" << i << "]";
    }
  }
}

const Pipeline& l4() { return test::tiny_l4_pipeline(); }

GenerateRequest torch_request(DiffusionSchedulerKind sampler, uint64_t seed, int width, int height, int steps) {
  GenerateRequest r;
  r.prompt = "a photograph of an astronaut riding a horse";
  r.steps = steps;
  r.guidance_scale = 7.5;
  r.sampler = sampler;
  r.seed = seed;
  r.noise = NoiseKind::Torch;
  r.width = width;
  r.height = height;
  return r;
}

// Final latents within 2e-3 + 1e-4 * max |ref|, the tolerance of the explicit-noise goldens.
TEST(SdTorchNoise, ImagesEqualDiffusersForTheSeed) {
  Device& cpu = rbee::test::cpu_device();
  auto g = safetensors::File::open(tiny_sd("sd15_l4/goldens.safetensors"));
  Tensor anc = l4().generate_latents(torch_request(DiffusionSchedulerKind::EulerAncestral, 1234, 56, 40, 3));
  RBEE_EXPECT_TENSOR_NEAR(anc, g.tensor("torch_euler_a_latent", cpu), 2e-3, 1e-4);
  Tensor ddim = l4().generate_latents(torch_request(DiffusionSchedulerKind::Ddim, 77, 40, 48, 3));
  RBEE_EXPECT_TENSOR_NEAR(ddim, g.tensor("torch_ddim_latent", cpu), 2e-3, 1e-4);
  GenerateRequest i2i = torch_request(DiffusionSchedulerKind::Euler, 9, 56, 40, 4);
  i2i.init_image = g.tensor("torch_i2i_image", cpu).clone();
  i2i.strength = 0.75;
  RBEE_EXPECT_TENSOR_NEAR(l4().generate_latents(i2i), g.tensor("torch_i2i_latent", cpu), 2e-3, 1e-4);
  GenerateRequest inpaint = torch_request(DiffusionSchedulerKind::EulerAncestral, 21, 56, 40, 3);
  inpaint.init_image = g.tensor("torch_i2i_image", cpu).clone();
  inpaint.mask = g.tensor("torch_inpaint_mask", cpu).clone();
  inpaint.strength = 1.0;
  RBEE_EXPECT_TENSOR_NEAR(l4().generate_latents(inpaint), g.tensor("torch_inpaint_latent", cpu), 2e-3, 1e-4);
  // Another seed, or rbee's own generator, gives another image.
  GenerateRequest other = torch_request(DiffusionSchedulerKind::EulerAncestral, 1235, 56, 40, 3);
  EXPECT_GT(test::max_diff(l4().generate_latents(other), anc).max_abs, 0.1);
  other.seed = 1234;
  other.noise = NoiseKind::Rbee;
  EXPECT_GT(test::max_diff(l4().generate_latents(other), anc).max_abs, 0.1);
  EXPECT_EQ(noise_kind_from_name("torch"), NoiseKind::Torch);
  EXPECT_THROW(noise_kind_from_name("philox"), Error);
}

}  // namespace
}  // namespace rbee::sd
