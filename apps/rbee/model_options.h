// Options every model-running subcommand shares (model path, backend, device, threads, context, sampling)
// and the code that turns them into a loaded model with a KV cache.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "rbee/llm/kv_cache.h"
#include "rbee/llm/model.h"
#include "rbee/llm/sampler.h"

namespace rbee {
class Device;
}

namespace rbee::cli {

struct ModelOptions {
  std::string model;
  std::string backend = "auto";
  int device = 0;
  int threads = 0;       // 0: RBEE_THREADS or all CPUs
  int ctx_size = 4096;   // positions in the KV cache (capped at the model's trained context)
  std::string kv_dtype = "f16";
  bool quiet = false;    // no progress bar
  bool graphs = true;    // decode steps replayed as device graphs where the device has them
};

struct SamplingOptions {
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int64_t seed = -1;  // -1: random
  std::vector<std::string> stop;
  int max_tokens = 256;
  bool ignore_eos = false;
};

void add_model_options(CLI::App& app, ModelOptions& opt);
void add_sampling_options(CLI::App& app, SamplingOptions& opt);
llm::SamplingParams to_sampling_params(const SamplingOptions& opt);

struct LoadedModel {
  std::unique_ptr<llm::Model> model;
  std::unique_ptr<llm::KvCache> cache;
};
// Sets the CPU thread count (threads > 0), loads the GPU plug-ins and picks the device, logging why.
Device& select_device(const std::string& backend, int device, int threads);
// Selects the device, loads the model with a progress bar on a terminal, and sizes the KV cache.
LoadedModel load_model(const ModelOptions& opt);

}  // namespace rbee::cli
