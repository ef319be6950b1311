// Running the built rbee binary from a CLI test: the exit code and everything it printed.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace rbee::test {

struct CliRun {
  int status = -1;  // exit code, or -1 when the process did not exit normally (signal, crash)
  std::string output;
};

// Runs `command` through the shell and collects its stdout (append " 2>&1" to the command for stderr too).
inline CliRun run_command(const std::string& command) {
  CliRun r;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t got = 0;
  while ((got = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, got);
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

}  // namespace rbee::test
