// sd-worker-rbee's request bodies, parsed and range-checked without a model (docs/DESIGN.md section 5):
// POST /v1/jobs with operation image_generation / image_transform / image_inpaint, and OpenAI's
// POST /v1/images/generations. Every mistake is ApiError(400) naming the field: steps 1-150, guidance_scale 0-20,
// width/height multiples of 8 in 256..2048 (the contract's range), strength 0-1 (and at least one step to run),
// sampler names, base64 PNG images that do not decode, an image or mask whose size differs from the request's.
// Unknown fields are ignored, as OpenAI's API does. check_with_model then refuses, also with a 400 naming the
// field, what only the loaded model knows (the sampler's step limit, its latent scale, scheduler config fields a
// sampler cannot honour), before the job is queued.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rbee/sd/pipeline.h"
#include "rbee/sd/diffusion_scheduler.h"

namespace rbee::server::sd_api {

enum class Operation { Generate, Transform, Inpaint };
const char* operation_name(Operation op);  // "image_generation", "image_transform", "image_inpaint"

inline constexpr int kMinSide = 256, kMaxSide = 2048, kSideMultiple = 8;
inline constexpr int kMaxSteps = 150;
inline constexpr size_t kMaxPromptBytes = 16384;

// What a request gets for the fields it leaves out (per --sd-version: SD-Turbo runs 1 step without guidance).
struct RequestDefaults {
  int steps = 20;
  double guidance_scale = 7.5;
  int width = 512, height = 512;
  sd::DiffusionSchedulerKind sampler = sd::DiffusionSchedulerKind::Euler;
  sd::NoiseKind noise = sd::NoiseKind::Rbee;
  double strength = 0.8;          // image_transform (diffusers' img2img default)
  double inpaint_strength = 1.0;  // image_inpaint (diffusers' inpaint default)
  int preview_every = 5;  // steps between preview events; 0: none
};

struct ImageRequest {
  Operation operation = Operation::Generate;
  std::string prompt, negative_prompt;
  int steps = 20;
  double guidance_scale = 7.5;
  std::optional<uint64_t> seed;  // absent: the worker draws one and reports it
  int width = 512, height = 512;
  sd::DiffusionSchedulerKind sampler = sd::DiffusionSchedulerKind::Euler;
  sd::NoiseKind noise = sd::NoiseKind::Rbee;  // "noise": "rbee" or "torch"
  double strength = 0.8;         // transform and inpaint
  sd::Image init_image;          // transform and inpaint (RGB8, width x height)
  sd::Image mask;                // inpaint: 1 channel stored as RGB8; white repaints, black keeps
  int preview_every = 5;
  int n = 1;  // images of one text-to-image request (OpenAI's "n"), made as one batch; image i from seed + i
};

// POST /v1/jobs. "operation" is required; images come as base64 PNG ("input_image" for image_transform and
// "init_image" for image_inpaint, each name accepted for both operations; "mask_image" for inpaint). When width
// and height are absent they default to the input image's size.
ImageRequest parse_image_job(const nlohmann::json& body, const RequestDefaults& defaults);

// POST /v1/images/generations: prompt, n (1 .. sd::kMaxBatch images, one UNet batch), size "WxH", response_format "b64_json" (url: 400, the worker
// keeps no files), plus the rbee extensions negative_prompt, steps, guidance_scale, seed and sampler.
ImageRequest parse_openai_image(const nlohmann::json& body, const RequestDefaults& defaults);

// "euler", "euler_a", ... -> kind; ApiError(400) naming `field` and listing the names otherwise.
sd::DiffusionSchedulerKind parse_sampler(const std::string& name, const char* field);
// Every sampler name, in the order of --help; sampler_names() comma-separated.
std::vector<std::string> sampler_list();
std::string sampler_names();

// The pipeline request for `r` (images and mask not converted: the device thread does that).
sd::GenerateRequest to_generate_request(const ImageRequest& r, uint64_t seed);
// ApiError(400) naming the field when `r` cannot run on a model with `limits` (sd::check_request); `openai` names
// the size field "size" as that route does.
void check_with_model(const ImageRequest& r, const sd::ModelLimits& limits, bool openai = false);

}  // namespace rbee::server::sd_api
