// `rbee devices`: lists every backend and device with its real facts.
#include <cstdio>

#include "commands.h"
#include "rbee/backend/device.h"
#include "rbee/core/log.h"

namespace rbee::cli {

namespace {
std::string gib(int64_t bytes) { return fmt::format("{:.1f} GiB", (double)bytes / (1024.0 * 1024 * 1024)); }

struct DevicesOptions {
  bool verbose = false;
};

int run_devices(const DevicesOptions& opt) {
  Registry& registry = Registry::global();
  const auto report = registry.load_plugins();
  for (Backend* backend : registry.backends()) {
    std::printf("backend %s: %d device(s)\n", std::string(backend->name()).c_str(), backend->device_count());
    for (int i = 0; i < backend->device_count(); ++i) {
      const DeviceInfo d = backend->device(i).info();
      std::printf("  [%s] %s\n", backend->device(i).id().c_str(), d.name.c_str());
      std::printf("      vendor: %s  arch: %s", d.vendor.c_str(), d.arch.c_str());
      if (d.warp_size > 1) std::printf("  warp size: %d", d.warp_size);
      std::printf("\n");
      if (d.backend == "cpu") {
        std::printf("      threads used: %d  SIMD target: %s\n", d.compute_units, d.simd.c_str());
      } else {
        std::printf("      compute units: %d\n", d.compute_units);
      }
      std::printf("      memory: %s total, %s free\n", gib(d.memory_total).c_str(), gib(d.memory_free).c_str());
      for (const auto& [key, value] : d.extra) std::printf("      %s: %s\n", key.c_str(), value.c_str());
    }
  }
  if (opt.verbose) {
    for (const auto& line : report) std::printf("plugin %s\n", line.c_str());
  }
  std::string reason;
  Device& chosen = registry.select("auto", 0, &reason);
  std::printf("--backend auto would use %s (%s)\n", chosen.id().c_str(), reason.c_str());
  return 0;
}
}  // namespace

Command add_devices_command(CLI::App& app) {
  auto opt = std::make_shared<DevicesOptions>();
  CLI::App* sub = app.add_subcommand("devices", "List backends and devices with their facts");
  sub->add_flag("-v,--verbose", opt->verbose, "Also say which GPU backend libraries were found and why they loaded or not");
  return [opt] { return run_devices(*opt); };
}

}  // namespace rbee::cli
