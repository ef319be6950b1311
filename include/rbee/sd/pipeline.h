// Stable Diffusion pipelines on one device: txt2img, img2img (strength) and inpaint (mask), with classifier-free
// guidance, for SD 1.x, 2.x and SDXL (base, and SDXL-Turbo) models in the diffusers folder layout
// (model_index.json, scheduler/, tokenizer/, text_encoder/, unet/, vae/; SDXL adds tokenizer_2/ and
// text_encoder_2/).
//
// SDXL as diffusers' StableDiffusionXLPipeline: the context is both encoders' penultimate hidden states
// concatenated, the UNet also takes the second encoder's pooled projected embedding and the size conditioning
// (GenerateRequest's original/crop/target fields), and an empty negative prompt gives an all-zero negative
// embedding when model_index.json says force_zeros_for_empty_prompt (the default). SDXL-Turbo: sampler
// EulerAncestral, 1-4 steps, guidance_scale 0 (<= 1 turns guidance off); its scheduler config's "trailing"
// timestep spacing is honoured.
//
// Determinism: the initial latent noise and every noise a scheduler injects come from a counter-based RNG keyed by
// the seed (rbee::sd::randn), drawn on the host, so one seed gives the same image again on the same backend (and
// the same noise on every backend). Tests pass explicit initial noise to compare with diffusers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "rbee/core/tensor.h"
#include "rbee/sd/diffusion_scheduler.h"

namespace rbee {
class Device;
}

namespace rbee::sd {

struct PipelineAssembler;

struct LoadOptions {
  Device* device = nullptr;  // nullptr: the CPU
  // Weights in this dtype. On GPUs a 16-bit dtype also makes the UNet's and the VAE's activations 16-bit (sums in
  // f32 inside the kernels, as diffusers in fp16); the text encoder, schedulers and latents stay F32. On the CPU
  // only linear-layer weights take it (activations and convolutions stay F32).
  DType dtype = DType::F32;
  bool load_vae_encoder = true;  // img2img and inpaint need it
  // diffusers' `variant`: read <name>.<variant>.safetensors (e.g. "fp16", as the official SD 1.5 and SDXL folders
  // hold beside the f32 files) instead of the plain weights files; empty: the plain ones.
  std::string variant;
  // When set: scheduler_config.json contents used instead of the model's own (e.g. another timestep_spacing).
  nlohmann::json scheduler_config;
  // Text-encoder outputs of this many most recently used prompts are kept (on the device) and reused when a
  // prompt or negative prompt repeats (a worker's repeated prompts skip the text encoders); 0: encode every time.
  int prompt_cache = 8;
  // On devices with graphs (CUDA, HIP): each request's UNet step is recorded once as a device graph and replayed
  // for the other steps (the first step of a new latent size runs eagerly, the second records); the same numbers
  // as eager steps. RBEE_SD_UNET_GRAPH=0 in the environment turns it off as well.
  bool unet_graphs = true;
  // On devices other than the CPU: load ends with prepare() at the model's default size (ModelLimits::default_side),
  // so the vendor libraries' per-shape plans and the linear layers' algorithm choices of that size are made before
  // the first request instead of inside it. Off: they are made by the first request of each size.
  bool prepare = true;
};

// Where the seeded noise comes from. Rbee: a counter-based generator (randn below), the same on every backend and
// independent of the order of draws. Torch: PyTorch's CPU generator seeded with `seed` and drawn in diffusers'
// order (the initial latent, then each step that injects noise), so an image equals the one diffusers makes with
// generator=torch.Generator().manual_seed(seed) (seeds are taken modulo 2^32, as torch does).
enum class NoiseKind { Rbee, Torch };
// "rbee", "torch"; Error(InvalidArgument) otherwise.
NoiseKind noise_kind_from_name(std::string_view name);
const char* noise_kind_name(NoiseKind kind);

// The most images one request makes at once (GenerateRequest::batch).
constexpr int kMaxBatch = 16;

struct GenerateRequest {
  std::string prompt;
  std::string negative_prompt;
  int steps = 20;                // 1..150, and at most what the sampler can place (LCM: original_inference_steps)
  double guidance_scale = 7.5;   // 0..20; <= 1 turns classifier-free guidance off
  uint64_t seed = 0;
  NoiseKind noise = NoiseKind::Rbee;
  // Images made together (1..kMaxBatch, text-to-image only): one UNet batch of 2 x batch rows with guidance. Image i
  // uses seed + i and equals the image of a single request with that seed (up to the GPU's summation order).
  int batch = 1;
  // Multiples of the latent scale (8 for SD), up to 2048. Sides that are not multiples of 8 x 2^(UNet levels - 1)
  // work as in diffusers: the UNet upsamples to the size of each skip connection.
  int width = 512, height = 512;
  DiffusionSchedulerKind sampler = DiffusionSchedulerKind::Euler;
  // Optional standard-normal initial latent [1, latent_channels, height / f, width / f]; replaces the seeded draw.
  Tensor initial_noise;
  // img2img / inpaint: the source image [1, 3, height, width] with values in [-1, 1], and how much of the schedule
  // to run (1 = from pure noise; 0.3 = the last 30% of the steps).
  Tensor init_image;
  double strength = 0.8;  // diffusers' img2img default; its inpaint default is 1.0 (callers choose)
  // inpaint: [1, 1, height, width] in [0, 1]; 1 = repaint, 0 = keep init_image.
  Tensor mask;
  // Called after each step with (step done, total steps of this run); return false to cancel (Error(Cancelled)).
  std::function<bool(int, int)> on_step;
  // SDXL size conditioning (the UNet's time_ids), in pixels, 0..16384; ignored by SD 1.x / 2.x. 0 for
  // original_* and target_* means the request's height / width (diffusers' defaults); crop is (top, left).
  int original_width = 0, original_height = 0;
  int crop_left = 0, crop_top = 0;
  int target_width = 0, target_height = 0;
  // Called after each step, after on_step (when it did not cancel), with (step done, total steps of this run,
  // the latents x_t the loop holds then [batch, latent, h, w]); decode() turns them into preview images.
  std::function<void(int, int, const Tensor&)> on_latents;
};

// What a model allows, known from its configs alone (no weights): enough to check a request before any work.
struct ModelLimits {
  int64_t latent_scale = 8;     // VAE: 2^(levels - 1)
  int64_t latent_channels = 4;
  NoiseSchedule schedule;
  bool sdxl = false;
  // unet/config.json sample_size x latent_scale: the side diffusers' pipelines default to.
  int64_t default_side = 512;
};

// A request field that cannot work with a model: `field` is the request's name for it (steps, guidance_scale,
// width, height, sampler, strength, init_image, mask, initial_noise, original_width, ...).
struct RequestProblem {
  std::string field, message;
};
// The first problem of `r` against `limits`, found without any work; nullopt when it can run. Tensors that are
// undefined (init_image, mask, initial_noise) are not checked.
std::optional<RequestProblem> check_request(const GenerateRequest& r, const ModelLimits& limits);

// An RGB image, 8 bits per channel, row-major.
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
};

// An architecture without weights (random-weight benchmarks, single-file checkpoints): diffusers component configs (the contents of unet/config.json,
// vae/config.json, text_encoder/config.json, scheduler/scheduler_config.json) and a CLIP tokenizer folder whose ids
// fit the text encoder's vocab_size.
struct PipelineSpec {
  nlohmann::json unet, vae, text_encoder, scheduler;
  std::string tokenizer_dir;
  uint64_t seed = 0;
  // SDXL: the second text encoder's config (text_encoder_2/config.json, a CLIPTextModelWithProjection) and its
  // tokenizer folder; null / empty for SD 1.x / 2.x. force_zeros_for_empty_prompt as in model_index.json.
  nlohmann::json text_encoder_2;
  std::string tokenizer_2_dir;
  bool force_zeros_for_empty_prompt = true;
  // The full-size SD 1.5 architecture (runwayml/stable-diffusion-v1-5's configs).
  static PipelineSpec sd15(const std::string& tokenizer_dir);
  // The full-size SDXL base architecture (stabilityai/stable-diffusion-xl-base-1.0's configs) with the two
  // tokenizer folders given (ids must fit vocab_size 49408).
  static PipelineSpec sdxl(const std::string& tokenizer_dir, const std::string& tokenizer_2_dir);
  // The configs and tokenizers of a diffusers folder (e.g. to read a single-file checkpoint of that architecture).
  static PipelineSpec from_diffusers_folder(const std::string& dir);
};

class Pipeline {
 public:
  // Error(NotFound) / Error(Io) for missing or malformed parts, Error(InvalidArgument) for tensors of the wrong
  // shape, Error(Unsupported) for model features not implemented (SDXL refiner, inpainting UNets).
  static Pipeline load(const std::string& diffusers_dir, const LoadOptions& options = {});

  // An original single-file SD 1.x checkpoint (.safetensors with model.diffusion_model.*, first_stage_model.*,
  // cond_stage_model.transformer.* names) of the architecture `spec` describes. An SDXL spec (text_encoder_2 set)
  // reads an SDXL single file (conditioner.embedders.0.transformer.* for CLIP-L, conditioner.embedders.1.model.*
  // OpenCLIP names for bigG).
  static Pipeline load_single_file(const std::string& file, const PipelineSpec& spec, const LoadOptions& options = {});
  // The architecture of `spec` with random weights (rbee::sd::Weights::random), no checkpoint needed.
  static Pipeline random(const PipelineSpec& spec, const LoadOptions& options = {});

  // Text embeddings [1, 77, cross_attention_dim] of one prompt (SDXL: both encoders' penultimate states).
  Tensor encode_prompt(const std::string& prompt) const;
  // context as encode_prompt; pooled [1, P]: SDXL's second encoder's projected pooled output (undefined for
  // SD 1.x / 2.x).
  struct PromptEmbeddings {
    Tensor context, pooled;
  };
  // Through the prompt cache (LoadOptions::prompt_cache): a repeated prompt returns the tensors computed before.
  PromptEmbeddings embed_prompt(const std::string& prompt) const;
  // The text encoders run on `prompt`, the cache neither read nor filled.
  PromptEmbeddings encode_prompt_uncached(const std::string& prompt) const;
  // True for SDXL pipelines (two text encoders, text_time UNet).
  bool is_sdxl() const;
  // The final latents [batch, latent, h, w] (before dividing by the VAE scaling factor).
  Tensor generate_latents(const GenerateRequest& request) const;
  // Image [1, 3, H, W] in [-1, 1] -> latent [1, latent, H / f, W / f] (the VAE posterior mean, times the scaling
  // factor). diffusers samples the posterior instead; SD's posterior std is small, and the mean is deterministic.
  Tensor encode_image(const Tensor& image) const;
  // Latents -> image tensor [1, 3, H, W] in [0, 1].
  Tensor decode(const Tensor& latents) const;
  // Full request -> RGB image (batch 1).
  Image generate(const GenerateRequest& request) const;
  // Full request -> its `batch` RGB images, image i from seed + i.
  std::vector<Image> generate_batch(const GenerateRequest& request) const;
  // Whether two requests can share one UNet batch (generate_group): both text-to-image (no init_image, mask or
  // initial_noise) with the same width, height, steps, sampler, guidance_scale and noise kind. Prompts, negative
  // prompts, seeds, batch sizes, callbacks and SDXL size conditioning may differ.
  static bool can_share_batch(const GenerateRequest& a, const GenerateRequest& b);
  // Several requests (each can_share_batch with the first; together at most kMaxBatch images) as one UNet batch:
  // the rows of each guidance half are the requests' images in order. Entry j holds request j's `batch` images,
  // each equal to the image of request j run alone (seed_j + i; bit for bit on the CPU, up to the summation order
  // of a different row count on GPUs). Request j's on_step is called after every step until it returns false; from
  // then on that request is dropped (entry j stays empty) while the others go on; Error(Cancelled) once every
  // request has returned false. on_latents gets the request's own rows [batch, latent, h, w].
  std::vector<std::vector<Image>> generate_group(const std::vector<GenerateRequest>& requests) const;
  // Image tensor [1, 3, H, W] in [0, 1] -> RGB8 (rounded, clamped).
  static Image to_image(const Tensor& image01);
  // RGB8 -> [1, 3, H, W] in [-1, 1] on the pipeline's device (for init_image).
  Tensor from_image(const Image& image) const;

  // UNet step graphs recorded and replayed so far (LoadOptions::unet_graphs; both 0 where steps ran eagerly).
  struct GraphCounts {
    int captures = 0, replays = 0;
  };
  GraphCounts unet_graph_counts() const;

  // One text-to-image request of `steps` 1 at width x height (empty prompt, default guidance, batch 1), its image
  // discarded: every per-shape plan of that size (cuDNN's convolution and attention plans, the linear layers'
  // algorithm choices, the caching allocator's blocks, the UNet step graph's eager first step) is made now, so a
  // request of that size afterwards starts with them ready. Returns the seconds it took (device synchronized).
  double prepare(int width, int height) const;
  // Seconds the load's prepare() took (LoadOptions::prepare), 0 when it did not run.
  double load_prepare_seconds() const;
  // Floating-point operations of the last UNet step that ran its layers on the host (eager, or recorded into a
  // step graph; replays are not counted): linear layers, convolutions and attention (sd/flop_count.h), every row of
  // the UNet batch (both guidance halves); 0 before the first such step.
  double unet_step_flops() const;

  int64_t latent_scale() const;
  int64_t latent_channels() const;
  const ModelLimits& limits() const;
  const NoiseSchedule& noise_schedule() const;
  Device& device() const;

  struct Impl;

 private:
  friend struct PipelineAssembler;
  // The denoising loop of generate_latents and generate_group; live[j] false once member j's on_step said stop.
  Tensor group_latents(const std::vector<const GenerateRequest*>& group, std::vector<bool>& live) const;
  std::shared_ptr<const Impl> impl_;
};

// Standard-normal F32 tensor on `device`, a pure function of (seed, stream, index): counter-based SplitMix64 hashing
// then Box-Muller, computed on the host.
Tensor randn(const Shape& shape, uint64_t seed, uint64_t stream, Device& device);

}  // namespace rbee::sd
