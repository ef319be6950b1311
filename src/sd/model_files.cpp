#include "rbee/sd/model_files.h"

#include <filesystem>

#include "rbee/core/error.h"
#include "sd/config_json.h"
#include "rbee/formats/safetensors.h"
#include "rbee/sd/unet.h"
#include "rbee/sd/vae.h"

namespace rbee::sd {

namespace fs = std::filesystem;

std::string detect_sd_version(const std::string& model, const std::string& config_dir) {
  const std::string dir = fs::is_directory(model) ? model : config_dir;
  RBEE_CHECK_CODE(!dir.empty(), ErrorCode::InvalidArgument,
                  "sd model '{}' is a single file: name a diffusers folder with its configs and tokenizer (--config)",
                  model);
  const std::string index = dir + "/model_index.json";
  RBEE_CHECK_CODE(fs::exists(index), ErrorCode::NotFound, "sd model: '{}' has no model_index.json (not a diffusers "
                  "folder)", dir);
  const nlohmann::json j = safetensors::read_json_file(index);
  const std::string cls = j.value("_class_name", "");
  if (cls.find("XL") != std::string::npos) return "xl";
  const nlohmann::json te = safetensors::read_json_file(dir + "/text_encoder/config.json");
  return te.value("hidden_act", "quick_gelu") == "gelu" ? "v2-1" : "v1-5";
}

namespace {

// The files exist and hold the asked version (Error(InvalidArgument) naming both on a mismatch).
void check_files(const ModelFiles& f) {
  RBEE_CHECK_CODE(fs::exists(f.model), ErrorCode::NotFound, "sd model '{}' does not exist", f.model);
  RBEE_CHECK(f.sd_version == "auto" || f.sd_version == "v1-5" || f.sd_version == "v2-1" || f.sd_version == "xl" ||
                 f.sd_version == "turbo",
             "sd version '{}' unknown (auto, v1-5, v2-1, xl, turbo)", f.sd_version);
  const std::string found = detect_sd_version(f.model, f.config_dir);
  if (f.sd_version == "v1-5" || f.sd_version == "v2-1" || f.sd_version == "xl") {
    RBEE_CHECK(found == f.sd_version, "sd version '{}' was asked for, but '{}' holds an SD {} model", f.sd_version,
               fs::is_directory(f.model) ? f.model : f.config_dir, found);
  }
}

}  // namespace

ModelLimits read_model_limits(const ModelFiles& f, const LoadOptions& options) {
  check_files(f);
  const std::string dir = fs::is_directory(f.model) ? f.model : f.config_dir;
  RBEE_CHECK_CODE(!dir.empty(), ErrorCode::InvalidArgument,
                  "sd model '{}' is a single file: name a diffusers folder with its configs and tokenizer (--config)",
                  f.model);
  const UNetConfig u = UNetConfig::from_json(safetensors::read_json_file(dir + "/unet/config.json"));
  const VaeConfig v = VaeConfig::from_json(safetensors::read_json_file(dir + "/vae/config.json"));
  ModelLimits l;
  l.latent_scale = v.scale();
  l.latent_channels = v.latent_channels;
  l.schedule = NoiseSchedule::from_json(options.scheduler_config.is_null()
                                            ? read_config_json(dir + "/scheduler/scheduler_config.json")
                                            : options.scheduler_config);
  l.sdxl = u.text_time;
  l.default_side = u.sample_size > 0 ? u.sample_size * v.scale() : 512;
  return l;
}

Pipeline load_model_files(const ModelFiles& f, const LoadOptions& options) {
  check_files(f);
  if (fs::is_directory(f.model)) return Pipeline::load(f.model, options);
  return Pipeline::load_single_file(f.model, PipelineSpec::from_diffusers_folder(f.config_dir), options);
}

}  // namespace rbee::sd
