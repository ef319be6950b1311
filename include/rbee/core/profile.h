// Per-op / per-layer wall-time breakdown, on when the environment has RBEE_OP_PROFILE=1. The SD models wrap
// their layers (src/sd/nn.cpp), the LLM runtime its decoder ops (src/llm/models/blocks.cpp; decode graphs are
// off while profiling, so every step runs eagerly).
//
// A Scope around one call synchronizes the device before and after it and adds the elapsed time to a table keyed
// by (kind, shape text), so the table shows where a step spends its time on any backend. Synchronizing after
// every call removes the overlap of host launches with device work: the sum is an upper bound of the unprofiled
// time, each row includes one launch and one synchronization (see the "null" row that `rbee bench` adds: the
// same around a one-element fill), and time outside every Scope is not listed. Off, a Scope costs one branch.
#pragma once

#include <string>

#include "rbee/core/tensor.h"

namespace rbee::profile {

bool enabled();

class Scope {
 public:
  // `x` gives the device, the dtype and the shape in the key; `detail` a second shape for the key (a weight's),
  // formatted only when profiling is on.
  Scope(const char* kind, const Tensor& x, const Shape& detail = {});
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Device* device_ = nullptr;
  std::string key_;
  double t0_ = 0;
};

// The table so far, rows sorted by total time: kind, shape, calls, total ms, ms per call, share of the listed sum.
std::string report();
void reset();

}  // namespace rbee::profile
