#include "model_options.h"

#include <cstdio>
#include <cstdlib>

#include "progress_bar.h"
#include "rbee/backend/device.h"
#include "rbee/core/log.h"
#include "rbee/core/thread_pool.h"
#include "rbee/llm/placement.h"

namespace rbee::cli {

void add_model_options(CLI::App& app, ModelOptions& opt) {
  app.add_option("-m,--model", opt.model, "Model: a .gguf file or a Hugging Face directory (config.json, "
                                          "*.safetensors, tokenizer.json)")
      ->required();
  app.add_option("--backend", opt.backend, "auto (CUDA, then ROCm, then CPU), cpu, cuda or rocm")
      ->check(CLI::IsMember({"auto", "cpu", "cuda", "rocm"}))
      ->capture_default_str();
  app.add_option("--device,--cuda-device,--rocm-device", opt.device, "GPU index within the backend")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("-t,--threads", opt.threads, "CPU threads (default: RBEE_THREADS or every CPU)")
      ->check(CLI::NonNegativeNumber);
  opt.ctx_option = app.add_option("-c,--ctx-size", opt.ctx_size,
                                  "KV cache positions (capped at the model's context length; lowered to fit when "
                                  "not given, see --no-fit)")
                       ->check(CLI::PositiveNumber)
                       ->capture_default_str();
  app.add_option("--kv-dtype", opt.kv_dtype, "KV cache element type")
      ->check(CLI::IsMember({"f16", "bf16", "f32"}))
      ->capture_default_str();
  app.add_flag("-q,--quiet", opt.quiet, "No loading progress bar");
  app.add_flag("!--no-graph", opt.graphs,
               "Run decode steps eagerly instead of replaying them as CUDA/HIP graphs (also RBEE_NO_GRAPH=1)");
  app.add_option("--devices", opt.devices,
                 "Run on several devices: a list like cuda:0,cuda:1 or cuda:0,rocm:0 (cpu:1-7 are test instances of "
                 "the host); replaces --backend / --device");
  app.add_option("--split", opt.split, "How --devices share the model: layer (contiguous layer ranges) or tensor "
                                       "(every layer's heads and MLP columns cut over the devices)")
      ->check(CLI::IsMember({"layer", "tensor"}))
      ->capture_default_str();
  app.add_option("--split-ratio", opt.split_ratio,
                 "Shares of the devices, e.g. 3,1 (default: free memory for --split layer, equal for tensor)");
  app.add_option("--gpu-layers,--n-gpu-layers", opt.gpu_layers,
                 "Layers on the GPU(s), the first ones on the CPU: a number or auto (as many as fit)")
      ->capture_default_str();
  app.add_flag("!--no-fit", opt.fit,
               "Refuse instead of lowering the context or moving layers to the CPU when the model does not fit");
  // The GPU kernels read RBEE_BATCH_INVARIANT at each launch: set it while parsing, before any thread starts.
  app.add_flag_callback(
      "--batch-invariant", [] { setenv("RBEE_BATCH_INVARIANT", "1", 1); },
      "Batch-invariant GPU kernels (also RBEE_BATCH_INVARIANT=1): a sequence's logits do not depend on what shares "
      "its steps (batch size, prefix cache, speculative verify), at the cost of speed (docs/DESIGN.md); the CPU "
      "always is");
}

void add_sampling_options(CLI::App& app, SamplingOptions& opt) {
  app.add_option("-n,--max-tokens", opt.max_tokens, "Tokens to generate at most")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--temp,--temperature", opt.temperature, "Sampling temperature; 0 is greedy")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--top-k", opt.top_k, "Keep the k most likely tokens (0: off)")->capture_default_str();
  app.add_option("--top-p", opt.top_p, "Nucleus sampling mass (1: off)")->capture_default_str();
  app.add_option("--min-p", opt.min_p, "Drop tokens below min_p x the top probability (0: off)")
      ->capture_default_str();
  app.add_option("--repeat-penalty", opt.repeat_penalty, "Repetition penalty (1: off)")->capture_default_str();
  app.add_option("--presence-penalty", opt.presence_penalty, "Presence penalty (0: off)")->capture_default_str();
  app.add_option("--frequency-penalty", opt.frequency_penalty, "Frequency penalty (0: off)")->capture_default_str();
  app.add_option("-s,--seed", opt.seed, "Random seed (-1: random); the same seed gives the same text")
      ->capture_default_str();
  app.add_option("--stop", opt.stop, "Stop sequence (repeatable)");
  app.add_flag("--ignore-eos", opt.ignore_eos, "Keep generating past end-of-sequence tokens");
}

llm::SamplingParams to_sampling_params(const SamplingOptions& opt) {
  llm::SamplingParams p;
  p.temperature = opt.temperature;
  p.top_k = opt.top_k;
  p.top_p = opt.top_p;
  p.min_p = opt.min_p;
  p.repetition_penalty = opt.repeat_penalty;
  p.presence_penalty = opt.presence_penalty;
  p.frequency_penalty = opt.frequency_penalty;
  p.has_seed = opt.seed >= 0;
  p.seed = opt.seed >= 0 ? (uint64_t)opt.seed : 0;
  return p;
}

Device& select_device(const std::string& backend, int device_index, int threads) {
  if (threads > 0) ThreadPool::set_global_threads(threads);
  Registry& registry = Registry::global();
  for (const auto& line : registry.load_plugins()) log::debug("plugin {}", line);
  std::string reason;
  Device& device = registry.select(backend, device_index, &reason);
  log::info("device: {} ({}), {}", device.id(), device.info().name, reason);
  return device;
}

std::vector<Device*> select_devices(const ModelOptions& opt) {
  if (opt.devices.empty()) return {&select_device(opt.backend, opt.device, opt.threads)};
  if (opt.threads > 0) ThreadPool::set_global_threads(opt.threads);
  std::vector<Device*> devices = llm::parse_device_list(opt.devices);
  std::string ids;
  for (Device* d : devices) ids += (ids.empty() ? "" : ", ") + d->id() + " (" + d->info().name + ")";
  log::info("devices: {}", ids);
  return devices;
}

llm::PlanRequest plan_request(const ModelOptions& opt, const std::vector<Device*>& devices, const Workload& work) {
  llm::PlanRequest req;
  req.devices = devices;
  req.split = opt.split == "tensor" ? llm::SplitMode::Tensor : llm::SplitMode::Layer;
  if (!opt.split_ratio.empty()) req.split_ratio = llm::parse_split_ratio(opt.split_ratio);
  req.gpu_layers = llm::parse_gpu_layers(opt.gpu_layers);
  req.ctx_size = work.ctx_size > 0 ? work.ctx_size : opt.ctx_size;
  req.ctx_given = work.ctx_size > 0 || (opt.ctx_option && opt.ctx_option->count() > 0);
  req.parallel = work.parallel;
  req.batch_tokens = work.batch_tokens;
  req.logit_rows = work.logit_rows;
  req.kv_dtype = *dtype_from_name(opt.kv_dtype);
  req.decode_graphs = opt.graphs;
  req.fit = opt.fit;
  return req;
}

LoadedModel load_model(const ModelOptions& opt, const Workload& work) {
  const std::vector<Device*> devices = select_devices(opt);
  LoadedModel out;
  {
    const llm::ModelDescription desc = llm::describe_model(opt.model);
    llm::PlanRequest req = plan_request(opt, devices, work);
    req.gpu_layers = std::min(req.gpu_layers, desc.config.n_layers);  // "-g 999": all of them
    out.plan = llm::plan_memory(desc, req);
  }
  std::fprintf(stderr, "%s", out.plan.table().c_str());
  llm::require_fit(out.plan);
  const auto baseline = llm::held_bytes(out.plan.placement.devices);
  ProgressBar bar(!opt.quiet, "loading");
  llm::LoadOptions load;
  load.placement = out.plan.placement;
  load.progress = [&](float f) { bar.update(f); };
  load.decode_graphs = opt.graphs;
  out.model = llm::Model::load(opt.model, load);
  if (!work.make_cache) return out;
  out.cache = std::make_unique<llm::KvCache>(out.model->kv_layout(), out.plan.kv_blocks(), out.plan.block_size,
                                             out.plan.kv_dtype);
  log::info("kv cache: {} positions, {} ({:.1f} MiB); weights {:.1f} MiB", out.plan.ctx_size,
            dtype_name(out.plan.kv_dtype), (double)out.cache->bytes() / (1 << 20),
            (double)out.model->weight_bytes() / (1 << 20));
  for (const auto& c : llm::measure_plan(out.plan, *out.model, *out.cache, baseline)) {
    log::info("plan check {}: weights {:.1f} MiB (planned {:.1f}), KV cache {:.1f} MiB (planned {:.1f}); allocated "
              "{:.1f} MiB before the first step (planned {:.1f} with the steps' activations)",
              c.id, (double)c.measured_weights / (1 << 20), (double)c.planned_weights / (1 << 20),
              (double)c.measured_kv / (1 << 20), (double)c.planned_kv / (1 << 20),
              (double)c.measured_allocated / (1 << 20), (double)c.planned_allocated / (1 << 20));
  }
  return out;
}

}  // namespace rbee::cli
