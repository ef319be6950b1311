// The tiny SDXL pipeline (tests/data/tiny_sd/sdxl, tools/goldens/make_tiny_sdxl.py) against diffusers'
// StableDiffusionXLPipeline: both tokenizers and text encoders (penultimate states, projected pooled output), the
// concatenated prompt embeddings, one UNet step with text_time added conditioning, the SDXL VAE, and full 4-step
// txt2img / img2img / inpaint latents (Euler, guidance 5, explicit noise), a Turbo-style 1-step Euler ancestral run
// with "trailing" spacing and guidance 0; then config, request and assembly errors.
//
// Tolerances (max |got - ref| <= atol + rtol * max |ref|): text states 1e-4 + 1e-5 rel (values ~1-5, f32 with other
// summation orders); UNet output 2e-5 + 1e-5 rel (values ~0.4); VAE 5e-4 as for SD 1.5; pipeline latents 2e-3 +
// 1e-4 rel as for SD 1.5 (4 guided steps amplify rounding; the Turbo step scales by sigma_max ~ 14.6). Measured
// differences are 1e-7..3e-5 (about 1e-6 of the values).
#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "rbee/sd/clip_text_model.h"
#include "rbee/sd/clip_tokenizer.h"
#include "rbee/sd/pipeline.h"
#include "rbee/sd/unet.h"
#include "rbee/sd/vae.h"
#include "sd_test_util.h"

namespace rbee::sd {
namespace {

using test::tiny_sd;

const Pipeline& tiny_xl() {
  static Pipeline p = Pipeline::load(tiny_sd("sdxl"));
  return p;
}

safetensors::File goldens() { return safetensors::File::open(tiny_sd("sdxl/goldens.safetensors")); }

constexpr const char* kPrompt = "a photograph of an astronaut riding a horse";
constexpr const char* kNegative = "blurry, low quality";

GenerateRequest base_request() {
  GenerateRequest r;
  r.prompt = kPrompt;
  r.steps = 4;
  r.guidance_scale = 5.0;
  r.width = r.height = 32;
  r.sampler = DiffusionSchedulerKind::Euler;
  return r;
}

std::vector<int32_t> ids_of(const Tensor& t) { return t.to(DType::I32).contiguous().to_vector<int32_t>(); }

TEST(SdxlText, EncodersMatchTransformers) {
  Device& cpu = rbee::test::cpu_device();
  auto g = goldens();
  ClipTokenizer tok1 = ClipTokenizer::from_folder(tiny_sd("sdxl/tokenizer"));
  ClipTokenizer tok2 = ClipTokenizer::from_folder(tiny_sd("sdxl/tokenizer_2"));
  std::vector<int32_t> ids1 = tok1.encode_padded(kPrompt, 77), ids2 = tok2.encode_padded(kPrompt, 77);
  EXPECT_EQ(ids1, ids_of(g.tensor("ids1_cond", cpu)));
  EXPECT_EQ(ids2, ids_of(g.tensor("ids2_cond", cpu)));
  EXPECT_NE(ids1, ids2);  // "<|endoftext|>" vs "!" padding

  Weights w1 = Weights::open(tiny_sd("sdxl/text_encoder"), cpu);
  Weights w2 = Weights::open(tiny_sd("sdxl/text_encoder_2"), cpu);
  ClipTextConfig c2 = ClipTextConfig::from_json(w2.config());
  EXPECT_TRUE(c2.with_projection);
  EXPECT_EQ(c2.projection_dim, 40);
  ClipTextModel te1 = ClipTextModel::load(w1, ClipTextConfig::from_json(w1.config()));
  ClipTextModel te2 = ClipTextModel::load(w2, c2);
  rbee::test::poison_allocations(cpu, 77 * 48 * 4, 8);
  ClipTextOutput o1 = te1.forward({ids1}), o2 = te2.forward({ids2});
  RBEE_EXPECT_TENSOR_NEAR(o1.penultimate, g.tensor("text1_penult", cpu), 1e-4, 1e-5);
  RBEE_EXPECT_TENSOR_NEAR(o2.penultimate, g.tensor("text2_penult", cpu), 1e-4, 1e-5);
  RBEE_EXPECT_TENSOR_NEAR(o2.pooled, g.tensor("text2_pooled", cpu), 1e-4, 1e-5);
}

// Pipeline::embed_prompt equals diffusers' encode_prompt: [1, 77, 32 + 48] context and [1, 40] pooled.
TEST(SdxlText, PromptEmbeddingsMatchDiffusers) {
  Device& cpu = rbee::test::cpu_device();
  auto g = goldens();
  const Pipeline& p = tiny_xl();
  EXPECT_TRUE(p.is_sdxl());
  for (auto [prompt, name] : {std::pair{kPrompt, "cond"}, std::pair{kNegative, "neg"}}) {
    Pipeline::PromptEmbeddings e = p.embed_prompt(prompt);
    RBEE_EXPECT_TENSOR_NEAR(e.context, g.tensor(std::string("context_") + name, cpu), 1e-4, 1e-5);
    RBEE_EXPECT_TENSOR_NEAR(e.pooled, g.tensor(std::string("pooled_") + name, cpu), 1e-4, 1e-5);
  }
  RBEE_EXPECT_TENSOR_NEAR(p.encode_prompt(kPrompt), g.tensor("context_cond", cpu), 1e-4, 1e-5);
}

// Noise prediction for random latents at t = 500, per-row pooled embeddings and different size conditionings.
TEST(SdxlUNet, StepWithAddedConditioningMatchesDiffusers) {
  Device& cpu = rbee::test::cpu_device();
  auto g = goldens();
  Weights w = Weights::open(tiny_sd("sdxl/unet"), cpu);
  UNetConfig cfg = UNetConfig::from_json(w.config());
  EXPECT_TRUE(cfg.text_time);
  EXPECT_EQ(cfg.transformer_depth(0), 1);
  EXPECT_EQ(cfg.transformer_depth(2), 2);
  UNet unet = UNet::load(w, cfg);
  rbee::test::poison_allocations(cpu, 2 * 4 * 8 * 8 * 4, 8);
  UNet::AddedConditions added{g.tensor("unet_text_embeds", cpu), g.tensor("unet_time_ids", cpu)};
  Tensor out = unet.forward(g.tensor("unet_sample", cpu), 500.0, g.tensor("unet_context", cpu), added);
  RBEE_EXPECT_TENSOR_NEAR(out, g.tensor("unet_out", cpu), 2e-5, 1e-5);

  // Errors: no added conditions, wrong widths, wrong batch.
  Tensor sample = g.tensor("unet_sample", cpu), ctx = g.tensor("unet_context", cpu);
  EXPECT_THROW(unet.forward(sample, 500.0, ctx), Error);
  EXPECT_THROW(unet.forward(sample, 500.0, ctx, {added.text_embeds, ops::zeros({2, 5}, DType::F32, cpu)}), Error);
  EXPECT_THROW(unet.forward(sample, 500.0, ctx, {ops::zeros({2, 39}, DType::F32, cpu), added.time_ids}), Error);
  EXPECT_THROW(unet.forward(sample, 500.0, ctx, {added.text_embeds, ops::zeros({1, 6}, DType::F32, cpu)}), Error);
  EXPECT_THROW(unet.forward(sample, 500.0, ctx, {Tensor(), added.time_ids}), Error);
}

TEST(SdxlVae, MatchesDiffusers) {
  Device& cpu = rbee::test::cpu_device();
  auto g = goldens();
  Weights w = Weights::open(tiny_sd("sdxl/vae"), cpu);
  VaeConfig cfg = VaeConfig::from_json(w.config());
  EXPECT_DOUBLE_EQ(cfg.scaling_factor, 0.13025);
  Vae vae = Vae::load(w, cfg);
  Tensor z = ops::affine(g.tensor("vae_latent", cpu), 1.0 / cfg.scaling_factor, 0.0);
  RBEE_EXPECT_TENSOR_NEAR(vae.decode(z), g.tensor("vae_image", cpu), 5e-4, 1e-4);
  RBEE_EXPECT_TENSOR_NEAR(vae.encode(g.tensor("vae_enc_image", cpu)), g.tensor("vae_enc_mean", cpu), 5e-4, 1e-4);
}

// No negative prompt: force_zeros_for_empty_prompt gives a zero negative; size conditioning original 48x64 (h x w),
// crop (2, 3).
TEST(SdxlPipeline, Txt2ImgLatentMatchesDiffusers) {
  Device& cpu = rbee::test::cpu_device();
  auto g = goldens();
  GenerateRequest r = base_request();
  r.initial_noise = g.tensor("t2i_noise", cpu).clone();
  r.original_height = 48;
  r.original_width = 64;
  r.crop_top = 2;
  r.crop_left = 3;
  RBEE_EXPECT_TENSOR_NEAR(tiny_xl().generate_latents(r), g.tensor("t2i_latent", cpu), 2e-3, 1e-4);
  // The explicit defaults of the size conditioning are the request's size.
  r.original_height = r.original_width = r.target_height = r.target_width = 32;
  r.crop_top = r.crop_left = 0;
  r.negative_prompt = kNegative;
  RBEE_EXPECT_TENSOR_NEAR(tiny_xl().generate_latents(r), g.tensor("t2i_neg_latent", cpu), 2e-3, 1e-4);
}

// SDXL-Turbo's way: Euler ancestral, "trailing" spacing from the scheduler config, 1 step, guidance 0.
TEST(SdxlPipeline, TurboStyleOneStepMatchesDiffusers) {
  Device& cpu = rbee::test::cpu_device();
  auto g = goldens();
  LoadOptions o;
  o.scheduler_config = safetensors::read_json_file(tiny_sd("sdxl/scheduler/scheduler_config.json"));
  o.scheduler_config["timestep_spacing"] = "trailing";
  o.load_vae_encoder = false;
  Pipeline turbo = Pipeline::load(tiny_sd("sdxl"), o);
  GenerateRequest r = base_request();
  r.initial_noise = g.tensor("t2i_noise", cpu).clone();
  r.steps = 1;
  r.guidance_scale = 0.0;
  r.sampler = DiffusionSchedulerKind::EulerAncestral;
  RBEE_EXPECT_TENSOR_NEAR(turbo.generate_latents(r), g.tensor("turbo_latent", cpu), 2e-3, 1e-4);
  // The folder's own "leading" spacing starts lower (t = 1 instead of 999): a different latent.
  EXPECT_GT(test::max_diff(tiny_xl().generate_latents(r), g.tensor("turbo_latent", cpu)).max_abs, 0.1);
}

TEST(SdxlPipeline, Img2ImgAndInpaintMatchDiffusers) {
  Device& cpu = rbee::test::cpu_device();
  auto g = goldens();
  GenerateRequest r = base_request();
  r.initial_noise = g.tensor("t2i_noise", cpu).clone();
  r.init_image = g.tensor("i2i_image", cpu).clone();
  r.strength = 0.5;
  RBEE_EXPECT_TENSOR_NEAR(tiny_xl().generate_latents(r), g.tensor("i2i_latent", cpu), 2e-3, 1e-4);
  r.strength = 1.0;
  r.mask = g.tensor("inpaint_mask", cpu).clone();
  RBEE_EXPECT_TENSOR_NEAR(tiny_xl().generate_latents(r), g.tensor("inpaint_latent", cpu), 2e-3, 1e-4);
}

TEST(SdxlPipeline, SeedsAndImages) {
  const Pipeline& p = tiny_xl();
  GenerateRequest r = base_request();
  r.steps = 2;
  r.sampler = DiffusionSchedulerKind::EulerAncestral;
  r.seed = 5;
  std::vector<float> a = p.generate_latents(r).to_vector<float>();
  EXPECT_EQ(a, p.generate_latents(r).to_vector<float>());
  r.original_width = 1024;  // the size conditioning reaches the UNet
  EXPECT_NE(a, p.generate_latents(r).to_vector<float>());
  Image img = p.generate(r);
  EXPECT_EQ(img.width, 32);
  EXPECT_EQ(img.rgb.size(), 32u * 32u * 3u);
}

// SDXL requests in one UNet batch (generate_group): per-row pooled embeddings, zeroed negative rows for an empty
// negative prompt next to a real one, and each request's own size conditioning; every request's latents bit for
// bit those of the request alone.
TEST(SdxlPipeline, GroupLatentsEqualTheirSoloLatents) {
  const Pipeline& p = tiny_xl();
  std::vector<GenerateRequest> rs(2, base_request());
  rs[0].steps = rs[1].steps = 2;
  rs[0].seed = 5;
  rs[1].prompt = "a red cube";
  rs[1].negative_prompt = kNegative;
  rs[1].original_width = 1024;
  rs[1].seed = 9;
  std::vector<std::vector<float>> final_latents(rs.size());
  for (size_t j = 0; j < rs.size(); ++j) {
    rs[j].on_latents = [&, j](int step, int total, const Tensor& lat) {
      if (step == total) final_latents[j] = lat.contiguous().to_vector<float>();
    };
  }
  const std::vector<std::vector<Image>> group = p.generate_group(rs);
  for (size_t j = 0; j < rs.size(); ++j) {
    GenerateRequest alone = rs[j];
    alone.on_latents = nullptr;
    EXPECT_EQ(final_latents[j], p.generate_latents(alone).to_vector<float>()) << "request " << j;
    EXPECT_EQ(group[j].at(0).rgb, p.generate(alone).rgb) << "request " << j;
  }
}

TEST(SdxlPipeline, RequestErrors) {
  const Pipeline& p = tiny_xl();
  auto bad = [&](auto edit) {
    GenerateRequest r = base_request();
    r.steps = 1;
    edit(r);
    EXPECT_THROW(p.generate_latents(r), Error);
  };
  bad([](GenerateRequest& r) { r.original_width = -1; });
  bad([](GenerateRequest& r) { r.crop_top = -8; });
  bad([](GenerateRequest& r) { r.target_height = 20000; });
  bad([](GenerateRequest& r) { r.width = 30; });
}

TEST(SdxlConfig, UNetConfigErrors) {
  Device& cpu = rbee::test::cpu_device();
  Weights w = Weights::open(tiny_sd("sdxl/unet"), cpu);
  const nlohmann::json good = w.config();
  auto throws = [&](auto edit) {
    nlohmann::json c = good;
    edit(c);
    EXPECT_THROW(UNetConfig::from_json(c), Error) << c.dump();
  };
  throws([](nlohmann::json& c) { c["addition_embed_type"] = "text"; });
  throws([](nlohmann::json& c) { c.erase("addition_time_embed_dim"); });
  throws([](nlohmann::json& c) { c["addition_time_embed_dim"] = 7; });
  throws([](nlohmann::json& c) { c.erase("projection_class_embeddings_input_dim"); });
  throws([](nlohmann::json& c) { c["transformer_layers_per_block"] = nlohmann::json::array({1, 2}); });
  throws([](nlohmann::json& c) { c["transformer_layers_per_block"] = nlohmann::json::array({1, 0, 2}); });
  throws([](nlohmann::json& c) { c["reverse_transformer_layers_per_block"] = nlohmann::json::array({1, 1, 1}); });
  throws([](nlohmann::json& c) { c["mid_block_type"] = "UNetMidBlock2DSimpleCrossAttn"; });
  throws([](nlohmann::json& c) { c["mid_block_type"] = 3; });
  throws([](nlohmann::json& c) { c["addition_time_embed_dim"] = "8"; });
  UNetConfig short_list = UNetConfig::from_json(good);
  short_list.transformer_layers_per_level.pop_back();
  EXPECT_THROW(short_list.transformer_depth(2), Error);
  // The file's add_embedding.linear_1 is [64, 88]: another input width is refused by name at load.
  nlohmann::json c = good;
  c["projection_class_embeddings_input_dim"] = 96;
  EXPECT_THROW(UNet::load(w, UNetConfig::from_json(c)), Error);
  // Per-level depths that do not match the file (the mid block has 2 transformer blocks).
  c = good;
  c["transformer_layers_per_block"] = nlohmann::json::array({1, 1, 3});
  EXPECT_THROW(UNet::load(w, UNetConfig::from_json(c)), Error);
}

// Random-weight SDXL from the folder's configs; parts that do not fit together are refused at assembly.
TEST(SdxlPipeline, RandomWeightsAndAssemblyErrors) {
  PipelineSpec spec = PipelineSpec::from_diffusers_folder(tiny_sd("sdxl"));
  ASSERT_FALSE(spec.text_encoder_2.is_null());
  EXPECT_EQ(spec.tokenizer_2_dir, tiny_sd("sdxl/tokenizer_2"));
  Pipeline p = Pipeline::random(spec);
  EXPECT_TRUE(p.is_sdxl());
  GenerateRequest r = base_request();
  r.steps = 1;
  std::vector<float> zeroed = p.generate_latents(r).to_vector<float>();
  for (float v : zeroed) ASSERT_TRUE(std::isfinite(v));
  // force_zeros_for_empty_prompt false: the empty negative prompt is encoded instead of zeroed.
  PipelineSpec encoded = spec;
  encoded.force_zeros_for_empty_prompt = false;
  EXPECT_NE(zeroed, Pipeline::random(encoded).generate_latents(r).to_vector<float>());
  r.negative_prompt = " ";  // not empty: encoded either way (the tokenizer drops the space)
  EXPECT_EQ(p.generate_latents(r).to_vector<float>(), Pipeline::random(encoded).generate_latents(r).to_vector<float>());
  r.negative_prompt.clear();

  PipelineSpec s = spec;
  s.text_encoder_2 = nullptr;  // a text_time UNet without its second encoder
  EXPECT_THROW(Pipeline::random(s), Error);
  s = spec;
  s.text_encoder_2["projection_dim"] = 24;  // pooled width no longer fits add_embedding
  EXPECT_THROW(Pipeline::random(s), Error);
  s = spec;
  s.text_encoder_2["hidden_size"] = 64;  // context width 96 != cross_attention_dim 80
  EXPECT_THROW(Pipeline::random(s), Error);
  s = spec;
  s.text_encoder_2["architectures"] = nlohmann::json::array({"CLIPTextModel"});
  EXPECT_THROW(Pipeline::random(s), Error);
  // The SD 1.5 UNet with two encoders.
  PipelineSpec sd15 = PipelineSpec::from_diffusers_folder(tiny_sd("sd15"));
  EXPECT_TRUE(sd15.text_encoder_2.is_null());
  sd15.text_encoder_2 = spec.text_encoder_2;
  sd15.tokenizer_2_dir = spec.tokenizer_2_dir;
  EXPECT_THROW(Pipeline::random(sd15), Error);
}

// The same tiny SDXL as one original-layout single file (tools/goldens/make_tiny_sdxl_single_file.py: OpenCLIP
// fused q/k/v and transposed text_projection for the second encoder, label_emb for add_embedding) gives
// diffusers' txt2img latent.
TEST(SdxlPipeline, SingleFileCheckpointMatchesDiffusers) {
  Device& cpu = rbee::test::cpu_device();
  auto g = goldens();
  const PipelineSpec spec = PipelineSpec::from_diffusers_folder(tiny_sd("sdxl"));
  Pipeline p = Pipeline::load_single_file(tiny_sd("sdxl_single_file.safetensors"), spec);
  EXPECT_TRUE(p.is_sdxl());
  Pipeline::PromptEmbeddings e = p.embed_prompt(kPrompt);
  RBEE_EXPECT_TENSOR_NEAR(e.context, g.tensor("context_cond", cpu), 1e-4, 1e-5);
  RBEE_EXPECT_TENSOR_NEAR(e.pooled, g.tensor("pooled_cond", cpu), 1e-4, 1e-5);
  GenerateRequest r = base_request();
  r.initial_noise = g.tensor("t2i_noise", cpu).clone();
  r.original_height = 48;
  r.original_width = 64;
  r.crop_top = 2;
  r.crop_left = 3;
  RBEE_EXPECT_TENSOR_NEAR(p.generate_latents(r), g.tensor("t2i_latent", cpu), 2e-3, 1e-4);

  // An SD 1.5 single file has no conditioner.embedders; the SDXL file has no cond_stage_model.
  EXPECT_THROW(Pipeline::load_single_file(tiny_sd("sd15_single_file.safetensors"), spec), Error);
  EXPECT_THROW(Pipeline::load_single_file(tiny_sd("sdxl_single_file.safetensors"),
                                          PipelineSpec::from_diffusers_folder(tiny_sd("sd15"))),
               Error);
  // The wrong width for the second encoder: its stored embeddings and fused in_proj rows have other shapes.
  PipelineSpec wrong = spec;
  wrong.text_encoder_2["hidden_size"] = 64;
  wrong.text_encoder_2["intermediate_size"] = 128;
  wrong.unet["cross_attention_dim"] = 96;
  EXPECT_THROW(Pipeline::load_single_file(tiny_sd("sdxl_single_file.safetensors"), wrong), Error);
}

// The full-size SDXL base architecture: configs parse and fit together (no weights are built: 2.6 G parameters).
TEST(SdxlConfig, FullSizeSpecIsConsistent) {
  PipelineSpec s = PipelineSpec::sdxl(tiny_sd("sdxl/tokenizer"), tiny_sd("sdxl/tokenizer_2"));
  UNetConfig u = UNetConfig::from_json(s.unet);
  ClipTextConfig t1 = ClipTextConfig::from_json(s.text_encoder), t2 = ClipTextConfig::from_json(s.text_encoder_2);
  EXPECT_TRUE(u.text_time);
  EXPECT_EQ(u.transformer_depth(1), 2);
  EXPECT_EQ(u.transformer_depth(2), 10);
  EXPECT_EQ(u.heads, (std::vector<int64_t>{5, 10, 20}));
  EXPECT_EQ(t1.hidden_size + t2.hidden_size, u.cross_attention_dim);
  EXPECT_TRUE(t2.with_projection);
  EXPECT_FALSE(t2.quick_gelu);
  EXPECT_EQ(t2.projection_dim + 6 * u.addition_time_embed_dim, u.projection_class_embeddings_input_dim);
  EXPECT_DOUBLE_EQ(VaeConfig::from_json(s.vae).scaling_factor, 0.13025);
  EXPECT_EQ(NoiseSchedule::from_json(s.scheduler).spacing, TimestepSpacing::Leading);
}

}  // namespace
}  // namespace rbee::sd
