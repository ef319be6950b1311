#include "rbee/backend/plugin_abi.h"

#include <fmt/format.h>

namespace rbee {

std::string plugin_abi_name(uint64_t version) {
  return fmt::format("r{}.{:08x}", (uint32_t)(version >> 32), (uint32_t)version);
}

}  // namespace rbee
