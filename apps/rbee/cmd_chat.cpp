// `rbee chat`: an interactive conversation through the model's chat template. Each turn re-renders the whole
// conversation; the reply streams as it is generated. Commands: /reset (forget the conversation), /exit.
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "model_options.h"
#include "rbee/core/error.h"
#include "rbee/llm/generate.h"
#include "rbee/llm/prompt.h"

namespace rbee::cli {

namespace {
struct ChatOptions {
  ModelOptions model;
  SamplingOptions sampling;
  std::string system;
};

int run_chat(const ChatOptions& opt) {
  LoadedModel loaded = load_model(opt.model);
  llm::Model& model = *loaded.model;
  std::vector<llm::ChatMessage> history;
  if (!opt.system.empty()) history.push_back({"system", opt.system});
  std::fprintf(stderr, "chatting with %s; /reset clears the conversation, /exit or Ctrl-D quits\n",
               model.config().name.c_str());
  std::string line;
  while (true) {
    std::fprintf(stdout, "> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      history.resize(opt.system.empty() ? 0 : 1);
      continue;
    }
    if (line.empty()) continue;
    history.push_back({"user", line});
    llm::GenerateRequest req;
    req.prompt = llm::chat_tokens(model, history);
    req.sampling = to_sampling_params(opt.sampling);
    const int room = loaded.cache->num_blocks() * loaded.cache->block_size() - (int)req.prompt.size();
    if (room <= 0) {
      std::fprintf(stderr, "the conversation no longer fits the context (%zu tokens); /reset to start over\n",
                   req.prompt.size());
      history.pop_back();
      continue;
    }
    req.max_tokens = std::min(opt.sampling.max_tokens, room);
    req.stop = opt.sampling.stop;
    const auto r = llm::generate(model, *loaded.cache, req, [](const std::string& piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    });
    std::printf("\n");
    history.push_back({"assistant", r.text});
  }
  return 0;
}
}  // namespace

Command add_chat_command(CLI::App& app) {
  auto opt = std::make_shared<ChatOptions>();
  CLI::App* sub = app.add_subcommand("chat", "Chat with a model interactively through its chat template");
  add_model_options(*sub, opt->model);
  add_sampling_options(*sub, opt->sampling);
  sub->add_option("--system", opt->system, "System message");
  return [opt] { return run_chat(*opt); };
}

}  // namespace rbee::cli
