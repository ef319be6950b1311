// SD pipelines (rbee/sd/pipeline.h): txt2img, img2img and inpaint over the loaded components.
#include "rbee/sd/pipeline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <list>
#include <mutex>

#include <fmt/format.h>

#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/core/log.h"
#include "rbee/ops.h"
#include "rbee/sd/clip_text_model.h"
#include "rbee/sd/clip_tokenizer.h"
#include "rbee/sd/unet.h"
#include "rbee/sd/vae.h"
#include "rbee/sd/weights.h"
#include "sd/config_json.h"
#include "sd/flop_count.h"
#include "sd/nn.h"
#include "sd/torch_generator.h"
#include "sd/unet_graph.h"

namespace rbee::sd {

struct Pipeline::Impl {
  Device* device = nullptr;
  NoiseSchedule schedule;
  std::unique_ptr<ClipTokenizer> tokenizer;
  std::unique_ptr<ClipTextModel> text;
  // SDXL's second tokenizer and text encoder (null for SD 1.x / 2.x).
  std::unique_ptr<ClipTokenizer> tokenizer2;
  std::unique_ptr<ClipTextModel> text2;
  bool force_zeros_for_empty_prompt = true;
  std::unique_ptr<UNet> unet;
  // The UNet step as a replayed device graph (LoadOptions::unet_graphs); made at the first request, used by one
  // request at a time (another one at the same time runs its steps eagerly). Declared after unet: it goes first.
  bool unet_graphs = true;
  mutable std::mutex graph_mutex;
  mutable std::unique_ptr<UNetStepGraph> graph;
  std::unique_ptr<Vae> vae;
  ModelLimits limits;
  // The prompt cache (LoadOptions::prompt_cache): most recently used first.
  size_t prompt_cache_size = 0;
  mutable std::mutex prompt_mutex;
  mutable std::list<std::pair<std::string, Pipeline::PromptEmbeddings>> prompt_cache;
  // Pipeline::load_prepare_seconds and Pipeline::unet_step_flops.
  double load_prepare_seconds = 0;
  mutable std::atomic<double> unet_step_flops{0};
};

struct PipelineAssembler {
  // The pipeline over `impl`, prepared at the model's default size when the options ask for it on a device other
  // than the CPU (LoadOptions::prepare).
  static Pipeline make(std::shared_ptr<Pipeline::Impl> impl, const LoadOptions& options) {
    Pipeline p;
    const bool prepare = options.prepare && impl->device->info().backend != "cpu";
    const int side = (int)impl->limits.default_side;
    p.impl_ = impl;
    if (!prepare) return p;
    try {
      impl->load_prepare_seconds = p.prepare(side, side);
    } catch (const Error& e) {  // the model still serves; its first request makes the plans
      log::warn("sd pipeline: preparing {}x{} at load failed ({}); the first request of that size makes its plans",
                side, side, e.what());
    }
    return p;
  }
};

namespace {

// The components of one pipeline before they are built; tokenizer2 / text2 only for SDXL.
struct Parts {
  NoiseSchedule schedule;
  std::unique_ptr<ClipTokenizer> tokenizer, tokenizer2;
  Weights text, text2, unet, vae;
  bool force_zeros_for_empty_prompt = true;
};

std::unique_ptr<ClipTextModel> text_model(const ClipTokenizer& tokenizer, const Weights& w, const char* what) {
  auto model = std::make_unique<ClipTextModel>(ClipTextModel::load(w, ClipTextConfig::from_json(w.config())));
  RBEE_CHECK(tokenizer.vocab_size() <= model->config().vocab_size,
             "sd pipeline: {} has {} tokens, its text encoder only {}", what, tokenizer.vocab_size(),
             model->config().vocab_size);
  return model;
}

ModelLimits limits_of(const UNetConfig& u, const VaeConfig& v, const NoiseSchedule& schedule, bool xl) {
  ModelLimits l;
  l.latent_scale = v.scale();
  l.latent_channels = v.latent_channels;
  l.schedule = schedule;
  l.sdxl = xl;
  l.default_side = u.sample_size > 0 ? u.sample_size * v.scale() : 512;
  return l;
}

// Checks that the components fit together and builds the models.
std::shared_ptr<Pipeline::Impl> assemble(Device& dev, Parts parts, const LoadOptions& options) {
  auto impl = std::make_shared<Pipeline::Impl>();
  impl->device = &dev;
  impl->schedule = parts.schedule;
  impl->force_zeros_for_empty_prompt = parts.force_zeros_for_empty_prompt;
  impl->prompt_cache_size = (size_t)std::max(0, options.prompt_cache);
  impl->unet_graphs = options.unet_graphs;
  impl->tokenizer = std::move(parts.tokenizer);
  impl->text = text_model(*impl->tokenizer, parts.text, "tokenizer");
  const bool xl = parts.tokenizer2 != nullptr;
  if (xl) {
    impl->tokenizer2 = std::move(parts.tokenizer2);
    impl->text2 = text_model(*impl->tokenizer2, parts.text2, "tokenizer_2");
    RBEE_CHECK(impl->text2->config().with_projection,
               "sd pipeline: text_encoder_2 must be a CLIPTextModelWithProjection (config 'architectures')");
  }
  UNetConfig ucfg = UNetConfig::from_json(parts.unet.config());
  RBEE_CHECK_CODE(ucfg.in_channels == ucfg.out_channels, ErrorCode::Unsupported,
                  "sd pipeline: UNet with {} input channels (an inpainting UNet) is not supported yet", ucfg.in_channels);
  RBEE_CHECK_CODE(ucfg.text_time == xl, ucfg.text_time ? ErrorCode::Unsupported : ErrorCode::InvalidArgument,
                  "sd pipeline: {}", ucfg.text_time ? "a text_time (SDXL) UNet needs text_encoder_2 and tokenizer_2"
                                                    : "two text encoders need a text_time (SDXL) UNet");
  const int64_t width1 = impl->text->config().hidden_size;
  const int64_t width2 = xl ? impl->text2->config().hidden_size : 0;
  RBEE_CHECK(width1 + width2 == ucfg.cross_attention_dim,
             "sd pipeline: text encoder width {} (+ {} of text_encoder_2) != UNet cross_attention_dim {}", width1,
             width2, ucfg.cross_attention_dim);
  if (xl) {
    const int64_t want = impl->text2->config().projection_dim + 6 * ucfg.addition_time_embed_dim;
    RBEE_CHECK(want == ucfg.projection_class_embeddings_input_dim,
               "sd pipeline: UNet projection_class_embeddings_input_dim {} != text_encoder_2 projection_dim {} + 6 x "
               "addition_time_embed_dim {}",
               ucfg.projection_class_embeddings_input_dim, impl->text2->config().projection_dim,
               ucfg.addition_time_embed_dim);
  }
  impl->unet = std::make_unique<UNet>(UNet::load(parts.unet, ucfg));
  VaeConfig vcfg = VaeConfig::from_json(parts.vae.config());
  RBEE_CHECK(vcfg.latent_channels == ucfg.in_channels, "sd pipeline: VAE latent channels {} != UNet channels {}",
             vcfg.latent_channels, ucfg.in_channels);
  impl->vae = std::make_unique<Vae>(Vae::load(parts.vae, vcfg, options.load_vae_encoder));
  impl->limits = limits_of(ucfg, vcfg, parts.schedule, xl);
  return impl;
}

// A model_index.json component entry such as ["transformers", "CLIPTextModel"] ([null, null] = absent).
bool has_component(const nlohmann::json& index, const char* name) {
  return index.contains(name) && index[name].is_array() && !index[name].empty() && !index[name][0].is_null();
}

bool force_zeros(const nlohmann::json& index) {
  const auto it = index.find("force_zeros_for_empty_prompt");
  return it == index.end() || !it->is_boolean() || it->get<bool>();
}

}  // namespace

Pipeline Pipeline::load(const std::string& dir, const LoadOptions& options) {
  Device& dev = options.device ? *options.device : Registry::global().cpu();
  nlohmann::json index = safetensors::read_json_file(dir + "/model_index.json");
  RBEE_CHECK(index.is_object(), "sd pipeline: '{}/model_index.json' is not a JSON object", dir);
  const bool xl = has_component(index, "text_encoder_2");
  RBEE_CHECK_CODE(!xl || has_component(index, "text_encoder"), ErrorCode::Unsupported,
                  "sd pipeline: '{}' has text_encoder_2 but no text_encoder (an SDXL refiner), not supported", dir);
  Parts parts;
  parts.schedule = NoiseSchedule::from_json(options.scheduler_config.is_null()
                                                ? read_config_json(dir + "/scheduler/scheduler_config.json")
                                                : options.scheduler_config);
  parts.tokenizer = std::make_unique<ClipTokenizer>(ClipTokenizer::from_folder(dir + "/tokenizer"));
  // diffusers' variant rule: each component's variant files when it has them, else its plain files (with a
  // warning); no component with the variant at all is an error.
  int with_variant = 0;
  auto component_path = [&](const char* name) {
    bool found = false;
    const std::string file = Weights::component_file(dir + "/" + name, options.variant, &found);
    if (!options.variant.empty() && !found)
      log::warn("sd pipeline: '{}/{}' has no '{}' variant files; its plain weights are read", dir, name,
                options.variant);
    with_variant += found ? 1 : 0;
    return file;
  };
  auto component = [&](const char* name) { return Weights::open(component_path(name), dev, options.dtype); };
  parts.text = component("text_encoder");
  if (xl) {
    parts.tokenizer2 = std::make_unique<ClipTokenizer>(ClipTokenizer::from_folder(dir + "/tokenizer_2"));
    parts.text2 = component("text_encoder_2");
    parts.force_zeros_for_empty_prompt = force_zeros(index);
  }
  parts.unet = component("unet");
  const std::string vae_file = component_path("vae");
  parts.vae = Weights::open(vae_file, dev, options.dtype);
  RBEE_CHECK_CODE(options.variant.empty() || with_variant > 0, ErrorCode::NotFound,
                  "sd pipeline: no component of '{}' has '{}' variant files (e.g. "
                  "unet/diffusion_pytorch_model.{}.safetensors)",
                  dir, options.variant, options.variant);
  // diffusers' SDXL pipelines upcast a VAE whose config says force_upcast (the default) to f32 for decoding; the
  // SD 1.x / 2.x pipelines do not read it.
  if (xl && options.dtype != DType::F32 && VaeConfig::from_json(parts.vae.config()).force_upcast)
    parts.vae = Weights::open(vae_file, dev, DType::F32);
  return PipelineAssembler::make(assemble(dev, std::move(parts), options), options);
}

Pipeline Pipeline::load_single_file(const std::string& file, const PipelineSpec& spec, const LoadOptions& options) {
  Device& dev = options.device ? *options.device : Registry::global().cpu();
  const bool xl = !spec.text_encoder_2.is_null();
  OriginalLayout layout;
  layout.unet_layers_per_block = UNetConfig::from_json(spec.unet).layers_per_block;
  layout.vae_levels = (int)VaeConfig::from_json(spec.vae).block_out_channels.size();
  Parts parts;
  parts.schedule = NoiseSchedule::from_json(options.scheduler_config.is_null() ? spec.scheduler : options.scheduler_config);
  parts.tokenizer = std::make_unique<ClipTokenizer>(ClipTokenizer::from_folder(spec.tokenizer_dir));
  parts.text = Weights::open_original(file, xl ? SdComponent::TextEncoderXL1 : SdComponent::TextEncoder, layout,
                                      spec.text_encoder, dev, options.dtype);
  if (xl) {
    parts.tokenizer2 = std::make_unique<ClipTokenizer>(ClipTokenizer::from_folder(spec.tokenizer_2_dir));
    parts.text2 = Weights::open_original(file, SdComponent::TextEncoderXL2, layout, spec.text_encoder_2, dev,
                                         options.dtype);
    parts.force_zeros_for_empty_prompt = spec.force_zeros_for_empty_prompt;
  }
  parts.unet = Weights::open_original(file, SdComponent::Unet, layout, spec.unet, dev, options.dtype);
  parts.vae = Weights::open_original(file, SdComponent::Vae, layout, spec.vae, dev, options.dtype);
  return PipelineAssembler::make(assemble(dev, std::move(parts), options), options);
}

PipelineSpec PipelineSpec::from_diffusers_folder(const std::string& dir) {
  PipelineSpec s;
  s.unet = safetensors::read_json_file(dir + "/unet/config.json");
  s.vae = safetensors::read_json_file(dir + "/vae/config.json");
  s.text_encoder = safetensors::read_json_file(dir + "/text_encoder/config.json");
  s.scheduler = read_config_json(dir + "/scheduler/scheduler_config.json");
  s.tokenizer_dir = dir + "/tokenizer";
  if (std::filesystem::exists(dir + "/model_index.json")) {
    nlohmann::json index = safetensors::read_json_file(dir + "/model_index.json");
    if (index.is_object() && has_component(index, "text_encoder_2")) {
      s.text_encoder_2 = safetensors::read_json_file(dir + "/text_encoder_2/config.json");
      s.tokenizer_2_dir = dir + "/tokenizer_2";
      s.force_zeros_for_empty_prompt = force_zeros(index);
    }
  }
  return s;
}

Pipeline Pipeline::random(const PipelineSpec& spec, const LoadOptions& options) {
  Device& dev = options.device ? *options.device : Registry::global().cpu();
  Parts parts;
  parts.schedule = NoiseSchedule::from_json(options.scheduler_config.is_null() ? spec.scheduler : options.scheduler_config);
  parts.tokenizer = std::make_unique<ClipTokenizer>(ClipTokenizer::from_folder(spec.tokenizer_dir));
  parts.text = Weights::random(spec.text_encoder, spec.seed + 1, dev, options.dtype);
  if (!spec.text_encoder_2.is_null()) {
    parts.tokenizer2 = std::make_unique<ClipTokenizer>(ClipTokenizer::from_folder(spec.tokenizer_2_dir));
    parts.text2 = Weights::random(spec.text_encoder_2, spec.seed + 4, dev, options.dtype);
    parts.force_zeros_for_empty_prompt = spec.force_zeros_for_empty_prompt;
  }
  parts.unet = Weights::random(spec.unet, spec.seed + 2, dev, options.dtype);
  parts.vae = Weights::random(spec.vae, spec.seed + 3, dev, options.dtype);
  return PipelineAssembler::make(assemble(dev, std::move(parts), options), options);
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

PipelineSpec PipelineSpec::sdxl(const std::string& tokenizer_dir, const std::string& tokenizer_2_dir) {
  PipelineSpec s;
  s.tokenizer_dir = tokenizer_dir;
  s.tokenizer_2_dir = tokenizer_2_dir;
  s.force_zeros_for_empty_prompt = true;
  s.unet = {{"act_fn", "silu"},
            {"addition_embed_type", "text_time"},
            {"addition_embed_type_num_heads", 64},
            {"addition_time_embed_dim", 256},
            {"attention_head_dim", {5, 10, 20}},
            {"block_out_channels", {320, 640, 1280}},
            {"center_input_sample", false},
            {"cross_attention_dim", 2048},
            {"down_block_types", {"DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"}},
            {"downsample_padding", 1},
            {"flip_sin_to_cos", true},
            {"freq_shift", 0},
            {"in_channels", 4},
            {"layers_per_block", 2},
            {"mid_block_scale_factor", 1},
            {"norm_eps", 1e-05},
            {"norm_num_groups", 32},
            {"out_channels", 4},
            {"projection_class_embeddings_input_dim", 2816},
            {"sample_size", 128},
            {"transformer_layers_per_block", {1, 2, 10}},
            {"up_block_types", {"CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"}},
            {"use_linear_projection", true}};
  s.vae = {{"act_fn", "silu"},
           {"block_out_channels", {128, 256, 512, 512}},
           {"down_block_types", {"DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"}},
           {"force_upcast", true},
           {"in_channels", 3},
           {"latent_channels", 4},
           {"layers_per_block", 2},
           {"norm_num_groups", 32},
           {"out_channels", 3},
           {"sample_size", 1024},
           {"scaling_factor", 0.13025},
           {"up_block_types", {"UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D"}}};
  s.text_encoder = {{"architectures", {"CLIPTextModel"}}, {"hidden_act", "quick_gelu"}, {"hidden_size", 768},
                    {"intermediate_size", 3072}, {"max_position_embeddings", 77}, {"num_attention_heads", 12},
                    {"num_hidden_layers", 12}, {"vocab_size", 49408}, {"layer_norm_eps", 1e-05},
                    {"projection_dim", 768}};
  s.text_encoder_2 = {{"architectures", {"CLIPTextModelWithProjection"}}, {"hidden_act", "gelu"},
                      {"hidden_size", 1280}, {"intermediate_size", 5120}, {"max_position_embeddings", 77},
                      {"num_attention_heads", 20}, {"num_hidden_layers", 32}, {"vocab_size", 49408},
                      {"layer_norm_eps", 1e-05}, {"projection_dim", 1280}};
  s.scheduler = {{"beta_end", 0.012}, {"beta_schedule", "scaled_linear"}, {"beta_start", 0.00085},
                 {"interpolation_type", "linear"}, {"num_train_timesteps", 1000}, {"prediction_type", "epsilon"},
                 {"set_alpha_to_one", false}, {"steps_offset", 1}, {"timestep_spacing", "leading"},
                 {"use_karras_sigmas", false}};
  return s;
}

int64_t Pipeline::latent_scale() const { return impl_->vae->config().scale(); }
int64_t Pipeline::latent_channels() const { return impl_->vae->config().latent_channels; }
const ModelLimits& Pipeline::limits() const { return impl_->limits; }
const NoiseSchedule& Pipeline::noise_schedule() const { return impl_->schedule; }
Device& Pipeline::device() const { return *impl_->device; }

bool Pipeline::is_sdxl() const { return impl_->text2 != nullptr; }

Pipeline::PromptEmbeddings Pipeline::embed_prompt(const std::string& prompt) const {
  const Impl& m = *impl_;
  if (m.prompt_cache_size > 0) {
    std::lock_guard<std::mutex> lock(m.prompt_mutex);
    for (auto it = m.prompt_cache.begin(); it != m.prompt_cache.end(); ++it) {
      if (it->first != prompt) continue;
      m.prompt_cache.splice(m.prompt_cache.begin(), m.prompt_cache, it);  // most recently used first
      return m.prompt_cache.front().second;
    }
  }
  PromptEmbeddings e = encode_prompt_uncached(prompt);
  if (m.prompt_cache_size > 0) {
    std::lock_guard<std::mutex> lock(m.prompt_mutex);
    m.prompt_cache.emplace_front(prompt, e);
    if (m.prompt_cache.size() > m.prompt_cache_size) m.prompt_cache.pop_back();
  }
  return e;
}

// The text encoders on one prompt (embed_prompt without the cache). The tensors returned are never written
// afterwards (the denoising loop concatenates copies), so cached ones can be handed out again.
Pipeline::PromptEmbeddings Pipeline::encode_prompt_uncached(const std::string& prompt) const {
  const Impl& m = *impl_;
  PromptEmbeddings e;
  ClipTextOutput out1 =
      m.text->forward({m.tokenizer->encode_padded(prompt, (int)m.text->config().max_positions)});
  if (!m.text2) {
    e.context = out1.last_hidden;
    return e;
  }
  // SDXL: both encoders' penultimate hidden states side by side; the pooled embedding of the second.
  ClipTextOutput out2 =
      m.text2->forward({m.tokenizer2->encode_padded(prompt, (int)m.text2->config().max_positions)});
  RBEE_CHECK(out1.penultimate.dim(1) == out2.penultimate.dim(1),
             "sd pipeline: the text encoders give {} and {} tokens (max_position_embeddings differ)",
             out1.penultimate.dim(1), out2.penultimate.dim(1));
  e.context = nn::concat(out1.penultimate, out2.penultimate, 2);
  e.pooled = out2.pooled;
  return e;
}

Tensor Pipeline::encode_prompt(const std::string& prompt) const { return embed_prompt(prompt).context; }

std::optional<RequestProblem> check_request(const GenerateRequest& r, const ModelLimits& l) {
  auto problem = [](const char* field, std::string message) {
    return std::optional<RequestProblem>(RequestProblem{field, std::move(message)});
  };
  if (r.steps < 1 || r.steps > 150) return problem("steps", fmt::format("{} is outside [1, 150]", r.steps));
  if (r.batch < 1 || r.batch > kMaxBatch)
    return problem("batch", fmt::format("{} is outside [1, {}]", r.batch, kMaxBatch));
  if (r.batch > 1 && (r.init_image.defined() || r.mask.defined() || r.initial_noise.defined()))
    return problem("batch", fmt::format("{} images at once are for text-to-image requests (no init_image, mask or "
                                        "initial_noise)",
                                        r.batch));
  const int most = max_steps(r.sampler, l.schedule);
  if (r.steps > most)
    return problem("steps", fmt::format("{} is more than sampler {} can place with this model's scheduler config "
                                        "(at most {})",
                                        r.steps, diffusion_scheduler_kind_name(r.sampler), most));
  if (r.noise == NoiseKind::Torch && r.sampler == DiffusionSchedulerKind::DpmPPSde)
    return problem("noise", "torch cannot reproduce dpmpp_sde: diffusers draws its noise from torchsde's Brownian "
                            "tree; use rbee noise with this sampler");
  if (std::string why = unsupported_reason(r.sampler, l.schedule); !why.empty())
    return problem("sampler",
                   fmt::format("{} cannot run this model: {}", diffusion_scheduler_kind_name(r.sampler), why));
  if (!std::isfinite(r.guidance_scale) || r.guidance_scale < 0 || r.guidance_scale > 20)
    return problem("guidance_scale", fmt::format("{} is outside [0, 20]", r.guidance_scale));
  for (auto [field, v] : {std::pair{"width", r.width}, std::pair{"height", r.height}}) {
    // diffusers' pipelines ask for multiples of 8; the latent grid needs multiples of the VAE's scale.
    if (v <= 0 || v > 2048 || v % 8 != 0 || v % l.latent_scale != 0)
      return problem(field, l.latent_scale == 8 || 8 % l.latent_scale == 0
                                ? fmt::format("{} must be a positive multiple of 8 up to 2048", v)
                                : fmt::format("{} must be a positive multiple of 8 and of {} (the model's latent "
                                              "scale) up to 2048", v, l.latent_scale));
  }
  const Shape lshape{1, l.latent_channels, r.height / l.latent_scale, r.width / l.latent_scale};
  if (r.initial_noise.defined() && (r.initial_noise.shape() != lshape || r.initial_noise.dtype() != DType::F32))
    return problem("initial_noise", fmt::format("must be f32 {}, got {}", lshape.to_string(),
                                                r.initial_noise.to_string()));
  if (r.mask.defined() && !r.init_image.defined()) return problem("mask", "needs init_image");
  if (r.init_image.defined()) {
    if (r.init_image.shape() != Shape({1, 3, r.height, r.width}))
      return problem("init_image", fmt::format("must be [1, 3, {}, {}], got {}", r.height, r.width,
                                               r.init_image.shape().to_string()));
    if (!std::isfinite(r.strength) || r.strength <= 0 || r.strength > 1)
      return problem("strength", fmt::format("{} is outside (0, 1]", r.strength));
    if ((int)(r.steps * r.strength) < 1)
      return problem("strength", fmt::format("{} with {} steps runs no denoising step (steps * strength < 1)",
                                             r.strength, r.steps));
  }
  if (r.mask.defined() && r.mask.shape() != Shape({1, 1, r.height, r.width}))
    return problem("mask", fmt::format("must be [1, 1, {}, {}], got {}", r.height, r.width, r.mask.shape().to_string()));
  if (l.sdxl) {
    for (auto [field, v] : {std::pair{"original_width", r.original_width}, std::pair{"original_height", r.original_height},
                            std::pair{"crop_left", r.crop_left}, std::pair{"crop_top", r.crop_top},
                            std::pair{"target_width", r.target_width}, std::pair{"target_height", r.target_height}})
      if (v < 0 || v > 16384) return problem(field, fmt::format("{} is outside [0, 16384]", v));
  }
  return std::nullopt;
}

NoiseKind noise_kind_from_name(std::string_view name) {
  if (name == "rbee") return NoiseKind::Rbee;
  if (name == "torch") return NoiseKind::Torch;
  RBEE_THROW(ErrorCode::InvalidArgument, "noise: unknown generator '{}' (rbee, torch)", name);
}

const char* noise_kind_name(NoiseKind kind) { return kind == NoiseKind::Torch ? "torch" : "rbee"; }

namespace {
// Stream ids of the seeded noise: the initial latent, then one stream per scheduler step.
constexpr uint64_t kInitialNoiseStream = 0;
constexpr uint64_t kStepNoiseStream = 1000;

// The noise of one run: draws in the order the pipeline asks (initial latent, then the steps that inject noise).
class NoiseSource {
 public:
  NoiseSource(NoiseKind kind, uint64_t seed) : kind_(kind), seed_(seed), torch_(seed) {}
  Tensor initial(const Shape& shape, Device& dev) { return draw(shape, kInitialNoiseStream, dev); }
  Tensor step(const Shape& shape, int i, Device& dev) { return draw(shape, kStepNoiseStream + (uint64_t)i, dev); }

 private:
  Tensor draw(const Shape& shape, uint64_t stream, Device& dev) {
    if (kind_ == NoiseKind::Rbee) return randn(shape, seed_, stream, dev);
    return Tensor::from_vector(torch_.randn(shape.numel()), shape, dev);
  }
  NoiseKind kind_;
  uint64_t seed_;
  TorchGenerator torch_;
};
}  // namespace

Pipeline::GraphCounts Pipeline::unet_graph_counts() const {
  std::lock_guard<std::mutex> lock(impl_->graph_mutex);
  if (!impl_->graph) return {};
  return {impl_->graph->captures(), impl_->graph->replays()};
}

double Pipeline::prepare(int width, int height) const {
  const auto t0 = std::chrono::steady_clock::now();
  GenerateRequest r;
  r.width = width;
  r.height = height;
  r.steps = 1;
  (void)decode(generate_latents(r));
  impl_->device->synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double Pipeline::load_prepare_seconds() const { return impl_->load_prepare_seconds; }

double Pipeline::unet_step_flops() const { return impl_->unet_step_flops.load(); }

bool Pipeline::can_share_batch(const GenerateRequest& a, const GenerateRequest& b) {
  auto text_to_image = [](const GenerateRequest& r) {
    return !r.init_image.defined() && !r.mask.defined() && !r.initial_noise.defined();
  };
  return text_to_image(a) && text_to_image(b) && a.width == b.width && a.height == b.height && a.steps == b.steps &&
         a.sampler == b.sampler && a.guidance_scale == b.guidance_scale && a.noise == b.noise;
}

Tensor Pipeline::generate_latents(const GenerateRequest& r) const {
  std::vector<bool> live;
  return group_latents({&r}, live);
}

Tensor Pipeline::group_latents(const std::vector<const GenerateRequest*>& group, std::vector<bool>& live) const {
  const Impl& m = *impl_;
  Device& dev = *m.device;
  const int64_t f = latent_scale();
  RBEE_CHECK(!group.empty(), "sd pipeline: a group of no requests");
  const GenerateRequest& r = *group.front();  // size, steps, sampler, guidance and noise of every member
  int64_t B = 0;  // UNet rows per guidance half: every member's images
  for (const GenerateRequest* g : group) {
    if (auto p = check_request(*g, m.limits))
      RBEE_THROW(ErrorCode::InvalidArgument, "sd request: {}: {}", p->field, p->message);
    RBEE_CHECK(g == &r || can_share_batch(r, *g),
               "sd pipeline: a group's requests must be text-to-image with the same width, height, steps, sampler, "
               "guidance_scale and noise");
    B += g->batch;
  }
  RBEE_CHECK(B <= kMaxBatch, "sd pipeline: a group of {} images (at most {})", B, kMaxBatch);
  live.assign(group.size(), true);
  const Shape lshape{1, latent_channels(), r.height / f, r.width / f};
  const bool img2img = r.init_image.defined();
  const bool inpaint = r.mask.defined();
  // One noise source per image, seeded seed + i of its request: image i of a batch (and of a group) is the image of
  // a single request with that seed. rows[k]: the request of UNet row k (of each guidance half).
  std::deque<NoiseSource> sources;
  std::vector<size_t> rows;
  for (size_t j = 0; j < group.size(); ++j) {
    for (int64_t i = 0; i < group[j]->batch; ++i) {
      sources.emplace_back(r.noise, group[j]->seed + (uint64_t)i);
      rows.push_back(j);
    }
  }
  NoiseSource& source = sources[0];
  // [B, ...] from one [1, ...] tensor per image (`part(i)`), or that tensor itself for one image.
  auto stack = [&](auto&& part) -> Tensor {
    if (B == 1) return part(0);
    Tensor first = part(0);
    Shape shape = first.shape();
    shape[0] = B;
    Tensor out = Tensor::empty(shape, first.dtype(), dev);
    out.narrow(0, 0, 1).copy_from(first);
    for (int64_t i = 1; i < B; ++i) out.narrow(0, i, 1).copy_from(part(i));
    return out;
  };
  auto repeat = [&](const Tensor& t) { return B == 1 ? t : stack([&](int64_t) { return t; }); };
  Tensor init_latents;
  if (img2img) {
    if (r.noise == NoiseKind::Torch) {
      // diffusers samples the posterior with the generator before it draws the noise: mean + std * eps.
      std::vector<float> mom = m.vae->encode_moments(r.init_image.to(dev)).contiguous().to_vector<float>();
      std::vector<float> eps = source.initial(lshape, dev).to_vector<float>();
      const size_t n = eps.size();
      const double scale = m.vae->config().scaling_factor;
      std::vector<float> z(n);
      for (size_t k = 0; k < n; ++k) {
        const float logvar = std::clamp(mom[n + k], -30.0f, 20.0f);
        z[k] = (float)(scale * (double)(mom[k] + std::exp(0.5f * logvar) * eps[k]));
      }
      init_latents = Tensor::from_vector(z, lshape, dev);
    } else {
      init_latents = encode_image(r.init_image);  // the posterior mean (deterministic)
    }
  }
  Tensor noise = r.initial_noise.defined() ? r.initial_noise.to(dev)
                                           : stack([&](int64_t i) { return sources[(size_t)i].initial(lshape, dev); });
  // diffusers' inpaint pipeline also encodes the masked image with the generator (its latents feed 9-channel
  // UNets only): one draw that keeps the order of the step noise.
  if (inpaint && r.noise == NoiseKind::Torch) (void)source.initial(lshape, dev);

  const bool cfg = r.guidance_scale > 1.0;
  const bool xl = is_sdxl();
  // Each member's prompt (and negative prompt) embeddings, repeated over its images: [B, ...] row k of request
  // rows[k]. One request keeps the single request's tensors (repeat of one embedding).
  std::vector<PromptEmbeddings> conds, negs;
  for (const GenerateRequest* g : group) {
    conds.push_back(embed_prompt(g->prompt));
    if (!cfg) continue;
    PromptEmbeddings neg;
    if (xl && m.force_zeros_for_empty_prompt && g->negative_prompt.empty()) {
      // diffusers' SDXL: no negative prompt -> all-zero negative context and pooled embedding
      neg.context = ops::zeros(conds.back().context.shape(), DType::F32, dev);
      neg.pooled = ops::zeros(conds.back().pooled.shape(), DType::F32, dev);
    } else {
      neg = embed_prompt(g->negative_prompt);
    }
    negs.push_back(neg);
  }
  auto per_row = [&](const std::vector<PromptEmbeddings>& e, Tensor PromptEmbeddings::*field) {
    return group.size() == 1 ? repeat(e[0].*field) : stack([&](int64_t k) { return e[rows[(size_t)k]].*field; });
  };
  Tensor context = per_row(conds, &PromptEmbeddings::context);
  Tensor pooled = xl ? per_row(conds, &PromptEmbeddings::pooled) : Tensor();
  UNet::AddedConditions added;
  if (cfg) {
    context = nn::concat(per_row(negs, &PromptEmbeddings::context), context, 0);
    if (xl) pooled = nn::concat(per_row(negs, &PromptEmbeddings::pooled), pooled, 0);
  }
  if (xl) {
    // time_ids [orig_h, orig_w, crop_top, crop_left, target_h, target_w] of each row's request, the same for the
    // negative rows
    auto or_size = [](int v, int fallback) { return (float)(v > 0 ? v : fallback); };
    std::vector<float> ids;
    for (int half = 0; half < (cfg ? 2 : 1); ++half) {
      for (size_t j : rows) {
        const GenerateRequest& g = *group[j];
        ids.insert(ids.end(), {or_size(g.original_height, g.height), or_size(g.original_width, g.width),
                               (float)g.crop_top, (float)g.crop_left, or_size(g.target_height, g.height),
                               or_size(g.target_width, g.width)});
      }
    }
    added.time_ids = Tensor::from_vector(ids, {(int64_t)ids.size() / 6, 6}, dev);
    added.text_embeds = pooled;
  }

  auto sched = make_diffusion_scheduler(r.sampler, m.schedule);
  sched->set_timesteps(r.steps);
  // UNet evaluations of the run: r.steps, or more for samplers that evaluate twice per step (Heun: 2n - 1; PNDM:
  // n + 1); progress counts them, as diffusers' progress bar does.
  const int total = sched->steps();
  int start = 0;
  Tensor latents, latent_mask;
  if (img2img) {
    // diffusers: init_timestep = min(int(steps * strength), steps), the run starts at timestep index
    // (steps - init_timestep) * order.
    const int init_steps = std::min((int)(r.steps * r.strength), r.steps);
    start = (r.steps - init_steps) * sched->order();
    RBEE_CHECK(start < total, "sd request: strength {} with {} steps leaves no step to run", r.strength, r.steps);
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

  std::unique_lock<std::mutex> graph_lock(m.graph_mutex, std::defer_lock);
  UNetStepGraph* graph = nullptr;
  if (m.unet_graphs && graph_lock.try_lock()) {
    if (!m.graph) m.graph = std::make_unique<UNetStepGraph>(*m.unet, dev);
    graph = m.graph.get();
  }
  for (int i = start; i < total; ++i) {
    const double t = sched->timesteps()[(size_t)i];
    Tensor in = sched->scale_model_input(latents, i);
    if (cfg) in = nn::concat(in, in, 0);
    Tensor pred;
    {
      FlopCounter step_flops;
      pred = graph ? graph->run(in, t, context, added)
                   : xl ? m.unet->forward(in, t, context, added) : m.unet->forward(in, t, context);
      if (step_flops.total() > 0) m.unet_step_flops.store(step_flops.total());  // 0: a replayed graph
    }
    if (cfg) {
      Tensor uncond = pred.narrow(0, 0, B), text = pred.narrow(0, B, B);
      pred = ops::add(uncond, ops::affine(ops::sub(text, uncond), r.guidance_scale, 0.0));
    }
    Tensor step_noise;
    if (sched->needs_noise_at(i))
      step_noise = stack([&](int64_t b) { return sources[(size_t)b].step(lshape, i, dev); });
    latents = sched->step(pred, i, latents, step_noise);
    if (inpaint) {  // keep the unmasked region on the noised source trajectory
      Tensor proper = i + 1 < total ? sched->add_noise(init_latents, noise, i + 1) : init_latents;
      latents = ops::add(ops::mul(latent_mask, latents), ops::mul(ops::affine(latent_mask, -1.0, 1.0), proper));
    }
    // Each member that has not cancelled hears of the step; the run stops when none is left.
    bool any = false;
    for (size_t j = 0; j < group.size(); ++j) {
      if (live[j] && group[j]->on_step && !group[j]->on_step(i - start + 1, total - start)) live[j] = false;
      any = any || live[j];
    }
    if (!any) RBEE_CHECK_CODE(false, ErrorCode::Cancelled, "sd request: cancelled after step {}", i + 1);
    for (size_t j = 0, row = 0; j < group.size(); row += (size_t)group[j]->batch, ++j) {
      if (!live[j] || !group[j]->on_latents) continue;
      group[j]->on_latents(i - start + 1, total - start,
                           group.size() == 1 ? latents : latents.narrow(0, (int64_t)row, group[j]->batch));
    }
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

std::vector<std::vector<Image>> Pipeline::generate_group(const std::vector<GenerateRequest>& requests) const {
  std::vector<const GenerateRequest*> group;
  for (const GenerateRequest& r : requests) group.push_back(&r);
  std::vector<bool> live;
  const Tensor latents = group_latents(group, live);
  // Each member's rows decoded as its own batch: the same VAE call as the request alone.
  std::vector<std::vector<Image>> out(requests.size());
  int64_t row = 0;
  for (size_t j = 0; j < requests.size(); row += requests[j].batch, ++j) {
    if (!live[j]) continue;
    Tensor images = decode(latents.narrow(0, row, requests[j].batch));
    for (int64_t i = 0; i < images.dim(0); ++i) out[j].push_back(to_image(images.narrow(0, i, 1)));
  }
  return out;
}

std::vector<Image> Pipeline::generate_batch(const GenerateRequest& r) const {
  Tensor images = decode(generate_latents(r));
  std::vector<Image> out;
  for (int64_t i = 0; i < images.dim(0); ++i) out.push_back(to_image(images.narrow(0, i, 1)));
  return out;
}

Image Pipeline::generate(const GenerateRequest& r) const {
  RBEE_CHECK(r.batch == 1, "sd pipeline: generate() makes one image; use generate_batch() for batch {}", r.batch);
  Tensor image = decode(generate_latents(r));
  std::vector<float> v = image.to(DType::F32).contiguous().to_vector<float>();
  int64_t bad = 0;
  for (float x : v) bad += !std::isfinite(x);
  if (bad > 0)
    log::warn("sd pipeline: the image holds {} NaN or infinite values of {} (written as black): the model's weights "
              "or an f16 overflow; try f32 (without --use-f16)",
              bad, (int64_t)v.size());
  return to_image(image);
}

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
      const float raw = v[(size_t)(c * H * W + p)];
      const float x = std::isfinite(raw) ? std::clamp(raw, 0.0f, 1.0f) : 0.0f;  // NaN: black (as numpy's cast)
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
