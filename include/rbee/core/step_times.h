// Host wall time of the phases of a generation step, on when the environment has RBEE_STEP_TIMES=1: where the host
// spends a step (building inputs, waking the tensor-split ranks, uploading, launching the decode graph, waiting
// for the sampled ids, the scheduler's per-job work), without synchronizing anything, so the run keeps its speed
// and the timings show what the host adds between two device steps. `rbee bench` prints the table at the end.
//
// A Phase adds the host time between its construction and its destruction to a row named by `name` (a string
// literal); rows are per name, summed over threads (each rank's thread times its own rows). Off, a Phase costs
// one branch. add() records a duration measured elsewhere (e.g. a thread's wake-up latency).
#pragma once

#include <chrono>
#include <string>

namespace rbee::step_times {

bool enabled();

// Seconds since an arbitrary epoch (steady clock): for add().
double now();

// Adds `seconds` to row `name` (one call).
void add(const char* name, double seconds);

class Phase {
 public:
  explicit Phase(const char* name) : name_(enabled() ? name : nullptr), t0_(name_ ? now() : 0.0) {}
  ~Phase() {
    if (name_) add(name_, now() - t0_);
  }
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;

 private:
  const char* name_;
  double t0_;
};

// The rows so far, in the order they were first recorded: name, calls, total ms, us per call.
std::string report();
void reset();

}  // namespace rbee::step_times
