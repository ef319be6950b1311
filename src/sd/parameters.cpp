#include "rbee/sd/parameters.h"

#include <fmt/format.h>

namespace rbee::sd {

namespace {
// Latin-1 text without NUL (what a PNG tEXt chunk may hold): other bytes become '?'.
std::string latin1(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) out += (c == '\0' || (unsigned char)c >= 0x80) ? '?' : c;
  return out;
}
}  // namespace

std::string generation_parameters(const GenerateRequest& r, const std::string& model_name) {
  std::string out = latin1(r.prompt) + "\n";
  if (!r.negative_prompt.empty()) out += "Negative prompt: " + latin1(r.negative_prompt) + "\n";
  out += fmt::format("Steps: {}, Sampler: {}, CFG scale: {}, Seed: {}, Size: {}x{}", r.steps,
                     diffusion_scheduler_kind_name(r.sampler), r.guidance_scale, r.seed, r.width, r.height);
  if (r.init_image.defined()) out += fmt::format(", Denoising strength: {}", r.strength);
  if (r.mask.defined()) out += ", Inpaint: true";
  if (r.noise == NoiseKind::Torch) out += ", Noise: torch";
  out += ", Model: " + latin1(model_name);
  return out;
}

}  // namespace rbee::sd
