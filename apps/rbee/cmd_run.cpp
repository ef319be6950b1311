// `rbee run`: generate text from a prompt, streaming it to stdout, with speed figures on stderr.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "commands.h"
#include "model_options.h"
#include "rbee/core/error.h"
#include "rbee/llm/generate.h"
#include "rbee/llm/prompt.h"

namespace rbee::cli {

namespace {
struct RunOptions {
  ModelOptions model;
  SamplingOptions sampling;
  std::string prompt;
  std::string prompt_file;
  bool chat = false;
  std::string system;
};

int run_run(const RunOptions& opt) {
  std::string prompt = opt.prompt;
  if (!opt.prompt_file.empty()) {
    std::ifstream in(opt.prompt_file, std::ios::binary);
    RBEE_CHECK_CODE(in.good(), ErrorCode::NotFound, "cannot read prompt file '{}'", opt.prompt_file);
    std::stringstream ss;
    ss << in.rdbuf();
    prompt = ss.str();
  }
  RBEE_CHECK(!prompt.empty(), "give a prompt with -p or -f");
  LoadedModel loaded = load_model(opt.model);
  llm::Model& model = *loaded.model;
  llm::GenerateRequest req;
  if (opt.chat) {
    std::vector<llm::ChatMessage> messages;
    if (!opt.system.empty()) messages.push_back({"system", opt.system});
    messages.push_back({"user", prompt});
    req.prompt = llm::chat_tokens(model, messages);
  } else {
    req.prompt = llm::text_tokens(model, prompt);
  }
  req.sampling = to_sampling_params(opt.sampling);
  req.max_tokens = opt.sampling.max_tokens;
  req.stop = opt.sampling.stop;
  req.ignore_eos = opt.sampling.ignore_eos;
  if (!opt.chat) {
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    std::fflush(stdout);
  }
  const llm::GenerateResult r = llm::generate(model, *loaded.cache, req, [](const std::string& piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::printf("\n");
  std::fflush(stdout);
  const int decoded = std::max<int>(0, (int)r.tokens.size() - 1);
  std::fprintf(stderr,
               "prompt: %d tokens in %.3f s (%.1f tokens/s) | decode: %zu tokens, %.1f tokens/s | "
               "time to first token: %.1f ms | stop: %s\n",
               r.prompt_tokens, r.prompt_seconds, r.prompt_tokens / std::max(r.prompt_seconds, 1e-9), r.tokens.size(),
               decoded / std::max(r.decode_seconds, 1e-9), r.time_to_first_token * 1000.0,
               llm::stop_reason_name(r.reason));
  return 0;
}
}  // namespace

Command add_run_command(CLI::App& app) {
  auto opt = std::make_shared<RunOptions>();
  CLI::App* sub = app.add_subcommand("run", "Generate text from a prompt and print speed figures");
  add_model_options(*sub, opt->model);
  add_sampling_options(*sub, opt->sampling);
  auto* p = sub->add_option("-p,--prompt", opt->prompt, "Prompt text");
  auto* f = sub->add_option("-f,--file", opt->prompt_file, "Read the prompt from a file");
  p->excludes(f);
  sub->add_flag("--chat", opt->chat, "Wrap the prompt as a user message in the model's chat template");
  sub->add_option("--system", opt->system, "System message (with --chat)");
  return [opt] { return run_run(*opt); };
}

}  // namespace rbee::cli
