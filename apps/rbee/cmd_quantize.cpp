// `rbee quantize`: re-encode a GGUF model's weights in a block type (or F16/BF16/F32).
// `rbee random-model`: write a random-weight GGUF at a real model's shape, for benchmarks.
#include <unistd.h>

#include <cstdio>

#include "commands.h"
#include "rbee/core/error.h"
#include "rbee/llm/model_files.h"

namespace rbee::cli {

namespace {
std::function<void(float)> terminal_progress(const char* what) {
  if (!isatty(STDERR_FILENO)) return {};
  return [what](float f) {
    std::fprintf(stderr, "\r%s %3d%%", what, (int)(f * 100 + 0.5f));
    if (f >= 1.0f) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

DType parse_weight_type(const std::string& name) {
  const auto t = dtype_from_name(name);
  RBEE_CHECK(t.has_value(), "unknown type '{}' (q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, f16, "
             "bf16, f32)", name);
  return *t;
}

struct QuantizeOptions {
  std::string input, output, type = "q4_0";
};
struct RandomOptions {
  std::string preset, output, type = "q4_0";
  uint64_t seed = 1;
  int context_length = 0;  // 0: the preset's
};
}  // namespace

Command add_quantize_command(CLI::App& app) {
  auto opt = std::make_shared<QuantizeOptions>();
  CLI::App* sub = app.add_subcommand("quantize", "Convert a GGUF model's 2-D weights to a block type");
  sub->add_option("-m,--model", opt->input, "Input .gguf")->required()->check(CLI::ExistingFile);
  sub->add_option("-o,--output", opt->output, "Output .gguf")->required();
  sub->add_option("--type", opt->type, "q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, f16, bf16, f32")
      ->capture_default_str();
  return [opt] {
    llm::quantize_model(opt->input, opt->output, parse_weight_type(opt->type), terminal_progress("quantizing"));
    std::printf("wrote %s\n", opt->output.c_str());
    return 0;
  };
}

Command add_random_model_command(CLI::App& app) {
  auto opt = std::make_shared<RandomOptions>();
  CLI::App* sub = app.add_subcommand(
      "random-model", "Write a random-weight GGUF at a real model's shape (llama2-7b, llama2-70b, llama3-8b, "
                      "llama3.2-1b, qwen2.5-1.5b, tiny-llama, tiny-qwen2, tiny-gemma3) for benchmarks");
  sub->add_option("--preset", opt->preset, "Shape preset")->required();
  sub->add_option("-o,--output", opt->output, "Output .gguf")->required();
  sub->add_option("--type", opt->type, "Weight type (norms stay f32)")->capture_default_str();
  sub->add_option("--seed", opt->seed, "Seed")->capture_default_str();
  sub->add_option("--ctx-length", opt->context_length,
                  "Context length written into the file (default: the preset's, e.g. 4096 for llama2-70b)")
      ->check(CLI::PositiveNumber);
  return [opt] {
    llm::write_random_model(opt->preset, parse_weight_type(opt->type), opt->output, opt->seed,
                            terminal_progress("writing"), opt->context_length);
    std::printf("wrote %s\n", opt->output.c_str());
    return 0;
  };
}

}  // namespace rbee::cli
