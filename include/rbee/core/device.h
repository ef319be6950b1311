// The device interface: what tensors need from the device their memory lives on, and what a backend's device
// provides besides (facts, its kernels, graphs). Backends (rbee/backend/device.h) implement it; core code only
// calls through it, so it depends on no backend.
//
// A Device allocates Buffers through its caching allocator, moves bytes to and from the host, and runs its
// Kernels. Model code only sees this interface: it never includes a vendor header and never #ifdefs a backend.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rbee/core/buffer.h"
#include "rbee/core/error.h"

namespace rbee {

class Kernels;  // rbee/backend/kernels.h
class Tensor;

// Memory a device's caching allocator accounts for.
struct AllocatorStats {
  int64_t in_use_bytes = 0;     // handed out and not yet released
  int64_t cached_bytes = 0;     // released and kept for reuse
  int64_t peak_in_use_bytes = 0;
  int64_t raw_allocations = 0;  // calls that reached the raw allocator
  int64_t exact_bytes = 0;      // of in_use_bytes: exact-size blocks (allocate_exact), never cached
  int64_t limit_bytes = -1;     // RBEE_FAULT_ALLOC_LIMIT on this device (-1: none): the raw allocator's ceiling
};

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

  // The device's implementation of the op table (rbee/backend/kernels.h).
  virtual Kernels& kernels() = 0;
  // dst = src element by element: same shape, src any strides, dst contiguous of dst's dtype (converted when it
  // differs from src's; plain dtypes only then). Both on this device. What Tensor's clone(), copy_from() and
  // to(dtype) run; backends answer with their copy and cast kernels.
  virtual void copy_elements(const Tensor& src, Tensor& dst) = 0;

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

}  // namespace rbee
