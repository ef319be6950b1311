// Backends and the registry (docs/DESIGN.md section 2): Registry -> Backend (cpu, cuda, rocm) -> Device (one per
// CPU / GPU; the interface is rbee/core/device.h). Including this header gives the whole device API: Device,
// Kernels, the op enums and the caching allocator backends build their devices on.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rbee/backend/caching_allocator.h"
#include "rbee/backend/communicator.h"
#include "rbee/backend/kernels.h"
#include "rbee/core/device.h"
#include "rbee/core/error.h"

namespace rbee {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual int device_count() const = 0;
  virtual Device& device(int index) = 0;
  // Collectives over `devices` (distinct devices of this backend, rank = position), or nullptr with `why` set when
  // this backend has none to offer for them (the caller then uses make_host_communicator).
  virtual std::unique_ptr<Communicator> make_communicator(std::span<Device* const> devices, std::string* why) {
    (void)devices;
    if (why) *why = fmt::format("the {} backend has no device collectives", name());
    return nullptr;
  }
};

class Registry {
 public:
  // The process-wide registry. The CPU backend is always registered (src/engine/global_registry.cpp, where the
  // engine's layers meet).
  static Registry& global();

  void add(std::unique_ptr<Backend> backend);
  // nullptr when no backend of that name is registered.
  Backend* find(std::string_view name);
  std::vector<Backend*> backends();
  Device& cpu();

  // Loads the GPU backend libraries (librbee_backend_cuda.so, librbee_backend_rocm.so) that are present next
  // to the executable or in RBEE_BACKEND_PATH and whose vendor runtime loads. Safe to call more than once.
  // Returns one line per library explaining what happened.
  std::vector<std::string> load_plugins();
  // Loads one backend library: refuses it (without running any of its code but the version query) when it was
  // built against another plug-in ABI (rbee/backend/plugin_abi.h), else calls its registration entry. Returns
  // the line load_plugins() reports for it.
  std::string load_plugin(const std::string& path);

  // "auto" prefers cuda, then rocm, then cpu. Throws NotFound for an unknown or absent backend or device.
  // The cpu backend also answers indexes 1-7: further instances of the host CPU, each with its own allocator and
  // id ("cpu:1"), so that splitting a model over devices can be run and tested without GPUs.
  // `reason` receives a sentence saying why this device was picked.
  Device& select(std::string_view backend, int device_index, std::string* reason = nullptr);

 private:
  explicit Registry(std::unique_ptr<Backend> cpu);
  std::vector<std::unique_ptr<Backend>> backends_;
  std::vector<void*> plugin_handles_;
  bool plugins_loaded_ = false;
};

// Entry point that a backend plug-in library exports (extern "C"): it registers its backend when its vendor
// runtime and at least one device are present, and returns a one-line description of what it found.
using BackendPluginEntry = const char* (*)(Registry& registry);
inline constexpr const char* kBackendPluginSymbol = "rbee_register_backend";

}  // namespace rbee
