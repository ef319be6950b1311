// `rbee plan`: the memory plan of a model (rbee/llm/memory_plan.h) from its metadata alone, without loading it:
// per device the weights, KV cache, activations, decode graphs and run-time reserve against its free memory, and
// what fitting chose (context, layers on the CPU). Exit code 0 when it fits, 1 when it does not.
// With --check it then loads the model, runs one step of the planned largest shape and a few decode steps, and
// prints what the devices' allocators really hold against the plan.
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>

#include "commands.h"
#include "model_options.h"
#include "rbee/backend/device.h"
#include "rbee/core/error.h"

namespace rbee::cli {

namespace {

struct PlanOptions {
  ModelOptions model;
  std::string draft;  // speculative decoding's draft model (the worker's --draft)
  int spec_tokens = 0;  // speculative decoding: draft tokens verified per job and step (each with a row of logits)
  int parallel = 1;
  int batch_tokens = 512;
  bool json = false;
  bool check = false;
};

// One step of `parallel` sequences whose prompts add up to the plan's batch tokens, then decode steps of all of
// them; returns the allocators' growth after the prompt step and after the decode steps.
struct Measured {
  std::map<const Device*, int64_t> after_load, after_prompt, after_decode;
};

Measured exercise(llm::Model& model, llm::KvCache& cache, const llm::MemoryPlan& plan) {
  Measured m;
  const auto devices = plan.placement.devices;
  m.after_load = llm::held_bytes(devices);
  const int seqs = std::max(1, std::min(plan.parallel, plan.batch_tokens));
  std::vector<llm::SequenceKv> kv((size_t)seqs);
  llm::ForwardBatch prompt;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> token(0, model.config().vocab_size - 1);
  const int decode_steps = 3;  // warm-up, capture, replay
  for (int s = 0; s < seqs; ++s) {
    const int len = plan.batch_tokens / seqs + (s < plan.batch_tokens % seqs ? 1 : 0);
    RBEE_CHECK(kv[(size_t)s].reserve(cache, len + decode_steps), "plan --check: the KV cache has no room for the step");
    for (int i = 0; i < len; ++i) prompt.tokens.push_back(token(rng));
    prompt.seqs.push_back({&kv[(size_t)s], len, len, false});
  }
  model.forward(prompt, cache);
  model.device().synchronize();
  m.after_prompt = llm::held_bytes(devices);
  for (int s = 0; s < seqs; ++s) kv[(size_t)s].length = prompt.seqs[(size_t)s].ctx_len;
  for (int step = 0; step < decode_steps; ++step) {
    llm::ForwardBatch d;
    for (int s = 0; s < seqs; ++s) {
      d.tokens.push_back(token(rng));
      d.seqs.push_back({&kv[(size_t)s], 1, kv[(size_t)s].length + 1, false});
    }
    model.forward(d, cache);
    for (auto& q : kv) q.length += 1;
  }
  model.device().synchronize();
  m.after_decode = llm::held_bytes(devices);
  for (auto& q : kv) q.release(cache);
  return m;
}

int run_plan(const PlanOptions& opt) {
  RBEE_CHECK(opt.parallel >= 1 && opt.batch_tokens >= 1, "plan: --parallel and --batch-tokens must be >= 1");
  const std::vector<Device*> devices = select_devices(opt.model);
  Workload work;
  work.parallel = opt.parallel;
  work.batch_tokens = opt.batch_tokens;
  work.logit_rows = opt.parallel * (1 + opt.spec_tokens);
  const llm::ModelDescription desc = llm::describe_model(opt.model.model);
  llm::PlanRequest req = plan_request(opt.model, devices, work);
  req.gpu_layers = std::min(req.gpu_layers, desc.config.n_layers);
  std::optional<llm::ModelDescription> draft_desc;
  if (!opt.draft.empty()) {
    draft_desc = llm::describe_model(opt.draft);
    req.draft = &*draft_desc;
  }
  const llm::MemoryPlan plan = llm::plan_memory(desc, req);
  if (opt.json) {
    std::printf("%s\n", plan.to_json().dump(2).c_str());
  } else {
    std::printf("%s", plan.table().c_str());
    int64_t layers = 0;
    for (int64_t b : plan.layer_bytes) layers += b;
    std::printf("weights: %.1f MiB in %d layers (%.1f MiB per layer on average) + %.1f MiB embedding and head\n",
                (double)layers / (1 << 20), desc.config.n_layers, (double)layers / (1 << 20) / desc.config.n_layers,
                (double)plan.other_bytes / (1 << 20));
    if (!plan.fits) std::printf("%s\n", plan.refusal().c_str());
  }
  if (!plan.fits) return 1;
  if (!opt.check) return 0;

  const auto baseline = llm::held_bytes(plan.placement.devices);
  llm::LoadOptions load;
  load.placement = plan.placement;
  load.decode_graphs = opt.model.graphs;
  auto model = llm::Model::load(opt.model.model, load);
  llm::KvCache cache(model->kv_layout(), plan.kv_blocks(), plan.block_size, plan.kv_dtype);
  const auto after_load = llm::measure_plan(plan, *model, cache, baseline);
  // The draft model as the worker holds it (on the device of the logits, a cache as large as the model's), after
  // a step of the planned largest shape: its share is in the totals below.
  std::unique_ptr<llm::Model> draft;
  std::unique_ptr<llm::KvCache> draft_cache;
  if (!opt.draft.empty()) {
    llm::LoadOptions dload;
    dload.device = &model->device();
    draft = llm::Model::load(opt.draft, dload);
    draft_cache = std::make_unique<llm::KvCache>(draft->kv_layout(), plan.kv_blocks(), plan.block_size, plan.kv_dtype);
    exercise(*draft, *draft_cache, plan);
  }
  const Measured m = exercise(*model, cache, plan);
  std::printf("\nmeasured after loading and one %d-token step of %d sequence(s), then 3 decode steps:\n",
              plan.batch_tokens, std::max(1, std::min(plan.parallel, plan.batch_tokens)));
  std::printf("| device  | weights+KV planned | after load | activations planned | prompt step | graphs planned | "
              "decode steps | total planned | total held | ratio |\n");
  std::printf("|---------|--------------------|------------|---------------------|-------------|----------------|"
              "--------------|---------------|------------|-------|\n");
  for (size_t i = 0; i < plan.devices.size(); ++i) {
    const llm::DevicePlan& d = plan.devices[i];
    const Device* dev = d.device;
    const double mib = 1 << 20;
    const int64_t loaded = after_load[i].measured_allocated;
    const int64_t prompt = m.after_prompt.at(dev) - m.after_load.at(dev);
    const int64_t decode = m.after_decode.at(dev) - m.after_prompt.at(dev);
    const int64_t held = m.after_decode.at(dev) - baseline.at(dev);
    std::printf("| %-7s | %14.1f MiB | %6.1f MiB | %15.1f MiB | %7.1f MiB | %10.1f MiB | %8.1f MiB | %9.1f MiB | "
                "%6.1f MiB | %5.3f |\n",
                d.id.c_str(), (d.weights + d.kv) / mib, loaded / mib, d.activations / mib, prompt / mib,
                d.graphs / mib, decode / mib, d.allocated() / mib, held / mib,
                d.allocated() > 0 ? (double)held / (double)d.allocated() : 0.0);
  }
  std::printf("(held: what each allocator holds beyond its state before loading, in use + cached; the plan's graphs "
              "are for every decode shape the worker may record, these steps record one%s)\n",
              opt.draft.empty() ? ""
                                 : "; the draft model (loaded and run once before the steps) counts in the totals only");
  return 0;
}

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto opt = std::make_shared<PlanOptions>();
  CLI::App* sub = app.add_subcommand(
      "plan", "Print what a model needs on each device (weights, KV cache, activations) without loading it");
  add_model_options(*sub, opt->model);
  opt->model.quiet = true;
  sub->add_option("--parallel", opt->parallel, "Sequences decoded together (the worker's --parallel)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  sub->add_option("--batch-tokens", opt->batch_tokens,
                  "Tokens of the largest forward step (the worker: --prefill-chunk + --parallel x (1 + --spec-tokens "
                  "with --spec on); rbee run: 512)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--spec-tokens", opt->spec_tokens,
                  "Speculative decoding's draft tokens per job and step (the worker's --spec-tokens when --spec is on; "
                  "0: off): each adds a row of logits")
      ->check(CLI::Range(0, 16))
      ->capture_default_str();
  sub->add_option("--draft", opt->draft,
                  "Draft model for speculative decoding (the worker's --draft): counted on the device of the logits")
      ->check(CLI::ExistingPath);
  sub->add_flag("--json", opt->json, "Print the plan as JSON");
  sub->add_flag("--check", opt->check,
                "Then load the model, run the planned step and a few decode steps, and print planned against held");
  return [opt] { return run_plan(*opt); };
}

}  // namespace rbee::cli
