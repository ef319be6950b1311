// Devices and backends (docs/DESIGN.md section 2).
//
// Registry -> Backend (cpu, cuda, rocm) -> Device (one per CPU / GPU). A Device allocates Buffers through
// its caching allocator, moves bytes to and from the host, and runs its Kernels. Model code only sees these
// interfaces: it never includes a vendor header and never #ifdefs a backend.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rbee/backend/buffer.h"
#include "rbee/backend/caching_allocator.h"
#include "rbee/backend/communicator.h"
#include "rbee/backend/kernels.h"
#include "rbee/core/error.h"

namespace rbee {

// Real facts about a device, as `rbee devices` prints them.
struct DeviceInfo {
  std::string backend;       // "cpu", "cuda", "rocm"
  int index = 0;
  std::string name;          // "AMD EPYC 7B13", "NVIDIA H100 80GB HBM3"
  std::string vendor;        // "AMD", "NVIDIA", "Intel"
  std::string arch;          // "x86_64", "sm_90", "gfx90a"
  int warp_size = 1;         // 32 (NVIDIA, RDNA) or 64 (CDNA, GCN); 1 for CPUs
  int compute_units = 0;     // CPU: threads used; GPU: SMs / CUs
  int64_t memory_total = 0;  // bytes
  int64_t memory_free = 0;   // bytes, read when info() is called
  std::string simd;          // CPU: SIMD target chosen at run time; empty for GPUs
  std::vector<std::pair<std::string, std::string>> extra;  // more facts, printed as key: value
};

class Device {
 public:
  virtual ~Device() = default;

  virtual DeviceInfo info() const = 0;
  // "cpu:0", "cuda:1"
  virtual const std::string& id() const = 0;
  // Whether host code may dereference this device's pointers (true for the CPU).
  virtual bool host_accessible() const = 0;

  // Uninitialized memory from the caching allocator. Throws OutOfMemory.
  virtual std::shared_ptr<Buffer> allocate(size_t bytes) = 0;
  // Uninitialized memory of exactly `bytes` (rounded up to 256), returned to the device, not its cache, when the
  // Buffer dies: for long-lived tensors (weights, KV cache), whose size buckets would waste up to a quarter
  // (CachingAllocator::allocate_exact). Throws OutOfMemory.
  virtual std::shared_ptr<Buffer> allocate_exact(size_t bytes) { return allocate(bytes); }
  virtual AllocatorStats memory_stats() const = 0;
  virtual void empty_cache() = 0;

  // Byte copies. They are ordered with this device's kernels; copies to the host wait for them.
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy_on_device(void* dst, const void* src, size_t bytes) = 0;
  // Waits until every kernel and copy issued so far has finished.
  virtual void synchronize() = 0;

  virtual Kernels& kernels() = 0;
  bool supports(OpKind op, std::span<const DType> dtypes) { return kernels().supports(op, dtypes); }
  bool supports(OpKind op, std::initializer_list<DType> dtypes) {
    return kernels().supports(op, std::span<const DType>(dtypes.begin(), dtypes.size()));
  }

  // ---- graphs: record the kernels and device copies of a step once, replay them with one launch ----
  // Between begin_graph_capture() and end_graph_capture() nothing runs: every kernel and copy_on_device issued
  // on this device is recorded, with the device addresses and shapes it had. Replaying re-runs exactly that,
  // reading whatever those addresses hold at replay time. The rule for callers (the decode step):
  //  - warm up first: run the step once uncaptured so that every tensor it allocates comes from the caching
  //    allocator's cache; a capture that needs new device memory throws (and so do synchronize(),
  //    copy_to_host(), copy_from_host() and empty_cache() while capturing);
  //  - keep every tensor the captured step reads or writes alive, unchanged in shape, for as long as the graph
  //    is replayed (inputs are refreshed in place before replay, e.g. token ids, positions, block tables);
  //  - release_graph() (or capture again) when shapes or buffers change.
  // If anything throws while capturing, call end_graph_capture() anyway: it leaves capture mode and throws.
  // Defaults (CPU): no graphs; the calls throw Unsupported.
  using GraphId = int64_t;
  virtual bool supports_graphs() const { return false; }
  virtual void begin_graph_capture() { graphs_unsupported(); }
  virtual GraphId end_graph_capture() { graphs_unsupported(); }
  virtual void replay_graph(GraphId) { graphs_unsupported(); }
  virtual void release_graph(GraphId) { graphs_unsupported(); }

 private:
  [[noreturn]] void graphs_unsupported() const {
    RBEE_THROW(ErrorCode::Unsupported, "device {} does not support graph capture", id());
  }
};

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
  // The process-wide registry. The CPU backend is always registered.
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
  Registry();
  std::vector<std::unique_ptr<Backend>> backends_;
  std::vector<void*> plugin_handles_;
  bool plugins_loaded_ = false;
};

// Entry point that a backend plug-in library exports (extern "C"): it registers its backend when its vendor
// runtime and at least one device are present, and returns a one-line description of what it found.
using BackendPluginEntry = const char* (*)(Registry& registry);
inline constexpr const char* kBackendPluginSymbol = "rbee_register_backend";

}  // namespace rbee
