// Reading a diffusers config file. Python's json module writes non-finite floats as the bare words NaN, Infinity and
// -Infinity (DPMSolverMultistepScheduler's default lambda_min_clipped is -inf), which JSON does not allow: such
// values are read as null, i.e. the field's default (diffusers' defaults for those fields are the same values).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace rbee::sd {

// The file's JSON; Error(NotFound) / Error(Io) as safetensors::read_json_file for missing or malformed files.
nlohmann::json read_config_json(const std::string& path);

}  // namespace rbee::sd
