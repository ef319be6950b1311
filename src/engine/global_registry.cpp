// The process-wide registry, created with the CPU backend in it. This file is where the engine's layers meet
// (the backend's Registry and the cpu layer's backend), so neither of them includes the other.
#include "backends/cpu/cpu_backend.h"
#include "rbee/backend/device.h"

namespace rbee {

Registry& Registry::global() {
  static Registry registry(cpu::make_cpu_backend());
  return registry;
}

}  // namespace rbee
