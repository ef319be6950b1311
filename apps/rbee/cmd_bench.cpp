// `rbee bench`: prompt-processing and decode throughput of a model, measured the way llama-bench measures it so
// the two can be set side by side:
//   ppN  one sequence, N random prompt tokens in one forward pass (logits of the last token only)
//   tgN  one sequence from an empty cache, N forward passes of one token each: the first token random, every
//        later one the greedy pick (argmax on the device) of the step before, read back to the host before the
//        next step is issued. So each step waits for the previous one on every device, as real decoding does
//        (llama-bench also waits for each step); a split over devices cannot overlap consecutive tokens.
// Each test runs once unmeasured (warm-up: page faults of the mapped weights, thread pool start), then
// `repetitions` times; the cache is emptied between runs. Reports mean and standard deviation of tokens/s.
//
// Next to each result stands the hardware's limit, measured in the same run on the same device
// (bench_limits.h): ppN against a dense GEMM rate (FLOPs of the pass / GEMM FLOP/s), tgN against a memory copy
// bandwidth (bytes read per token / bytes per second), and the fraction of that limit the test reached.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "bench_batched.h"
#include "bench_limits.h"
#include "bench_verify.h"
#include "commands.h"
#include "model_options.h"
#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/core/profile.h"
#include "rbee/core/step_times.h"
#include "rbee/ops.h"
#include "rbee/core/thread_pool.h"
#include "rbee/llm/generate.h"

namespace rbee::cli {

namespace {
struct BenchOptions {
  ModelOptions model;
  std::vector<int> prompt = {512};
  std::vector<int> gen = {128};
  int repetitions = 5;
  uint64_t seed = 42;
  bool json = false;
  int bandwidth_mib = 256;  // buffer of the copy-bandwidth measurement
  int gemm_n = 0;           // size of the GEMM-rate measurement (0: 1024 on CPUs, 4096 on GPUs)
  bool limits = true;
  std::vector<int> batch;   // --batch: concurrent-sequence throughput through the scheduler (bench_batched.h)
  std::vector<int> verify;  // --verify: speculative verification cost of K drafts (bench_verify.h)
  int verify_batch = 1;
  bool host_sampling = false;  // --host-sampling: the scheduler samples from host logits (A/B of device sampling)
};

struct BenchResult {
  std::string test;  // "pp512", "tg128"
  int n_prompt = 0, n_gen = 0;
  std::vector<double> seconds;  // per repetition
  double mean_ts = 0, std_ts = 0;
  double work = 0;      // ppN: FLOPs of one pass; tgN: bytes read per token
  double limit_ts = 0;  // tokens/s at the hardware limit (0: not measured)
};

// One timed run: fills a fresh sequence with `n_prompt` tokens in one batch, or decodes `n_gen` single tokens.
double run_once(llm::Model& model, llm::KvCache& cache, int n_prompt, int n_gen, std::mt19937_64& rng) {
  const int vocab = model.config().vocab_size;
  std::uniform_int_distribution<int> token(0, vocab - 1);
  Device& device = model.device();
  llm::SequenceKv seq;
  const int total = std::max(n_prompt, n_gen);
  RBEE_CHECK_CODE(seq.reserve(cache, total), ErrorCode::OutOfMemory, "bench: the KV cache has no room for {} tokens",
                  total);
  struct Release {
    llm::SequenceKv& s;
    llm::KvCache& c;
    ~Release() { s.release(c); }
  } release{seq, cache};
  llm::ForwardBatch batch;
  batch.seqs.resize(1);
  if (n_prompt > 0) {
    batch.tokens.resize((size_t)n_prompt);
    for (auto& t : batch.tokens) t = token(rng);
    batch.seqs[0] = {&seq, n_prompt, n_prompt, false};
    const auto t0 = std::chrono::steady_clock::now();
    model.forward(batch, cache);
    device.synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // Real decoding: the first token random, every later one the previous step's greedy pick, read back before the
  // next step starts (llm::greedy_decode_steps), so no step overlaps the next on any device.
  const llm::TokenId first = token(rng);
  const auto t0 = std::chrono::steady_clock::now();
  llm::greedy_decode_steps(model, cache, seq, first, n_gen);
  device.synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

BenchResult bench_test(llm::Model& model, llm::KvCache& cache, int n_prompt, int n_gen, int reps, uint64_t seed) {
  BenchResult r;
  r.n_prompt = n_prompt;
  r.n_gen = n_gen;
  r.test = n_prompt > 0 ? fmt::format("pp{}", n_prompt) : fmt::format("tg{}", n_gen);
  std::mt19937_64 rng(seed);
  run_once(model, cache, n_prompt, n_gen, rng);  // warm-up
  step_times::reset();                           // RBEE_STEP_TIMES: the timed runs of the last test only
  std::vector<double> ts;
  for (int i = 0; i < reps; ++i) {
    const double s = run_once(model, cache, n_prompt, n_gen, rng);
    r.seconds.push_back(s);
    ts.push_back((double)(n_prompt + n_gen) / s);
  }
  double sum = 0;
  for (double v : ts) sum += v;
  r.mean_ts = sum / (double)ts.size();
  double var = 0;
  for (double v : ts) var += (v - r.mean_ts) * (v - r.mean_ts);
  r.std_ts = ts.size() > 1 ? std::sqrt(var / (double)(ts.size() - 1)) : 0.0;
  return r;
}

// RBEE_OP_PROFILE=1: the per-op table of every forward pass run (warm-ups included), after a "null" row: the
// same synchronized timing around a one-element fill, i.e. what each row's calls pay for launch and
// synchronization beyond their kernels.
void print_profile_table(Device& device, const std::string& passes) {
  Tensor t = Tensor::empty({1}, DType::F32, device);
  for (int i = 0; i < 200; ++i) {
    profile::Scope scope("null", t);
    ops::const_set(t, 0.0);
  }
  std::printf("op profile (RBEE_OP_PROFILE=1): %s, each op synchronized before and after\n%s", passes.c_str(),
              profile::report().c_str());
}
void print_profile(Device& device, const std::vector<BenchResult>& results, int repetitions) {
  int64_t passes = 0;
  for (const auto& r : results) passes += (int64_t)(repetitions + 1) * (r.n_prompt > 0 ? 1 : r.n_gen);
  print_profile_table(device, fmt::format("{} forward passes", passes));
}

// --batch: one model, a KV cache per batch size (the loaded one is kept minimal).
int run_batched(const BenchOptions& opt) {
  RBEE_CHECK(opt.prompt.size() == 1 && opt.gen.size() == 1,
             "bench --batch: give one --n-prompt and one --n-gen (got {} and {})", opt.prompt.size(), opt.gen.size());
  // Refused before the memory plan (which would only see a zero-sized workload): the same limits bench_batched keeps.
  RBEE_CHECK(opt.prompt[0] >= 1 && opt.gen[0] >= 1,
             "bench --batch: needs --n-prompt >= 1 and --n-gen >= 1 (got {} and {})", opt.prompt[0], opt.gen[0]);
  for (int b : opt.batch) RBEE_CHECK(b >= 1 && b <= 4096, "bench: --batch values must be in [1, 4096], got {}", b);
  // Planned for the largest batch: its KV cache, its prompt step and its decode rows (the caches are made per
  // batch size by bench_batched).
  const int most = *std::max_element(opt.batch.begin(), opt.batch.end());
  const int block = 16;
  Workload work;
  work.parallel = most;
  work.batch_tokens = most * std::max(opt.prompt[0], 1);
  work.logit_rows = most;
  work.make_cache = false;
  work.ctx_size = most * ((opt.prompt[0] + opt.gen[0] + 1 + block - 1) / block) * block;
  LoadedModel loaded = load_model(opt.model, work);
  llm::Model& model = *loaded.model;
  const DType kv = *dtype_from_name(opt.model.kv_dtype);
  const auto results =
      bench_batched(model, kv, opt.batch, opt.prompt[0], opt.gen[0], opt.repetitions, opt.seed, opt.host_sampling);
  const DeviceInfo dev = model.device().info();
  const llm::ModelConfig& cfg = model.config();
  if (opt.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : results) {
      out.push_back({{"model", opt.model.model},   {"arch", cfg.arch},          {"model_size", model.weight_bytes()},
                     {"backend", dev.backend},     {"device", dev.name},        {"kv_dtype", opt.model.kv_dtype},
                     {"pp", r.n_prompt},           {"tg", r.n_gen},             {"pl", r.batch},
                     {"n_kv", r.batch * (r.n_prompt + r.n_gen)},
                     {"t_pp", r.t_pp},             {"speed_pp", r.s_pp},        {"t_tg", r.t_tg},
                     {"speed_tg", r.s_tg},         {"t", r.t_pp + r.t_tg},      {"speed", r.s_total},
                     {"repetitions", opt.repetitions}, {"decode_graphs", model.decode_graphs()},
                     {"graph_replays", r.graph_replays}, {"host_sampling", opt.host_sampling}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%s on %s (%s), %.1f MiB of weights, decode graphs %s, sampling on the %s; llama-batched-bench "
              "columns (prompt not shared)\n",
              (cfg.arch + " " + cfg.name).c_str(), dev.name.c_str(), dev.backend.c_str(),
              (double)model.weight_bytes() / (1024.0 * 1024.0), model.decode_graphs() ? "on" : "off",
              opt.host_sampling ? "host" : "device");
  std::printf("| %5s | %5s | %5s | %7s | %8s | %9s | %8s | %9s | %8s | %9s |\n", "PP", "TG", "B", "N_KV", "T_PP s",
              "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s");
  std::printf("|-------|-------|-------|---------|----------|-----------|----------|-----------|----------|-----------|\n");
  for (const auto& r : results) {
    std::printf("| %5d | %5d | %5d | %7d | %8.3f | %9.1f | %8.3f | %9.1f | %8.3f | %9.1f |\n", r.n_prompt, r.n_gen,
                r.batch, r.batch * (r.n_prompt + r.n_gen), r.t_pp, r.s_pp, r.t_tg, r.s_tg, r.t_pp + r.t_tg,
                r.s_total);
  }
  // The scheduler's steps of every batch size, warm-ups included: prompt steps ([B x PP, ...] rows) and decode
  // steps ([B, ...] rows) keep apart by their shapes.
  if (profile::enabled()) print_profile_table(model.device(), "every scheduler step of the runs above");
  if (step_times::enabled()) std::printf("timed runs of the last batch size; %s", step_times::report().c_str());
  return 0;
}

// --verify: one K + 1 token pass against one decode step, at a context of --n-prompt positions.
int run_verify(const BenchOptions& opt) {
  RBEE_CHECK(opt.prompt.size() == 1, "bench --verify: give one --n-prompt (the context depth), got {}",
             opt.prompt.size());
  // Planned for the largest pass (bench_verify makes its own cache in the model's KV layout).
  const int k_max = opt.verify.empty() ? 0 : *std::max_element(opt.verify.begin(), opt.verify.end());
  const int block = 16;
  Workload work;
  work.parallel = std::max(1, opt.verify_batch);
  work.batch_tokens = work.parallel * std::max(opt.prompt[0], k_max + 1);
  work.logit_rows = work.parallel * (k_max + 1);
  work.make_cache = false;
  work.ctx_size = work.parallel * ((opt.prompt[0] + k_max + 1 + block - 1) / block) * block;
  LoadedModel loaded = load_model(opt.model, work);
  llm::Model& model = *loaded.model;
  const auto results = bench_verify(model, *dtype_from_name(opt.model.kv_dtype), opt.verify, opt.verify_batch,
                                    opt.prompt[0], opt.repetitions, opt.seed);
  const DeviceInfo dev = model.device().info();
  const llm::ModelConfig& cfg = model.config();
  if (opt.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : results) {
      out.push_back({{"model", opt.model.model}, {"arch", cfg.arch}, {"backend", dev.backend}, {"device", dev.name},
                     {"batch", r.batch}, {"context", r.context}, {"k", r.k}, {"seconds", r.seconds},
                     {"decode_steps_per_pass", r.ratio}, {"repetitions", opt.repetitions},
                     {"decode_graphs", model.decode_graphs()}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%s on %s (%s), %.1f MiB of weights, decode graphs %s: %d sequence(s) at a context of %d\n",
              (cfg.arch + " " + cfg.name).c_str(), dev.name.c_str(), dev.backend.c_str(),
              (double)model.weight_bytes() / (1024.0 * 1024.0), model.decode_graphs() ? "on" : "off",
              opt.verify_batch, opt.prompt[0]);
  std::printf("| %-22s | %10s | %16s | %28s |\n", "pass", "ms", "decode steps", "max speed-up (all accepted)");
  std::printf("|------------------------|------------|------------------|------------------------------|\n");
  for (const auto& r : results) {
    const std::string name = r.k == 0 ? "decode (1 token)" : fmt::format("verify k={} ({} tokens)", r.k, r.k + 1);
    std::printf("| %-22s | %10.3f | %16.2f | %27.2fx |\n", name.c_str(), r.seconds * 1e3, r.ratio,
                (r.k + 1) / r.ratio);
  }
  std::printf("a verify pass pays off when a step emits more tokens (accepted drafts + 1) than its 'decode steps'\n");
  return 0;
}

int run_bench(const BenchOptions& opt) {
  RBEE_CHECK(opt.repetitions >= 1, "bench: --repetitions must be at least 1, got {}", opt.repetitions);
  for (int p : opt.prompt) RBEE_CHECK(p >= 0, "bench: --n-prompt values must be >= 0, got {}", p);
  for (int n : opt.gen) RBEE_CHECK(n >= 0, "bench: --n-gen values must be >= 0, got {}", n);
  const int longest = std::max(*std::max_element(opt.prompt.begin(), opt.prompt.end()),
                               *std::max_element(opt.gen.begin(), opt.gen.end()));
  RBEE_CHECK(longest > 0, "bench: nothing to measure (every --n-prompt and --n-gen is 0)");
  RBEE_CHECK(opt.bandwidth_mib >= 1 && opt.bandwidth_mib <= 65536,
             "bench: --bandwidth-mib must be in [1, 65536], got {}", opt.bandwidth_mib);
  RBEE_CHECK(opt.gemm_n == 0 || (opt.gemm_n >= 16 && opt.gemm_n <= 16384),
             "bench: --gemm-n must be in [16, 16384], got {}", opt.gemm_n);
  if (!opt.verify.empty()) return run_verify(opt);
  if (!opt.batch.empty()) return run_batched(opt);
  Workload work;
  // The positions the longest test needs (more when -c asks for more).
  const bool ctx_given = opt.model.ctx_option && opt.model.ctx_option->count() > 0;
  work.ctx_size = std::max(ctx_given ? opt.model.ctx_size : 0, longest);
  work.batch_tokens = std::max(1, *std::max_element(opt.prompt.begin(), opt.prompt.end()));
  LoadedModel loaded = load_model(opt.model, work);
  llm::Model& model = *loaded.model;
  const int capacity = loaded.cache->num_blocks() * loaded.cache->block_size();
  RBEE_CHECK(longest <= capacity, "bench: a test needs {} positions, the KV cache holds {} (model context {})",
             longest, capacity, model.config().max_positions);

  std::vector<BenchResult> results;
  for (int p : opt.prompt) {
    if (p > 0) results.push_back(bench_test(model, *loaded.cache, p, 0, opt.repetitions, opt.seed));
  }
  for (int n : opt.gen) {
    if (n > 0) results.push_back(bench_test(model, *loaded.cache, 0, n, opt.repetitions, opt.seed));
  }

  const llm::ModelConfig& cfg = model.config();
  const DType kv_dtype = loaded.cache->dtype();
  // A tensor split reads each rank's weights and KV heads on its own card at the same time: its tgN limit is the
  // most loaded card's bytes per token over one card's copy bandwidth (measured on the first device below), so
  // two cards can reach twice one card's t/s. One device and a layer split (cards take turns): every byte.
  const bool per_card = model.placement().split == llm::SplitMode::Tensor && model.placement().ranks() > 1;
  double card_share = 1.0;  // of decode_bytes_per_token: the most loaded card's weights and KV heads
  if (per_card) {
    const llm::KvLayout layout = model.kv_layout();
    card_share = 0.0;
    for (const auto& part : layout.layers.front()) {
      const double w = (double)model.weight_bytes_on(*part.device) / (double)model.weight_bytes();
      const double kv = (double)part.kv_heads / (double)cfg.n_kv_heads;
      card_share = std::max(card_share, std::max(w, kv));
    }
  }
  for (auto& r : results) {
    r.work = r.n_prompt > 0 ? prompt_flops(cfg, r.n_prompt)
                            : decode_bytes_per_token(cfg, model.weight_bytes(), kv_dtype, r.n_gen) * card_share;
  }
  HardwareRates hw;
  if (opt.limits) {
    const int gemm_n = opt.gemm_n > 0 ? opt.gemm_n : model.device().host_accessible() ? 1024 : 4096;
    hw = measure_hardware(model.device(), (int64_t)opt.bandwidth_mib << 20, gemm_n, 3, 0.25);
    for (auto& r : results) {
      // ppN: passes/s at the GEMM rate, times N tokens a pass; tgN: bytes/s over bytes per token.
      r.limit_ts = r.n_prompt > 0 ? hw.gemm_flops_per_s / r.work * r.n_prompt : hw.copy_bytes_per_s / r.work;
    }
  }

  const DeviceInfo dev = model.device().info();
  const int threads = dev.backend == "cpu" ? ThreadPool::global().size() : 0;
  const double mib = (double)model.weight_bytes() / (1024.0 * 1024.0);
  if (opt.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : results) {
      std::vector<double> samples_ts, samples_ns;
      for (double s : r.seconds) {
        samples_ts.push_back((double)(r.n_prompt + r.n_gen) / s);
        samples_ns.push_back(s * 1e9);
      }
      out.push_back({{"model", opt.model.model},
                     {"arch", model.config().arch},
                     {"model_size", model.weight_bytes()},
                     {"backend", dev.backend},
                     {"device", dev.name},
                     {"simd", dev.simd},
                     {"n_threads", threads},
                     {"kv_dtype", opt.model.kv_dtype},
                     {"test", r.test},
                     {"n_prompt", r.n_prompt},
                     {"n_gen", r.n_gen},
                     {"repetitions", opt.repetitions},
                     {"avg_ts", r.mean_ts},
                     {"stddev_ts", r.std_ts},
                     {"samples_ts", samples_ts},
                     {"samples_ns", samples_ns},
                     {"decode_graphs", model.decode_graphs()}});
      nlohmann::json& e = out.back();
      if (r.n_prompt > 0) e["flops_per_pass"] = r.work;
      else e["bytes_per_token"] = r.work;
      if (r.n_prompt == 0 && per_card) e["bytes_per_token_scope"] = "most loaded card (tensor split)";
      if (opt.limits) {
        e["limit"] = r.n_prompt > 0 ? "gemm" : "memory_bandwidth";
        e["limit_ts"] = r.limit_ts;
        e["fraction_of_limit"] = r.mean_ts / r.limit_ts;
        e["gemm_flops_per_s"] = hw.gemm_flops_per_s;
        e["gemm_n"] = hw.gemm_n;
        e["gemm_dtype"] = hw.gemm_dtype;
        e["copy_bytes_per_s"] = hw.copy_bytes_per_s;
        e["copy_method"] = hw.copy_method;
        e["copy_buffer_bytes"] = hw.copy_bytes;
      }
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("| %-28s | %10s | %-8s | %7s | %8s | %20s | %10s | %8s |\n", "model", "size", "backend", "threads",
              "test", "t/s", "limit t/s", "of limit");
  std::printf("| %.28s | %.10s | %.8s | %.7s | %.8s | %.20s | %.10s | %.8s |\n", "------------------------------",
              "----------", "--------", "-------", "--------", "--------------------", "----------", "--------");
  for (const auto& r : results) {
    std::printf("| %-28s | %6.1f MiB | %-8s | %7d | %8s | %9.2f ± %8.2f | %10.1f | %7.1f%% |\n",
                (cfg.arch + " " + cfg.name).substr(0, 28).c_str(), mib, dev.backend.c_str(), threads, r.test.c_str(),
                r.mean_ts, r.std_ts, r.limit_ts, r.limit_ts > 0 ? 100.0 * r.mean_ts / r.limit_ts : 0.0);
  }
  if (opt.limits) {
    std::printf("limits measured in this run on %s: GEMM %.1f GFLOP/s (%s %d^3), copy %.1f GB/s (read + write, %s, "
                "%.0f MiB)\n",
                dev.name.c_str(), hw.gemm_flops_per_s * 1e-9, hw.gemm_dtype.c_str(), hw.gemm_n, hw.copy_bytes_per_s * 1e-9,
                hw.copy_method.c_str(), (double)hw.copy_bytes / (1 << 20));
    std::printf("ppN limit: FLOPs of the pass / GEMM rate; tgN limit: bytes read per token / copy bandwidth%s\n",
                per_card ? " (tensor split: the most loaded card's bytes, one card's bandwidth)" : "");
  }
  std::printf("decode graphs: %s (%llu decode steps replayed from a graph)\n", model.decode_graphs() ? "on" : "off",
              (unsigned long long)model.decode_graph_replays());
  if (profile::enabled()) print_profile(model.device(), results, opt.repetitions);
  if (step_times::enabled()) std::printf("timed runs of the last test; %s", step_times::report().c_str());
  return 0;
}
}  // namespace

Command add_bench_command(CLI::App& app) {
  auto opt = std::make_shared<BenchOptions>();
  CLI::App* sub = app.add_subcommand("bench", "Measure prompt processing (ppN) and decode (tgN) tokens/s");
  add_model_options(*sub, opt->model);
  opt->model.quiet = true;
  sub->add_option("-p,--n-prompt", opt->prompt, "Prompt lengths to time (ppN), comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("-n,--n-gen", opt->gen, "Generated lengths to time (tgN), comma-separated: N greedy decode steps from an empty cache, each fed "
                  "the previous step's argmax (every step waits for the one before, on every device)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("-r,--repetitions", opt->repetitions, "Timed runs of each test (after one warm-up run)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--seed", opt->seed, "Seed of the random tokens")->capture_default_str();
  sub->add_flag("--json", opt->json, "Print the results as a JSON array (llama-bench's field names)");
  sub->add_option("--bandwidth-mib", opt->bandwidth_mib, "Buffer size of the memory copy bandwidth measurement")
      ->capture_default_str();
  sub->add_option("--gemm-n", opt->gemm_n,
                  "Matrix size of the GEMM rate measurement (n x n x n, F32 and F16; default 1024 on CPUs, 4096 on GPUs)")
      ->capture_default_str();
  sub->add_flag("!--no-limits", opt->limits, "Skip measuring the hardware limits (copy bandwidth, GEMM rate)");
  sub->add_option("--batch", opt->batch,
                  "Concurrent sequences, comma-separated: aggregate throughput of that many jobs through the "
                  "continuous-batching scheduler, each with its own --n-prompt prompt and --n-gen decode steps "
                  "(llama-batched-bench's PP/TG/B table)")
      ->delimiter(',');
  sub->add_option("--verify", opt->verify,
                  "Draft counts K, comma-separated: time one pass of K + 1 tokens with all logits (speculative "
                  "decoding's verification) against one decode step, at a context of --n-prompt positions")
      ->delimiter(',');
  sub->add_option("--verify-batch", opt->verify_batch, "Sequences in each --verify pass")->capture_default_str();
  sub->add_flag("--host-sampling", opt->host_sampling,
                "With --batch: sample every row from logits copied to the host (the path before sampling ran on the "
                "device), to compare against the default device sampling");
  return [opt] { return run_bench(*opt); };
}

}  // namespace rbee::cli
