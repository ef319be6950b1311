// The request checks that need the loaded model (rbee/sd/pipeline.h's check_request), apart from requests.cpp so
// that the body parsers build without the SD runtime (fuzz/fuzz_sd_request).
#include "rbee/sd/pipeline.h"
#include "server/sd/requests.h"
#include "server/api_error.h"

namespace rbee::server::sd_api {

sd::GenerateRequest to_generate_request(const ImageRequest& r, uint64_t seed) {
  sd::GenerateRequest g;
  g.prompt = r.prompt;
  g.negative_prompt = r.negative_prompt;
  g.steps = r.steps;
  g.guidance_scale = r.guidance_scale;
  g.seed = seed;
  g.width = r.width;
  g.height = r.height;
  g.sampler = r.sampler;
  g.noise = r.noise;
  g.strength = r.strength;
  g.batch = r.n;
  return g;
}

void check_with_model(const ImageRequest& r, const sd::ModelLimits& limits, bool openai) {
  if (auto p = sd::check_request(to_generate_request(r, 0), limits)) {
    const bool side = p->field == "width" || p->field == "height";
    throw invalid_field(openai && side ? "size" : p->field, p->message);
  }
}

}  // namespace rbee::server::sd_api
