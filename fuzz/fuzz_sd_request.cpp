// libFuzzer target for sd-worker-rbee's request parsing: any bytes as a POST body of /v1/jobs or
// /v1/images/generations (the first byte picks which), base64 and image decoding (libspng, libjpeg-turbo, libwebp) included. The only
// acceptable failure is ApiError with a 4xx status; any other exception, crash, leak or UB is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/sd/requests.h"
#include "server/api_error.h"
#include "server/json_fields.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool openai = data[0] & 1;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  using namespace rbee::server;
  using namespace rbee::server::sd_api;
  try {
    const nlohmann::json j = parse_json_object(body);
    const RequestDefaults defaults;
    const ImageRequest r = openai ? parse_openai_image(j, defaults) : parse_image_job(j, defaults);
    // What the service relies on for a parsed request must hold.
    if (r.steps < 1 || r.steps > kMaxSteps || !(r.guidance_scale >= 0 && r.guidance_scale <= 20)) __builtin_trap();
    if (r.width < kMinSide || r.width > kMaxSide || r.width % kSideMultiple != 0) __builtin_trap();
    if (r.height < kMinSide || r.height > kMaxSide || r.height % kSideMultiple != 0) __builtin_trap();
    if (r.operation != Operation::Generate) {
      if (r.init_image.width != r.width || r.init_image.height != r.height) __builtin_trap();
      if (r.init_image.rgb.size() != (size_t)r.width * (size_t)r.height * 3) __builtin_trap();
      if ((int)(r.steps * r.strength) < 1 || r.strength > 1) __builtin_trap();
    }
    if (r.operation == Operation::Inpaint && r.mask.rgb.size() != r.init_image.rgb.size()) __builtin_trap();
    (void)dump_json(nlohmann::json{{"prompt", r.prompt}, {"negative_prompt", r.negative_prompt}});
  } catch (const ApiError& e) {
    if (e.status() < 400 || e.status() > 499) __builtin_trap();
    (void)dump_json(e.body());
  }
  return 0;
}
