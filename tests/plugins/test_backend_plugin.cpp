// A stand-in backend plug-in for the plug-in ABI check (tests/unit/test_plugin_abi.cpp), built three ways:
//   current      exports the engine's own ABI version
//   stale        exports the version of the op table without its last entry, as a plug-in built before that
//                op was added would
//   unversioned  exports no version (a plug-in from before the check existed)
// Its registration entry registers nothing and says that it ran, so a test sees whether the engine called it.
#include <cstdint>
#include <string_view>

#include "rbee/backend/plugin_abi.h"

namespace rbee {
class Registry;
}

namespace {
// The op-table text up to and without its last line.
constexpr std::string_view without_last_entry(std::string_view text) {
  text.remove_suffix(1);  // the last entry's '\n'
  return text.substr(0, text.rfind('\n') + 1);
}
}  // namespace

#if defined(RBEE_TEST_PLUGIN_CURRENT)
extern "C" __attribute__((visibility("default"))) uint64_t rbee_backend_abi() { return rbee::kPluginAbiVersion; }
#elif defined(RBEE_TEST_PLUGIN_STALE)
extern "C" __attribute__((visibility("default"))) uint64_t rbee_backend_abi() {
  static_assert(rbee::plugin_abi_version(rbee::kPluginInterfaceRevision,
                                         without_last_entry(rbee::plugin_abi_detail::kOpTableText)) !=
                rbee::kPluginAbiVersion);
  return rbee::plugin_abi_version(rbee::kPluginInterfaceRevision,
                                  without_last_entry(rbee::plugin_abi_detail::kOpTableText));
}
#endif

extern "C" __attribute__((visibility("default"))) const char* rbee_register_backend(rbee::Registry&) {
  return "test plug-in: registration entry ran";
}
