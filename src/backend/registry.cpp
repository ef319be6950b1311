#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "rbee/backend/device.h"
#include "rbee/backend/plugin_abi.h"
#include "rbee/core/error.h"
#include "rbee/core/log.h"

namespace rbee {

Registry::Registry(std::unique_ptr<Backend> cpu) { backends_.push_back(std::move(cpu)); }

void Registry::add(std::unique_ptr<Backend> backend) {
  RBEE_CHECK(backend != nullptr, "null backend");
  RBEE_CHECK(find(backend->name()) == nullptr, "backend '{}' is already registered", backend->name());
  backends_.push_back(std::move(backend));
}

Backend* Registry::find(std::string_view name) {
  for (auto& b : backends_) {
    if (b->name() == name) return b.get();
  }
  return nullptr;
}

std::vector<Backend*> Registry::backends() {
  std::vector<Backend*> out;
  for (auto& b : backends_) out.push_back(b.get());
  return out;
}

Device& Registry::cpu() { return backends_.front()->device(0); }

namespace {
std::vector<std::filesystem::path> plugin_dirs() {
  std::vector<std::filesystem::path> dirs;
  if (const char* env = std::getenv("RBEE_BACKEND_PATH")) {
    std::string_view rest = env;
    while (!rest.empty()) {
      const size_t colon = rest.find(':');
      const std::string_view part = rest.substr(0, colon);
      if (!part.empty()) dirs.emplace_back(std::string(part));
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back(exe.parent_path());
  return dirs;
}
}  // namespace

std::vector<std::string> Registry::load_plugins() {
  std::vector<std::string> report;
  if (plugins_loaded_) return report;
  plugins_loaded_ = true;
  for (const char* backend : {"cuda", "rocm"}) {
    const std::string file = fmt::format("librbee_backend_{}.so", backend);
    bool found = false;
    for (const auto& dir : plugin_dirs()) {
      const auto path = dir / file;
      std::error_code ec;
      if (!std::filesystem::exists(path, ec)) continue;
      found = true;
      report.push_back(load_plugin(path.string()));
      break;
    }
    if (!found) report.push_back(fmt::format("{}: not built or not installed ({} not found)", backend, file));
  }
  return report;
}

std::string Registry::load_plugin(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) return fmt::format("{}: not loaded ({})", path, dlerror());
  // The version check comes first: a plug-in built against another kernel interface would call through a
  // different Kernels vtable and OpKind numbering, so none of its other code may run.
  auto abi = reinterpret_cast<BackendPluginAbi>(dlsym(handle, kBackendAbiSymbol));
  const uint64_t built = abi ? abi() : 0;
  if (built != kPluginAbiVersion) {
    dlclose(handle);
    const std::string line = fmt::format(
        "{}: refused: built against kernel interface {}, this engine has {}; rebuild the plug-in from the same tree",
        path, abi ? plugin_abi_name(built) : fmt::format("(none: no {} symbol)", kBackendAbiSymbol),
        plugin_abi_name(kPluginAbiVersion));
    log::warn("event=plugin_refused {}", line);
    return line;
  }
  auto entry = reinterpret_cast<BackendPluginEntry>(dlsym(handle, kBackendPluginSymbol));
  if (!entry) {
    dlclose(handle);
    return fmt::format("{}: no entry point {}", path, kBackendPluginSymbol);
  }
  try {
    std::string line = fmt::format("{}: {}", path, entry(*this));
    plugin_handles_.push_back(handle);
    return line;
  } catch (const Error& e) {
    return fmt::format("{}: failed to register ({})", path, e.what());
  }
}

Device& Registry::select(std::string_view backend, int device_index, std::string* reason) {
  auto usable = [&](std::string_view name) {
    Backend* b = find(name);
    return b && b->device_count() > 0 ? b : nullptr;
  };
  if (backend == "auto") {
    for (const char* name : {"cuda", "rocm"}) {
      if (Backend* b = usable(name)) {
        RBEE_CHECK_CODE(device_index >= 0 && device_index < b->device_count(), ErrorCode::NotFound,
                        "device {} requested but the {} backend has {} device(s)", device_index, name,
                        b->device_count());
        if (reason) *reason = fmt::format("auto: picked {} (the {} backend found {} device(s))", name, name,
                                          b->device_count());
        return b->device(device_index);
      }
    }
    if (reason) *reason = "auto: picked cpu (no CUDA or ROCm device was found)";
    return cpu();
  }
  Backend* b = find(backend);
  RBEE_CHECK_CODE(b != nullptr, ErrorCode::NotFound,
                  "backend '{}' is not available (known: cpu, cuda, rocm; loaded: {})", backend, [&] {
                    std::string names;
                    for (auto& x : backends_) names += (names.empty() ? "" : ", ") + std::string(x->name());
                    return names;
                  }());
  RBEE_CHECK_CODE(device_index >= 0, ErrorCode::NotFound, "device {} requested: indexes start at 0", device_index);
  // The backend checks the index (the cpu backend has instances beyond device_count()).
  Device& device = b->device(device_index);
  if (reason) *reason = fmt::format("{} requested explicitly", backend);
  return device;
}

}  // namespace rbee
