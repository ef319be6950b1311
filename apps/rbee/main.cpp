// rbee: the command-line tool (run, chat, bench, plan, devices, quantize, sd).
#include <cstdio>
#include <map>

#include "commands.h"
#include "rbee/core/error.h"
#include "rbee/core/log.h"

int main(int argc, char** argv) {
  rbee::log::init_from_env();
  CLI::App app{"rbee: LLM and Stable Diffusion inference on CPUs, NVIDIA and AMD GPUs"};
  app.set_version_flag("--version", std::string("rbee ") + RBEE_VERSION);
  app.require_subcommand(1);
  std::map<CLI::App*, rbee::cli::Command> commands;
  auto add = [&](rbee::cli::Command cmd) { commands[app.get_subcommands({}).back()] = std::move(cmd); };
  add(rbee::cli::add_devices_command(app));
  add(rbee::cli::add_run_command(app));
  add(rbee::cli::add_chat_command(app));
  add(rbee::cli::add_quantize_command(app));
  add(rbee::cli::add_random_model_command(app));
  add(rbee::cli::add_compare_command(app));
  add(rbee::cli::add_bench_command(app));
  add(rbee::cli::add_plan_command(app));
  add(rbee::cli::add_sd_command(app));
  CLI11_PARSE(app, argc, argv);
  try {
    for (auto& [sub, run] : commands) {
      if (sub->parsed()) return run();
    }
  } catch (const rbee::Error& e) {
    std::fprintf(stderr, "rbee: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rbee: unexpected error: %s\n", e.what());
    return 1;
  }
  return 0;
}
