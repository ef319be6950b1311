#include "server/sd/requests.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "rbee/core/error.h"
#include "rbee/sd/png.h"
#include "server/api_error.h"
#include "server/base64.h"
#include "server/json_fields.h"

namespace rbee::server::sd_api {

const char* operation_name(Operation op) {
  switch (op) {
    case Operation::Generate: return "image_generation";
    case Operation::Transform: return "image_transform";
    case Operation::Inpaint: return "image_inpaint";
  }
  return "image_generation";
}

namespace {
// The names of rbee/sd/diffusion_scheduler.h's diffusion_scheduler_kind_from_name (kept here so that parsing needs
// no SD runtime).
constexpr std::pair<const char*, sd::DiffusionSchedulerKind> kSamplers[] = {
    {"euler", sd::DiffusionSchedulerKind::Euler},
    {"euler_a", sd::DiffusionSchedulerKind::EulerAncestral},
    {"ddim", sd::DiffusionSchedulerKind::Ddim},
    {"dpmpp_2m", sd::DiffusionSchedulerKind::DpmPP2M},
    {"dpmpp_2m_karras", sd::DiffusionSchedulerKind::DpmPP2MKarras},
    {"lcm", sd::DiffusionSchedulerKind::Lcm},
    {"heun", sd::DiffusionSchedulerKind::Heun},
    {"pndm", sd::DiffusionSchedulerKind::Pndm},
    {"unipc", sd::DiffusionSchedulerKind::UniPC},
    {"dpmpp_sde", sd::DiffusionSchedulerKind::DpmPPSde}};
}  // namespace

std::vector<std::string> sampler_list() {
  std::vector<std::string> out;
  for (const auto& [n, kind] : kSamplers) out.emplace_back(n);
  return out;
}

std::string sampler_names() { return fmt::format("{}", fmt::join(sampler_list(), ", ")); }

sd::DiffusionSchedulerKind parse_sampler(const std::string& name, const char* field) {
  for (const auto& [n, kind] : kSamplers) {
    if (name == n) return kind;
  }
  throw invalid_field(field, "unknown sampler \"" + name.substr(0, 40) + "\"; one of " + sampler_names());
}

namespace {

void check_side(const char* field, int64_t v) {
  if (v < kMinSide || v > kMaxSide || v % kSideMultiple != 0) {
    throw invalid_field(field, fmt::format("must be a multiple of {} in [{}, {}], got {}", kSideMultiple, kMinSide,
                                           kMaxSide, v));
  }
}

// A base64 PNG, JPEG or WebP field -> RGB8 image; 400 naming the field for bad base64 or an image that does not
// decode. More pixels than the largest output side squared are refused before the image is decompressed.
sd::Image decode_image_field(const JsonFields& f, const char* field) {
  const std::string text = f.required_string(field);
  std::string why;
  auto bytes = base64_decode(text, &why);
  if (!bytes) throw invalid_field(field, "is not valid base64: " + why);
  try {
    return sd::decode_image(bytes->data(), bytes->size(), (int64_t)kMaxSide * kMaxSide);
  } catch (const Error& e) {
    throw invalid_field(field, "is not an image this worker can read (PNG, JPEG or WebP): " + e.message());
  }
}

// The fields every operation shares (prompt, negative_prompt, steps, guidance_scale, seed, sampler, preview_every).
void parse_common(const JsonFields& f, const RequestDefaults& d, ImageRequest& r) {
  r.prompt = f.required_string("prompt");
  if (r.prompt.size() > kMaxPromptBytes) {
    throw invalid_field("prompt", fmt::format("is {} bytes; {} at most", r.prompt.size(), kMaxPromptBytes));
  }
  r.negative_prompt = f.string("negative_prompt").value_or("");
  if (r.negative_prompt.size() > kMaxPromptBytes) {
    throw invalid_field("negative_prompt",
                        fmt::format("is {} bytes; {} at most", r.negative_prompt.size(), kMaxPromptBytes));
  }
  r.steps = (int)f.integer("steps", 1, kMaxSteps).value_or(d.steps);
  r.guidance_scale = f.number("guidance_scale", 0.0, 20.0).value_or(d.guidance_scale);
  if (auto seed = f.integer("seed", 0, INT64_MAX)) r.seed = (uint64_t)*seed;
  r.sampler = d.sampler;
  if (auto s = f.string("sampler")) r.sampler = parse_sampler(*s, "sampler");
  r.noise = d.noise;
  if (auto n = f.string("noise")) {
    if (*n == "rbee") r.noise = sd::NoiseKind::Rbee;
    else if (*n == "torch") r.noise = sd::NoiseKind::Torch;
    else throw invalid_field("noise", "unknown generator \"" + n->substr(0, 40) + "\"; one of rbee, torch");
  }
  r.preview_every = (int)f.integer("preview_every", 0, kMaxSteps).value_or(d.preview_every);
}

}  // namespace

ImageRequest parse_image_job(const nlohmann::json& body, const RequestDefaults& d) {
  const JsonFields f(body);
  ImageRequest r;
  const std::string op = f.required_string("operation");
  if (op == "image_generation") r.operation = Operation::Generate;
  else if (op == "image_transform") r.operation = Operation::Transform;
  else if (op == "image_inpaint") r.operation = Operation::Inpaint;
  else
    throw invalid_field("operation", "unknown operation \"" + op.substr(0, 40) +
                                         "\"; one of image_generation, image_transform, image_inpaint");
  parse_common(f, d, r);
  auto width = f.integer("width", INT64_MIN, INT64_MAX);
  auto height = f.integer("height", INT64_MIN, INT64_MAX);
  if (width) check_side("width", *width);
  if (height) check_side("height", *height);
  r.width = (int)width.value_or(d.width);
  r.height = (int)height.value_or(d.height);
  if (r.operation == Operation::Generate) return r;

  // The source image: input_image (transform's name) or init_image (inpaint's name), either for both.
  const char* image_field = f.has("input_image") ? "input_image"
                            : f.has("init_image") ? "init_image"
                            : r.operation == Operation::Transform ? "input_image" : "init_image";
  r.init_image = decode_image_field(f, image_field);
  if (!width) r.width = r.init_image.width;
  if (!height) r.height = r.init_image.height;
  if (r.init_image.width != r.width || r.init_image.height != r.height) {
    throw invalid_field(image_field, fmt::format("is {}x{}, the request asks for {}x{}", r.init_image.width,
                                                 r.init_image.height, r.width, r.height));
  }
  if (!width || !height) {
    try {
      check_side("width", r.width);
      check_side("height", r.height);
    } catch (const ApiError& e) {
      throw invalid_field(image_field, fmt::format("is {}x{}: {}", r.width, r.height, e.message()));
    }
  }
  r.strength = f.number("strength", 0.0, 1.0)
                   .value_or(r.operation == Operation::Inpaint ? d.inpaint_strength : d.strength);
  // diffusers runs int(steps * strength) steps of img2img; none is no image.
  if ((int)(r.steps * r.strength) < 1) {
    throw invalid_field("strength", fmt::format("{} with {} steps runs no denoising step (steps * strength < 1)",
                                                r.strength, r.steps));
  }
  if (r.operation == Operation::Inpaint) {
    r.mask = decode_image_field(f, "mask_image");
    if (r.mask.width != r.width || r.mask.height != r.height) {
      throw invalid_field("mask_image", fmt::format("is {}x{}, the image is {}x{}", r.mask.width, r.mask.height,
                                                    r.width, r.height));
    }
  }
  return r;
}

ImageRequest parse_openai_image(const nlohmann::json& body, const RequestDefaults& d) {
  const JsonFields f(body);
  ImageRequest r;
  parse_common(f, d, r);
  r.n = (int)f.integer("n", 1, sd::kMaxBatch).value_or(1);
  const std::string format = f.string("response_format").value_or("b64_json");
  if (format != "b64_json") {
    throw ApiError(400, "unsupported",
                   "field 'response_format': only \"b64_json\" is served (the worker keeps no image files), got \"" +
                       format.substr(0, 40) + "\"",
                   "response_format");
  }
  r.width = d.width;
  r.height = d.height;
  if (auto size = f.string("size")) {
    const size_t x = size->find('x');
    int64_t w = -1, h = -1;
    auto number = [](const std::string& s) -> int64_t {
      if (s.empty() || s.size() > 5 || s.find_first_not_of("0123456789") != std::string::npos) return -1;
      return std::stoll(s);
    };
    if (x != std::string::npos) {
      w = number(size->substr(0, x));
      h = number(size->substr(x + 1));
    }
    if (w < 0 || h < 0) throw invalid_field("size", "must be \"<width>x<height>\", got \"" + size->substr(0, 40) + "\"");
    check_side("size", w);
    check_side("size", h);
    r.width = (int)w;
    r.height = (int)h;
  }
  return r;
}

}  // namespace rbee::server::sd_api
