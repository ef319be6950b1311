// The GPU all-reduce's settings from one PATH+KNOB+... spec, for the tests and benches that run every path
// (tests/unit/test_collective.cpp, test_collective_gather.cpp, bench/gpu/bench_collective.cpp). PATH goes to
// RBEE_ALLREDUCE (auto, oneshot, flag, ll, nccl / rccl); each knob after a '+' to the variable it names:
//   block, thread, release  RBEE_ALLREDUCE_FENCE   (how the flag kernel orders its values before its flags)
//   scalar                  RBEE_ALLREDUCE_LOADS   (the peers' values as 4-byte loads)
//   wide, split             RBEE_ALLREDUCE_STORES  (16-byte units copied whole, or float by float)
//   a number                RBEE_ALLREDUCE_BLOCKS  (the flag and ll kernels' grid)
// docs/ENVIRONMENT.md describes the variables. The communicator reads them when it is made.
#pragma once

#include <cstdlib>
#include <string>

namespace rbee::test {

// Unsets every variable a spec can set.
inline void clear_allreduce_env() {
  for (const char* v : {"RBEE_ALLREDUCE", "RBEE_ALLREDUCE_FENCE", "RBEE_ALLREDUCE_BLOCKS", "RBEE_ALLREDUCE_LOADS",
                        "RBEE_ALLREDUCE_STORES"}) {
    ::unsetenv(v);
  }
}

// Clears them, then sets those `spec` names. Returns the first knob it does not know ("" when it knew them all);
// the knobs before it are set.
inline std::string apply_allreduce_spec(const std::string& spec) {
  clear_allreduce_env();
  size_t at = spec.find('+');
  ::setenv("RBEE_ALLREDUCE", spec.substr(0, at).c_str(), 1);
  while (at != std::string::npos) {
    const size_t next = spec.find('+', at + 1);
    const std::string knob = spec.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    if (knob == "block" || knob == "release" || knob == "thread") {
      ::setenv("RBEE_ALLREDUCE_FENCE", knob.c_str(), 1);
    } else if (knob == "scalar") {
      ::setenv("RBEE_ALLREDUCE_LOADS", "scalar", 1);
    } else if (knob == "wide" || knob == "split") {
      ::setenv("RBEE_ALLREDUCE_STORES", knob.c_str(), 1);
    } else if (!knob.empty() && knob.find_first_not_of("0123456789") == std::string::npos) {
      ::setenv("RBEE_ALLREDUCE_BLOCKS", knob.c_str(), 1);
    } else {
      return knob.empty() ? "(empty)" : knob;
    }
    at = next;
  }
  return "";
}

}  // namespace rbee::test
