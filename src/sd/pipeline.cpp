// SD pipelines (rbee/sd/pipeline.h): txt2img, img2img and inpaint over the loaded components.
#include "rbee/sd/pipeline.h"

#include <algorithm>
#include <cmath>

#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "rbee/sd/clip_text_model.h"
#include "rbee/sd/clip_tokenizer.h"
#include "rbee/sd/unet.h"
#include "rbee/sd/vae.h"
#include "rbee/sd/weights.h"
#include "sd/nn.h"

namespace rbee::sd {

struct Pipeline::Impl {
  Device* device = nullptr;
  NoiseSchedule schedule;
  std::unique_ptr<ClipTokenizer> tokenizer;
  std::unique_ptr<ClipTextModel> text;
  std::unique_ptr<UNet> unet;
  std::unique_ptr<Vae> vae;
};

namespace {

// Checks that the components fit together and builds the models.
std::shared_ptr<Pipeline::Impl> assemble(Device& dev, const NoiseSchedule& schedule, ClipTokenizer tokenizer,
                                         const Weights& tw, const Weights& uw, const Weights& vw,
                                         const LoadOptions& options);

}  // namespace

struct PipelineAssembler {
  static Pipeline make(std::shared_ptr<Pipeline::Impl> impl) {
    Pipeline p;
    p.impl_ = std::move(impl);
    return p;
  }
};

namespace {

std::shared_ptr<Pipeline::Impl> assemble(Device& dev, const NoiseSchedule& schedule, ClipTokenizer tokenizer,
                                         const Weights& tw, const Weights& uw, const Weights& vw,
                                         const LoadOptions& options) {
  auto impl = std::make_shared<Pipeline::Impl>();
  impl->device = &dev;
  impl->schedule = schedule;
  impl->tokenizer = std::make_unique<ClipTokenizer>(std::move(tokenizer));
  impl->text = std::make_unique<ClipTextModel>(ClipTextModel::load(tw, ClipTextConfig::from_json(tw.config())));
  RBEE_CHECK(impl->tokenizer->vocab_size() <= impl->text->config().vocab_size,
             "sd pipeline: tokenizer has {} tokens, the text encoder only {}", impl->tokenizer->vocab_size(),
             impl->text->config().vocab_size);
  UNetConfig ucfg = UNetConfig::from_json(uw.config());
  RBEE_CHECK_CODE(ucfg.in_channels == ucfg.out_channels, ErrorCode::Unsupported,
                  "sd pipeline: UNet with {} input channels (an inpainting UNet) is not supported yet", ucfg.in_channels);
  impl->unet = std::make_unique<UNet>(UNet::load(uw, ucfg));
  VaeConfig vcfg = VaeConfig::from_json(vw.config());
  RBEE_CHECK(vcfg.latent_channels == ucfg.in_channels, "sd pipeline: VAE latent channels {} != UNet channels {}",
             vcfg.latent_channels, ucfg.in_channels);
  RBEE_CHECK(impl->text->config().hidden_size == ucfg.cross_attention_dim,
             "sd pipeline: text encoder width {} != UNet cross_attention_dim {}", impl->text->config().hidden_size,
             ucfg.cross_attention_dim);
  impl->vae = std::make_unique<Vae>(Vae::load(vw, vcfg, options.load_vae_encoder));
  return impl;
}

}  // namespace

Pipeline Pipeline::load(const std::string& dir, const LoadOptions& options) {
  Device& dev = options.device ? *options.device : Registry::global().cpu();
  nlohmann::json index = safetensors::read_json_file(dir + "/model_index.json");
  RBEE_CHECK_CODE(!index.contains("text_encoder_2"), ErrorCode::Unsupported,
                  "sd pipeline: '{}' is an SDXL pipeline (text_encoder_2), not supported yet", dir);
  NoiseSchedule schedule =
      NoiseSchedule::from_json(safetensors::read_json_file(dir + "/scheduler/scheduler_config.json"));
  return PipelineAssembler::make(assemble(dev, schedule, ClipTokenizer::from_folder(dir + "/tokenizer"),
                                          Weights::open(dir + "/text_encoder", dev, options.dtype),
                                          Weights::open(dir + "/unet", dev, options.dtype),
                                          Weights::open(dir + "/vae", dev, options.dtype), options));
}

Pipeline Pipeline::load_single_file(const std::string& file, const PipelineSpec& spec, const LoadOptions& options) {
  Device& dev = options.device ? *options.device : Registry::global().cpu();
  OriginalLayout layout;
  layout.unet_layers_per_block = UNetConfig::from_json(spec.unet).layers_per_block;
  layout.vae_levels = (int)VaeConfig::from_json(spec.vae).block_out_channels.size();
  return PipelineAssembler::make(
      assemble(dev, NoiseSchedule::from_json(spec.scheduler), ClipTokenizer::from_folder(spec.tokenizer_dir),
               Weights::open_original(file, SdComponent::TextEncoder, layout, spec.text_encoder, dev, options.dtype),
               Weights::open_original(file, SdComponent::Unet, layout, spec.unet, dev, options.dtype),
               Weights::open_original(file, SdComponent::Vae, layout, spec.vae, dev, options.dtype), options));
}

PipelineSpec PipelineSpec::from_diffusers_folder(const std::string& dir) {
  PipelineSpec s;
  s.unet = safetensors::read_json_file(dir + "/unet/config.json");
  s.vae = safetensors::read_json_file(dir + "/vae/config.json");
  s.text_encoder = safetensors::read_json_file(dir + "/text_encoder/config.json");
  s.scheduler = safetensors::read_json_file(dir + "/scheduler/scheduler_config.json");
  s.tokenizer_dir = dir + "/tokenizer";
  return s;
}

Pipeline Pipeline::random(const PipelineSpec& spec, const LoadOptions& options) {
  Device& dev = options.device ? *options.device : Registry::global().cpu();
  return PipelineAssembler::make(assemble(dev, NoiseSchedule::from_json(spec.scheduler),
                                          ClipTokenizer::from_folder(spec.tokenizer_dir),
                                          Weights::random(spec.text_encoder, spec.seed + 1, dev, options.dtype),
                                          Weights::random(spec.unet, spec.seed + 2, dev, options.dtype),
                                          Weights::random(spec.vae, spec.seed + 3, dev, options.dtype), options));
}

PipelineSpec PipelineSpec::sd15(const std::string& tokenizer_dir) {
  PipelineSpec s;
  s.tokenizer_dir = tokenizer_dir;
  s.unet = {{"act_fn", "silu"},
            {"attention_head_dim", 8},
            {"block_out_channels", {320, 640, 1280, 1280}},
            {"center_input_sample", false},
            {"cross_attention_dim", 768},
            {"down_block_types", {"CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"}},
            {"downsample_padding", 1},
            {"flip_sin_to_cos", true},
            {"freq_shift", 0},
            {"in_channels", 4},
            {"layers_per_block", 2},
            {"mid_block_scale_factor", 1},
            {"norm_eps", 1e-05},
            {"norm_num_groups", 32},
            {"out_channels", 4},
            {"sample_size", 64},
            {"up_block_types", {"UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"}}};
  s.vae = {{"act_fn", "silu"},
           {"block_out_channels", {128, 256, 512, 512}},
           {"down_block_types", {"DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"}},
           {"in_channels", 3},
           {"latent_channels", 4},
           {"layers_per_block", 2},
           {"norm_num_groups", 32},
           {"out_channels", 3},
           {"sample_size", 512},
           {"scaling_factor", 0.18215},
           {"up_block_types", {"UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D"}}};
  s.text_encoder = {{"hidden_act", "quick_gelu"},    {"hidden_size", 768},   {"intermediate_size", 3072},
                    {"max_position_embeddings", 77}, {"num_attention_heads", 12}, {"num_hidden_layers", 12},
                    {"vocab_size", 49408},           {"layer_norm_eps", 1e-05}, {"projection_dim", 768}};
  s.scheduler = {{"beta_end", 0.012},   {"beta_schedule", "scaled_linear"}, {"beta_start", 0.00085},
                 {"num_train_timesteps", 1000}, {"set_alpha_to_one", false}, {"steps_offset", 1},
                 {"prediction_type", "epsilon"}};
  return s;
}

int64_t Pipeline::latent_scale() const { return impl_->vae->config().scale(); }
int64_t Pipeline::latent_channels() const { return impl_->vae->config().latent_channels; }
const NoiseSchedule& Pipeline::noise_schedule() const { return impl_->schedule; }
Device& Pipeline::device() const { return *impl_->device; }

Tensor Pipeline::encode_prompt(const std::string& prompt) const {
  const int64_t max_len = impl_->text->config().max_positions;
  return impl_->text->forward({impl_->tokenizer->encode_padded(prompt, (int)max_len)}).last_hidden;
}

namespace {
// Stream ids of the seeded noise: the initial latent, then one stream per scheduler step.
constexpr uint64_t kInitialNoiseStream = 0;
constexpr uint64_t kStepNoiseStream = 1000;
}  // namespace

Tensor Pipeline::generate_latents(const GenerateRequest& r) const {
  const Impl& m = *impl_;
  Device& dev = *m.device;
  const int64_t f = latent_scale();
  RBEE_CHECK(r.steps >= 1 && r.steps <= 150, "sd request: steps {} outside [1, 150]", r.steps);
  RBEE_CHECK(std::isfinite(r.guidance_scale) && r.guidance_scale >= 0 && r.guidance_scale <= 20,
             "sd request: guidance_scale {} outside [0, 20]", r.guidance_scale);
  RBEE_CHECK(r.width > 0 && r.height > 0 && r.width % f == 0 && r.height % f == 0 && r.width <= 2048 &&
                 r.height <= 2048,
             "sd request: size {}x{} must be positive multiples of {} up to 2048", r.width, r.height, f);
  const Shape lshape{1, latent_channels(), r.height / f, r.width / f};
  Tensor noise = r.initial_noise.defined() ? r.initial_noise.to(dev) : randn(lshape, r.seed, kInitialNoiseStream, dev);
  RBEE_CHECK(noise.shape() == lshape && noise.dtype() == DType::F32,
             "sd request: initial_noise must be f32 {}, got {}", lshape.to_string(), noise.to_string());
  const bool img2img = r.init_image.defined();
  const bool inpaint = r.mask.defined();
  RBEE_CHECK(!inpaint || img2img, "sd request: a mask needs init_image");
  if (img2img) {
    RBEE_CHECK(r.init_image.shape() == Shape({1, 3, r.height, r.width}),
               "sd request: init_image must be [1, 3, {}, {}], got {}", r.height, r.width,
               r.init_image.shape().to_string());
    RBEE_CHECK(std::isfinite(r.strength) && r.strength > 0 && r.strength <= 1,
               "sd request: strength {} outside (0, 1]", r.strength);
  }
  if (inpaint)
    RBEE_CHECK(r.mask.shape() == Shape({1, 1, r.height, r.width}), "sd request: mask must be [1, 1, {}, {}], got {}",
               r.height, r.width, r.mask.shape().to_string());

  const bool cfg = r.guidance_scale > 1.0;
  Tensor context = encode_prompt(r.prompt);
  if (cfg) context = nn::concat(encode_prompt(r.negative_prompt), context, 0);

  auto sched = make_scheduler(r.sampler, m.schedule);
  sched->set_timesteps(r.steps);
  int start = 0;
  Tensor latents, init_latents, latent_mask;
  if (img2img) {
    init_latents = encode_image(r.init_image);
    // diffusers: init_timestep = min(int(steps * strength), steps), the run starts at steps - init_timestep.
    const int init_steps = std::min((int)(r.steps * r.strength), r.steps);
    start = r.steps - init_steps;
    RBEE_CHECK(start < r.steps, "sd request: strength {} with {} steps leaves no step to run", r.strength, r.steps);
  }
  if (img2img && !(inpaint && start == 0)) {
    latents = sched->add_noise(init_latents, noise, start);
  } else {
    latents = ops::affine(noise, sched->init_noise_sigma(), 0.0);
  }
  if (inpaint) {  // nearest-neighbour downsampling of the mask to the latent grid, as torch's interpolate
    Tensor mk = r.mask.to(dev).contiguous();
    latent_mask = Tensor::empty({1, 1, lshape[2], lshape[3]}, DType::F32, dev);
    Tensor small = mk.as_strided({1, 1, lshape[2], lshape[3]}, {mk.stride(0), mk.stride(1), f * mk.stride(2), f},
                                 mk.offset());
    latent_mask.copy_from(small);
  }

  for (int i = start; i < r.steps; ++i) {
    const double t = sched->timesteps()[(size_t)i];
    Tensor in = sched->scale_model_input(latents, i);
    if (cfg) in = nn::concat(in, in, 0);
    Tensor pred = m.unet->forward(in, t, context);
    if (cfg) {
      Tensor uncond = pred.narrow(0, 0, 1), text = pred.narrow(0, 1, 1);
      pred = ops::add(uncond, ops::affine(ops::sub(text, uncond), r.guidance_scale, 0.0));
    }
    Tensor step_noise;
    if (sched->needs_noise()) step_noise = randn(lshape, r.seed, kStepNoiseStream + (uint64_t)i, dev);
    latents = sched->step(pred, i, latents, step_noise);
    if (inpaint) {  // keep the unmasked region on the noised source trajectory
      Tensor proper = i + 1 < r.steps ? sched->add_noise(init_latents, noise, i + 1) : init_latents;
      latents = ops::add(ops::mul(latent_mask, latents), ops::mul(ops::affine(latent_mask, -1.0, 1.0), proper));
    }
    if (r.on_step && !r.on_step(i - start + 1, r.steps - start))
      RBEE_CHECK_CODE(false, ErrorCode::Cancelled, "sd request: cancelled after step {}", i + 1);
    if (r.on_latents) r.on_latents(i - start + 1, r.steps - start, latents);
  }
  return latents;
}

Tensor Pipeline::encode_image(const Tensor& image) const {
  return ops::affine(impl_->vae->encode(image.to(*impl_->device)), impl_->vae->config().scaling_factor, 0.0);
}

Tensor Pipeline::decode(const Tensor& latents) const {
  Tensor img = impl_->vae->decode(ops::affine(latents, 1.0 / impl_->vae->config().scaling_factor, 0.0));
  // [-1, 1] -> [0, 1], clamped
  Tensor x = ops::affine(img, 0.5, 0.5);
  Tensor zero = ops::zeros({1}, DType::F32, x.device()), one = ops::ones({1}, DType::F32, x.device());
  return ops::binary(BinaryOp::Min, ops::binary(BinaryOp::Max, x, zero), one);
}

Image Pipeline::generate(const GenerateRequest& r) const { return to_image(decode(generate_latents(r))); }

Image Pipeline::to_image(const Tensor& image01) {
  RBEE_CHECK(image01.rank() == 4 && image01.dim(0) == 1 && image01.dim(1) == 3,
             "sd to_image: expected [1, 3, H, W], got {}", image01.shape().to_string());
  const int64_t H = image01.dim(2), W = image01.dim(3);
  std::vector<float> v = image01.to(DType::F32).contiguous().to_vector<float>();
  Image img;
  img.width = (int)W;
  img.height = (int)H;
  img.rgb.resize((size_t)(H * W * 3));
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t p = 0; p < H * W; ++p) {
      float x = std::clamp(v[(size_t)(c * H * W + p)], 0.0f, 1.0f);
      img.rgb[(size_t)(p * 3 + c)] = (uint8_t)std::lround(x * 255.0f);
    }
  return img;
}

Tensor Pipeline::from_image(const Image& image) const {
  RBEE_CHECK(image.width > 0 && image.height > 0 && image.rgb.size() == (size_t)image.width * image.height * 3,
             "sd from_image: {}x{} image with {} bytes", image.width, image.height, image.rgb.size());
  const int64_t HW = (int64_t)image.width * image.height;
  std::vector<float> v((size_t)(3 * HW));
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t p = 0; p < HW; ++p) v[(size_t)(c * HW + p)] = image.rgb[(size_t)(p * 3 + c)] / 127.5f - 1.0f;
  return Tensor::from_vector(v, {1, 3, image.height, image.width}, *impl_->device);
}

}  // namespace rbee::sd
