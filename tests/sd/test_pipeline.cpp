// Pipelines of the tiny SD 1.5 / 2.1 models: the 4-step txt2img latent (Euler, guidance 7.5, explicit initial
// noise) against diffusers' StableDiffusionPipeline (tools/goldens/make_tiny_sd.py); determinism of seeds; batches
// equal to their single-seed images; img2img / inpaint invariants; request errors.
#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "rbee/sd/pipeline.h"
#include "sd_test_util.h"

namespace rbee::sd {
namespace {

using test::tiny_sd;

const Pipeline& tiny(const std::string& name) {
  static Pipeline sd15 = Pipeline::load(tiny_sd("sd15"));
  static Pipeline sd21 = Pipeline::load(tiny_sd("sd21"));
  return name == "sd15" ? sd15 : sd21;
}

GenerateRequest base_request() {
  GenerateRequest r;
  r.prompt = "a photograph of an astronaut riding a horse";
  r.steps = 4;
  r.guidance_scale = 7.5;
  r.width = r.height = 32;
  r.sampler = DiffusionSchedulerKind::Euler;
  return r;
}

class SdTinyPipeline : public ::testing::TestWithParam<const char*> {};

// Final latent (values ~1-10 after 4 guided steps) within 2e-3 + 1e-4 * max|ref|.
TEST_P(SdTinyPipeline, Txt2ImgLatentMatchesDiffusers) {
  const std::string name = GetParam();
  Device& cpu = rbee::test::cpu_device();
  auto g = safetensors::File::open(tiny_sd(name + "/goldens.safetensors"));
  GenerateRequest r = base_request();
  r.initial_noise = g.tensor("t2i_noise", cpu).clone();
  Tensor latent = tiny(name).generate_latents(r);
  RBEE_EXPECT_TENSOR_NEAR(latent, g.tensor("t2i_latent", cpu), 2e-3, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Tiny, SdTinyPipeline, ::testing::Values("sd15", "sd21"));

// The same tiny SD 1.5 stored as one original-layout checkpoint (tools/goldens/make_tiny_sd_single_file.py) gives
// the same txt2img latent as diffusers.
TEST(SdPipeline, SingleFileCheckpointMatchesDiffusers) {
  Device& cpu = rbee::test::cpu_device();
  Pipeline p = Pipeline::load_single_file(tiny_sd("sd15_single_file.safetensors"),
                                          PipelineSpec::from_diffusers_folder(tiny_sd("sd15")));
  auto g = safetensors::File::open(tiny_sd("sd15/goldens.safetensors"));
  GenerateRequest r = base_request();
  r.initial_noise = g.tensor("t2i_noise", cpu).clone();
  RBEE_EXPECT_TENSOR_NEAR(p.generate_latents(r), g.tensor("t2i_latent", cpu), 2e-3, 1e-4);
  // A diffusers component file has none of the original names.
  EXPECT_THROW(Pipeline::load_single_file(tiny_sd("sd15/unet/diffusion_pytorch_model.safetensors"),
                                          PipelineSpec::from_diffusers_folder(tiny_sd("sd15"))),
               Error);
  // The wrong architecture for the file: shapes differ.
  PipelineSpec wrong = PipelineSpec::from_diffusers_folder(tiny_sd("sd15"));
  wrong.unet["block_out_channels"] = nlohmann::json::array({16, 32, 64});
  EXPECT_THROW(Pipeline::load_single_file(tiny_sd("sd15_single_file.safetensors"), wrong), Error);
}

TEST(SdPipeline, SeedIsDeterministic) {
  const Pipeline& p = tiny("sd15");
  GenerateRequest r = base_request();
  r.steps = 2;
  r.sampler = DiffusionSchedulerKind::EulerAncestral;  // also draws noise at every step
  r.seed = 7;
  std::vector<float> a = p.generate_latents(r).to_vector<float>();
  std::vector<float> b = p.generate_latents(r).to_vector<float>();
  EXPECT_EQ(a, b);
  r.seed = 8;
  EXPECT_NE(a, p.generate_latents(r).to_vector<float>());
  Image img = p.generate(r);
  EXPECT_EQ(img.width, 32);
  EXPECT_EQ(img.height, 32);
  EXPECT_EQ(img.rgb.size(), 32u * 32u * 3u);
}

// A batch of 3 (seeds 11, 12, 13) gives each image the latent of a single request with its seed: per-image noise
// streams (initial and ancestral step noise, both generators), guidance over the 6-row UNet batch, images apart.
TEST(SdPipeline, BatchImagesEqualTheirSingleSeedImages) {
  const Pipeline& p = tiny("sd15");
  for (NoiseKind noise : {NoiseKind::Rbee, NoiseKind::Torch}) {
    GenerateRequest r = base_request();
    r.steps = 2;
    r.sampler = DiffusionSchedulerKind::EulerAncestral;
    r.noise = noise;
    r.seed = 11;
    r.batch = 3;
    const Tensor batch = p.generate_latents(r);
    ASSERT_EQ(batch.dim(0), 3);
    r.batch = 1;
    for (int64_t i = 0; i < 3; ++i) {
      r.seed = 11 + (uint64_t)i;
      const Tensor one = p.generate_latents(r);
      RBEE_EXPECT_TENSOR_NEAR(batch.narrow(0, i, 1).contiguous(), one, 1e-5, 1e-6);
    }
    // Distinct images: seed 11's latent is not seed 12's.
    EXPECT_NE(batch.narrow(0, 0, 1).contiguous().to_vector<float>(), batch.narrow(0, 1, 1).contiguous().to_vector<float>());
  }
  GenerateRequest r = base_request();
  r.steps = 1;
  r.batch = 2;
  const std::vector<Image> images = p.generate_batch(r);
  ASSERT_EQ(images.size(), 2u);
  EXPECT_EQ(images[0].rgb.size(), 32u * 32u * 3u);
  EXPECT_THROW(p.generate(r), Error);  // one image only
  r.batch = kMaxBatch + 1;
  EXPECT_THROW(p.generate_latents(r), Error);
  r.batch = 2;
  r.initial_noise = Tensor::from_vector(std::vector<float>(4 * 4 * 4, 0.5f), {1, 4, 4, 4}, Registry::global().cpu());
  EXPECT_THROW(p.generate_latents(r), Error);  // batches are text-to-image only
}

// Requests of different prompts, negative prompts, seeds and batch sizes run as one UNet batch (the worker's
// batching of queued jobs): each request's final latents (caught by on_latents at the last step) and images are
// bit for bit those of the request run alone, on the CPU. A request whose on_step says stop is dropped while the
// others go on; incompatible requests are refused.
TEST(SdPipeline, GroupImagesEqualTheirSoloImages) {
  const Pipeline& p = tiny("sd15");
  std::vector<GenerateRequest> rs(3, base_request());
  for (GenerateRequest& r : rs) {
    r.steps = 2;
    r.sampler = DiffusionSchedulerKind::EulerAncestral;  // per-image step noise too
  }
  rs[0].seed = 5;
  rs[1].prompt = "a red cube";
  rs[1].negative_prompt = "blurry";
  rs[1].seed = 21;
  rs[1].batch = 2;
  rs[2].prompt = "a blue sphere";
  rs[2].seed = 5;  // the same seed as request 0, another prompt: another image
  std::vector<std::vector<float>> final_latents(rs.size());
  for (size_t j = 0; j < rs.size(); ++j) {
    rs[j].on_latents = [&, j](int step, int total, const Tensor& lat) {
      if (step == total) final_latents[j] = lat.contiguous().to_vector<float>();
    };
  }
  const std::vector<std::vector<Image>> group = p.generate_group(rs);
  ASSERT_EQ(group.size(), 3u);
  for (size_t j = 0; j < rs.size(); ++j) {
    GenerateRequest alone = rs[j];
    alone.on_latents = nullptr;
    EXPECT_EQ(final_latents[j], p.generate_latents(alone).to_vector<float>()) << "request " << j;
    const std::vector<Image> solo = alone.batch == 1 ? std::vector<Image>{p.generate(alone)} : p.generate_batch(alone);
    ASSERT_EQ(group[j].size(), solo.size());
    for (size_t i = 0; i < solo.size(); ++i) EXPECT_EQ(group[j][i].rgb, solo[i].rgb) << "request " << j << " image " << i;
  }
  EXPECT_NE(group[0][0].rgb, group[2][0].rgb);
  EXPECT_NE(group[1][0].rgb, group[1][1].rgb);

  // Request 1 stops after its first step: dropped (no images), the others unchanged.
  int calls = 0;
  rs[1].on_step = [&](int, int) { return ++calls < 1; };
  std::vector<std::vector<Image>> dropped = p.generate_group(rs);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(dropped[1].empty());
  EXPECT_EQ(dropped[0][0].rgb, group[0][0].rgb);
  EXPECT_EQ(dropped[2][0].rgb, group[2][0].rgb);
  // Every request stops: Cancelled.
  for (GenerateRequest& r : rs) r.on_step = [](int, int) { return false; };
  try {
    (void)p.generate_group(rs);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Cancelled);
  }
  for (GenerateRequest& r : rs) r.on_step = nullptr;
  // What cannot share a batch: another size, steps, sampler, guidance, noise; img2img; more than kMaxBatch images.
  EXPECT_TRUE(Pipeline::can_share_batch(rs[0], rs[1]));
  auto refused = [&](auto&& change) {
    std::vector<GenerateRequest> bad = rs;
    change(bad[2]);
    EXPECT_FALSE(Pipeline::can_share_batch(bad[0], bad[2]));
    EXPECT_THROW((void)p.generate_group(bad), Error);
  };
  refused([](GenerateRequest& r) { r.width = 40; });
  refused([](GenerateRequest& r) { r.steps = 3; });
  refused([](GenerateRequest& r) { r.sampler = DiffusionSchedulerKind::Euler; });
  refused([](GenerateRequest& r) { r.guidance_scale = 5.0; });
  refused([](GenerateRequest& r) { r.noise = NoiseKind::Torch; });
  refused([](GenerateRequest& r) {
    r.initial_noise = Tensor::from_vector(std::vector<float>(4 * 4 * 4, 0.5f), {1, 4, 4, 4}, Registry::global().cpu());
  });
  std::vector<GenerateRequest> big = rs;
  big[2].batch = kMaxBatch - 2;  // 1 + 2 + 14 > 16
  EXPECT_THROW((void)p.generate_group(big), Error);
}

TEST(SdPipeline, RandnIsStandardNormal) {
  Device& cpu = rbee::test::cpu_device();
  std::vector<float> v = randn({1 << 16}, 123, 0, cpu).to_vector<float>();
  double mean = 0, var = 0;
  for (float x : v) mean += x;
  mean /= (double)v.size();
  for (float x : v) var += (x - mean) * (x - mean);
  var /= (double)v.size();
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(var, 1.0, 0.02);
  EXPECT_NE(v, randn({1 << 16}, 123, 1, cpu).to_vector<float>());
}

// img2img (strength 0.5: the last 2 of 4 steps) and inpaint (strength 1, 4-channel UNet latent blending) against
// diffusers' pipelines run with the posterior mean and explicit noise (tools/goldens/make_tiny_sd_img2img.py);
// same tolerance as txt2img.
TEST(SdPipeline, Img2ImgAndInpaintMatchDiffusers) {
  Device& cpu = rbee::test::cpu_device();
  auto g = safetensors::File::open(tiny_sd("sd15/goldens_img2img.safetensors"));
  GenerateRequest r = base_request();
  r.initial_noise = g.tensor("noise", cpu).clone();
  r.init_image = g.tensor("image", cpu).clone();
  r.strength = 0.5;
  RBEE_EXPECT_TENSOR_NEAR(tiny("sd15").generate_latents(r), g.tensor("img2img_latent", cpu), 2e-3, 1e-4);
  r.strength = 1.0;
  r.mask = g.tensor("mask", cpu).clone();
  RBEE_EXPECT_TENSOR_NEAR(tiny("sd15").generate_latents(r), g.tensor("inpaint_latent", cpu), 2e-3, 1e-4);
}

// Inpaint: the kept (unmasked) half of the final latent is the encoded source exactly (the last blend uses the
// clean source latent), the repainted half is not.
TEST(SdPipeline, InpaintKeepsTheUnmaskedRegion) {
  const Pipeline& p = tiny("sd15");
  Device& cpu = rbee::test::cpu_device();
  GenerateRequest r = base_request();
  r.seed = 3;
  r.init_image = ops::affine(randn({1, 3, 32, 32}, 99, 0, cpu), 0.3, 0.0);
  r.strength = 1.0;
  std::vector<float> mask((size_t)32 * 32, 0.0f);
  for (int y = 0; y < 32; ++y)
    for (int x = 16; x < 32; ++x) mask[(size_t)(y * 32 + x)] = 1.0f;  // repaint the right half
  r.mask = Tensor::from_vector(mask, {1, 1, 32, 32}, cpu);
  Tensor out = p.generate_latents(r);
  Tensor src = p.encode_image(r.init_image);
  RBEE_EXPECT_TENSOR_NEAR(out.narrow(3, 0, 4), src.narrow(3, 0, 4), 1e-6, 0);
  EXPECT_GT(test::max_diff(out.narrow(3, 4, 4), src.narrow(3, 4, 4)).max_abs, 0.1);
}

TEST(SdPipeline, RequestErrors) {
  const Pipeline& p = tiny("sd15");
  Device& cpu = rbee::test::cpu_device();
  auto bad = [&](auto edit) {
    GenerateRequest r = base_request();
    r.steps = 1;
    edit(r);
    EXPECT_THROW(p.generate_latents(r), Error);
  };
  bad([](GenerateRequest& r) { r.steps = 0; });
  bad([](GenerateRequest& r) { r.steps = 151; });
  bad([](GenerateRequest& r) { r.guidance_scale = -1; });
  bad([](GenerateRequest& r) { r.guidance_scale = 21; });
  bad([](GenerateRequest& r) { r.width = 30; });
  bad([](GenerateRequest& r) { r.height = 4096; });
  bad([&](GenerateRequest& r) { r.initial_noise = ops::zeros({1, 4, 4, 4}, DType::F32, cpu); });
  bad([&](GenerateRequest& r) { r.init_image = ops::zeros({1, 3, 16, 16}, DType::F32, cpu); });
  bad([&](GenerateRequest& r) {
    r.init_image = ops::zeros({1, 3, 32, 32}, DType::F32, cpu);
    r.strength = 0;
  });
  bad([&](GenerateRequest& r) { r.mask = ops::zeros({1, 1, 32, 32}, DType::F32, cpu); });  // mask without image
  bad([](GenerateRequest& r) { r.on_step = [](int, int) { return false; }; });               // cancelled
  EXPECT_THROW(Pipeline::load(tiny_sd("no_such_pipeline")), Error);
}

// The prompt cache: a repeated prompt gets the very tensors encoded before (no text-encoder run), equal to an
// uncached encoding; the least recently used prompt leaves a full cache; prompt_cache 0 caches nothing.
TEST(SdPipeline, PromptCacheReusesAndEvicts) {
  LoadOptions opt;
  opt.prompt_cache = 2;
  const Pipeline p = Pipeline::load(tiny_sd("sd15"), opt);
  const Tensor a1 = p.embed_prompt("a red cube").context;
  const Tensor a2 = p.embed_prompt("a red cube").context;
  EXPECT_EQ(a1.data(), a2.data());
  const std::vector<float> fresh = p.encode_prompt_uncached("a red cube").context.to_vector<float>();
  EXPECT_EQ(a1.to_vector<float>(), fresh);
  (void)p.embed_prompt("a blue sphere");
  EXPECT_EQ(p.embed_prompt("a red cube").context.data(), a1.data());  // refreshed: now most recent
  (void)p.embed_prompt("a green cone");                                // evicts "a blue sphere"
  (void)p.embed_prompt("a yellow torus");                              // evicts "a red cube"
  EXPECT_NE(p.embed_prompt("a red cube").context.data(), a1.data());
  LoadOptions off;
  off.prompt_cache = 0;
  const Pipeline q = Pipeline::load(tiny_sd("sd15"), off);
  const Tensor b1 = q.embed_prompt("a red cube").context;
  EXPECT_NE(q.embed_prompt("a red cube").context.data(), b1.data());
  EXPECT_EQ(b1.to_vector<float>(), fresh);
}

}  // namespace
}  // namespace rbee::sd
