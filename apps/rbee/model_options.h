// Options every model-running subcommand shares (model path, backend, device, threads, context, sampling)
// and the code that turns them into a loaded model with a KV cache.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "rbee/llm/kv_cache.h"
#include "rbee/llm/memory_plan.h"
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
  // Several devices and partial offload (docs/DESIGN.md section 7).
  std::string devices;            // --devices cuda:0,cuda:1 (empty: the --backend / --device pick)
  std::string split = "layer";    // --split layer|tensor
  std::string split_ratio;        // --split-ratio 3,1 (empty: free memory for layers, equal for tensor)
  std::string gpu_layers = "auto";
  bool fit = true;                // lower the context / move layers to the CPU so that the model fits
  CLI::Option* ctx_option = nullptr;  // set by add_model_options: whether -c was given
};

// The work the model will be loaded for: sizes the memory plan's activations and graphs.
struct Workload {
  int parallel = 1;         // sequences decoded together
  int batch_tokens = 512;   // tokens of the largest forward step
  int logit_rows = 1;       // logit rows of that step
  bool make_cache = true;   // false: the caller makes its own caches (bench --batch)
  int ctx_size = 0;         // > 0: KV positions to plan (and make) instead of --ctx-size, not lowered by fitting
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
  llm::MemoryPlan plan;
};
// Sets the CPU thread count (threads > 0), loads the GPU plug-ins and picks the device, logging why.
Device& select_device(const std::string& backend, int device, int threads);
// The devices the options name: --devices, else the --backend / --device pick.
std::vector<Device*> select_devices(const ModelOptions& opt);
// The memory plan request the options and the workload make.
llm::PlanRequest plan_request(const ModelOptions& opt, const std::vector<Device*>& devices, const Workload& work);
// Plans the model's memory from its metadata (printed on stderr), refuses it when it cannot fit (Error
// OutOfMemory naming the numbers, before any weight is read), loads it over the plan's placement with a progress
// bar on a terminal, makes the KV cache of the planned size and logs the plan against what was allocated.
LoadedModel load_model(const ModelOptions& opt, const Workload& work = {});

}  // namespace rbee::cli
