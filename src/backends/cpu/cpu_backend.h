// The CPU backend: always built in, always registered; the reference every other backend is tested against.
#pragma once

#include <memory>

#include "rbee/backend/device.h"

namespace rbee::cpu {

std::unique_ptr<Backend> make_cpu_backend();

// SIMD target Highway picked for this CPU at run time ("AVX2", "AVX3", "SSE4", "EMU128" ...).
const char* simd_target_name();

}  // namespace rbee::cpu
