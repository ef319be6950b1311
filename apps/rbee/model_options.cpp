#include "model_options.h"

#include <cstdio>

#include "progress_bar.h"
#include "rbee/backend/device.h"
#include "rbee/core/log.h"
#include "rbee/core/thread_pool.h"

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
  app.add_option("-c,--ctx-size", opt.ctx_size, "KV cache positions (capped at the model's context length)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--kv-dtype", opt.kv_dtype, "KV cache element type")
      ->check(CLI::IsMember({"f16", "bf16", "f32"}))
      ->capture_default_str();
  app.add_flag("-q,--quiet", opt.quiet, "No loading progress bar");
  app.add_flag("!--no-graph", opt.graphs,
               "Run decode steps eagerly instead of replaying them as CUDA/HIP graphs (also RBEE_NO_GRAPH=1)");
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

LoadedModel load_model(const ModelOptions& opt) {
  Device& device = select_device(opt.backend, opt.device, opt.threads);
  ProgressBar bar(!opt.quiet, "loading");
  llm::LoadOptions load;
  load.device = &device;
  load.progress = [&](float f) { bar.update(f); };
  load.decode_graphs = opt.graphs;
  LoadedModel out;
  out.model = llm::Model::load(opt.model, load);
  const auto& cfg = out.model->config();
  const int ctx = std::min(opt.ctx_size, cfg.max_positions > 0 ? cfg.max_positions : opt.ctx_size);
  const int block = 16;
  const DType kv = *dtype_from_name(opt.kv_dtype);
  out.cache = std::make_unique<llm::KvCache>(device, cfg, (ctx + block - 1) / block, block, kv);
  log::info("kv cache: {} positions, {} ({:.1f} MiB); weights {:.1f} MiB", ctx, opt.kv_dtype,
            (double)out.cache->bytes() / (1 << 20), (double)out.model->weight_bytes() / (1 << 20));
  return out;
}

}  // namespace rbee::cli
