// Subcommands of the `rbee` CLI. Each registers its options on the CLI11 app and returns the function that
// runs it (exit code). Every command lives in its own cmd_<name>.cpp.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace rbee::cli {

using Command = std::function<int()>;

Command add_devices_command(CLI::App& app);
Command add_run_command(CLI::App& app);
Command add_chat_command(CLI::App& app);
Command add_quantize_command(CLI::App& app);
Command add_random_model_command(CLI::App& app);
Command add_compare_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_plan_command(CLI::App& app);
Command add_sd_command(CLI::App& app);

}  // namespace rbee::cli
