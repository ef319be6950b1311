// The SD models' layer profiler is the engine's (rbee/core/profile.h): RBEE_OP_PROFILE=1.
#pragma once

#include "rbee/core/profile.h"

namespace rbee::sd {
namespace profile = ::rbee::profile;
}  // namespace rbee::sd
