// The tiny 4-level pipeline of tests/data/tiny_sd/sd15_l4 (tools/goldens/make_tiny_sd_folders.py) against
// diffusers: a folder as real ones come (sharded UNet and text encoder with their own index files, an fp16 variant
// VAE beside a plain file of other weights, a tokenizer with tokenizer.json only), odd latent sides (the UNet
// upsamples to each skip's size), and request checks that name the field.
//
// Tolerances as for the other tiny pipelines: UNet output 1e-3 + 1e-4 * max |ref|, VAE 5e-4 + 1e-4 * max |ref|,
// pipeline latents 2e-3 + 1e-4 * max |ref|.
#include <algorithm>
#include <cmath>
#include <fstream>

#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "rbee/sd/pipeline.h"
#include "rbee/sd/unet.h"
#include "rbee/sd/vae.h"
#include "sd_test_util.h"
#include "tiny_l4_pipeline.h"

namespace rbee::sd {
namespace {

using test::tiny_sd;

constexpr const char* kPrompt = "a photograph of an astronaut riding a horse";

const Pipeline& l4() { return test::tiny_l4_pipeline(); }

safetensors::File goldens() { return safetensors::File::open(tiny_sd("sd15_l4/goldens.safetensors")); }

GenerateRequest request(int width, int height) {
  GenerateRequest r;
  r.prompt = kPrompt;
  r.steps = 4;
  r.guidance_scale = 7.5;
  r.width = width;
  r.height = height;
  return r;
}

// Latent 5x7 through 4 levels (5 -> 3 -> 2 -> 1, 7 -> 4 -> 2 -> 1): the up blocks meet skips of odd sides.
TEST(SdL4, UNetOnOddLatentMatchesDiffusers) {
  Device& cpu = rbee::test::cpu_device();
  Weights w = Weights::open(Weights::component_file(tiny_sd("sd15_l4/unet")), cpu);
  EXPECT_GT(w.config().size(), 5u);
  UNet unet = UNet::load(w, UNetConfig::from_json(w.config()));
  auto g = goldens();
  rbee::test::poison_allocations(cpu, 2 * 4 * 5 * 7 * 4, 8);
  Tensor out = unet.forward(g.tensor("unet_sample", cpu), 500.0, g.tensor("unet_context", cpu));
  RBEE_EXPECT_TENSOR_NEAR(out, g.tensor("unet_out", cpu), 1e-3, 1e-4);
}

// 40x56 and 104x24 images (latents 5x7 and 13x3), 4 Euler steps with guidance, as StableDiffusionPipeline.
TEST(SdL4, OddSizesTxt2ImgMatchDiffusers) {
  Device& cpu = rbee::test::cpu_device();
  auto g = goldens();
  GenerateRequest r = request(56, 40);
  r.initial_noise = g.tensor("t2i_noise", cpu).clone();
  RBEE_EXPECT_TENSOR_NEAR(l4().generate_latents(r), g.tensor("t2i_latent", cpu), 2e-3, 1e-4);
  r = request(24, 104);
  r.initial_noise = g.tensor("t2i_tall_noise", cpu).clone();
  RBEE_EXPECT_TENSOR_NEAR(l4().generate_latents(r), g.tensor("t2i_tall_latent", cpu), 2e-3, 1e-4);
  Image img = l4().generate(r);
  EXPECT_EQ(img.width, 24);
  EXPECT_EQ(img.height, 104);
}

// --variant fp16 reads diffusion_pytorch_model.fp16.safetensors; without it the plain file (other weights) is read.
TEST(SdL4, VariantPicksTheFile) {
  Device& cpu = rbee::test::cpu_device();
  auto g = goldens();
  const Tensor z = g.tensor("vae_latent", cpu);
  // The pipeline loaded with variant fp16 decodes as the fp16 file: Pipeline::decode's [0, 1] image is the VAE's
  // [-1, 1] output mapped and clamped.
  std::vector<float> want = g.tensor("vae_image", cpu).to_vector<float>();
  for (float& v : want) v = std::clamp(0.5f * v + 0.5f, 0.0f, 1.0f);
  RBEE_EXPECT_TENSOR_NEAR(l4().decode(z), Tensor::from_vector(want, {1, 3, 40, 56}, cpu), 5e-4, 1e-4);
  for (const char* variant : {"", "fp16"}) {
    Weights w = Weights::open(Weights::component_file(tiny_sd("sd15_l4/vae"), variant), cpu);
    VaeConfig cfg = VaeConfig::from_json(w.config());
    Vae vae = Vae::load(w, cfg, false);
    Tensor out = vae.decode(ops::affine(z, 1.0 / cfg.scaling_factor, 0.0));
    RBEE_EXPECT_TENSOR_NEAR(out, g.tensor(*variant ? "vae_image" : "plain_vae_image", cpu), 5e-4, 1e-4);
  }
  EXPECT_THROW(Weights::component_file(tiny_sd("sd15_l4/vae"), "bf16"), Error);
  EXPECT_THROW(Weights::component_file(tiny_sd("sd15_l4/vae"), "../x"), Error);
  try {
    LoadOptions o;
    o.variant = "fp16";
    (void)Pipeline::load(tiny_sd("sd15"), o);  // a folder without fp16 files
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotFound);
    EXPECT_NE(e.message().find("fp16"), std::string::npos) << e.message();
  }
}

// check_request: every field a model can refuse, named, before any work.
TEST(SdL4, CheckRequestNamesTheField) {
  const ModelLimits& l = l4().limits();
  EXPECT_EQ(l.latent_scale, 8);
  EXPECT_EQ(l.default_side, 64);  // sample_size 8 x 8
  auto field = [&](const GenerateRequest& r) {
    auto p = check_request(r, l);
    return p ? p->field : std::string();
  };
  GenerateRequest ok = request(56, 40);
  EXPECT_EQ(field(ok), "");
  GenerateRequest r = ok;
  r.width = 60;  // not a multiple of the latent scale
  EXPECT_EQ(field(r), "width");
  r = ok;
  r.height = 2056;
  EXPECT_EQ(field(r), "height");
  r = ok;
  r.sampler = DiffusionSchedulerKind::Lcm;
  r.steps = 60;  // LCM places at most original_inference_steps (50)
  EXPECT_EQ(field(r), "steps");
  r.steps = 50;
  EXPECT_EQ(field(r), "");
  r = ok;
  r.steps = 151;
  EXPECT_EQ(field(r), "steps");
  r = ok;
  r.guidance_scale = 25;
  EXPECT_EQ(field(r), "guidance_scale");
  r = ok;
  Device& cpu = rbee::test::cpu_device();
  r.init_image = ops::zeros({1, 3, 40, 56}, DType::F32, cpu);
  r.strength = 0.1;
  EXPECT_EQ(field(r), "strength");
  r.strength = 0.5;
  EXPECT_EQ(field(r), "");
  r.mask = ops::zeros({1, 1, 40, 48}, DType::F32, cpu);
  EXPECT_EQ(field(r), "mask");
  r = ok;
  r.initial_noise = ops::zeros({1, 4, 5, 6}, DType::F32, cpu);
  EXPECT_EQ(field(r), "initial_noise");
  // generate_latents throws with the field in the message.
  r = ok;
  r.sampler = DiffusionSchedulerKind::Lcm;
  r.steps = 60;
  try {
    (void)l4().generate_latents(r);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("steps"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace rbee::sd

namespace rbee::sd {
namespace {

// A safetensors file with one F16 tensor "w" [2, 3] of the given bit patterns.
std::string write_f16_file(const std::string& name, const std::vector<uint16_t>& bits) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::string header = R"({"w":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]}})";
  while (header.size() % 8) header.push_back(' ');
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(header.data(), (std::streamsize)header.size());
  f.write(reinterpret_cast<const char*>(bits.data()), (std::streamsize)(bits.size() * 2));
  return path;
}

// NaN weights: loading warns naming the tensor (diffusers warns about the black image), and a NaN image is written
// black rather than as whatever the cast makes of NaN.
TEST(SdNaN, WeightsWarnAndImagesAreBlack) {
  Device& cpu = rbee::test::cpu_device();
  const std::string good = write_f16_file("finite.safetensors", {0x3C00, 0x4000, 0x0000, 0xBC00, 0x3800, 0x3C00});
  const std::string bad = write_f16_file("nan.safetensors", {0x3C00, 0x7E00, 0x0000, 0x7C00, 0x3800, 0x3C00});
  // The log goes to stderr in the apps and to spdlog's default (stdout) logger here: both are captured.
  auto logged = [](auto load) {
    ::testing::internal::CaptureStdout();
    ::testing::internal::CaptureStderr();
    load();
    std::string out = ::testing::internal::GetCapturedStdout();
    return out + ::testing::internal::GetCapturedStderr();
  };
  EXPECT_EQ(logged([&] { (void)Weights::open(good, cpu).get("w", {2, 3}); }).find("NaN"), std::string::npos);
  Tensor w;
  const std::string log = logged([&] { w = Weights::open(bad, cpu).get("w", {2, 3}); });
  EXPECT_NE(log.find("tensor 'w'"), std::string::npos) << log;
  EXPECT_NE(log.find("2 NaN or infinite values of 6"), std::string::npos) << log;
  EXPECT_TRUE(std::isnan(w.to_vector<float>()[1]));
  std::vector<float> px(3 * 2 * 2, 0.5f);
  px[0] = NAN;
  Image img = Pipeline::to_image(Tensor::from_vector(px, {1, 3, 2, 2}, cpu));
  EXPECT_EQ(img.rgb[0], 0);
  EXPECT_EQ(img.rgb[3], 128);
}

}  // namespace
}  // namespace rbee::sd
