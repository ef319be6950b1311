#include "backends/gpu/gpu_device.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "backends/gpu/collective.h"
#include "backends/gpu/gpu_kernels.h"
#include "rbee/backend/plugin_abi.h"
#include "rbee/core/tensor.h"
#include "rbee/core/log.h"
#include "rbee/core/env.h"

namespace rbee::gpu {

namespace {
constexpr size_t kStagingBytes = 8u << 20;  // copies larger than this go straight from pageable memory
}

GpuDevice::GpuDevice(int index) : index_(index), id_(fmt::format("{}:{}", RBEE_GPU_BACKEND_NAME, index)) {
  RBEE_GPU_CHECK(set_device(index));
  RBEE_GPU_CHECK(device_props(index, &props_));
  RBEE_GPU_CHECK(stream_create(&stream_));
  allocator_ = std::make_unique<CachingAllocator>(
      id_,
      [this](size_t bytes) -> void* {
        // A captured region must not allocate: the graph would replay into memory the allocator may hand out
        // again, and device_malloc cannot be recorded anyway.
        RBEE_CHECK(!capturing_, "{}: a graph capture needs {} bytes of new device memory; run the step once "
                   "before capturing so that its tensors come from the allocator's cache", id_, bytes);
        activate();
        void* p = nullptr;
        if (device_malloc(&p, bytes) != kSuccess) {
          get_last_error();  // clear the sticky-free error so later calls are not blamed
          return nullptr;
        }
        return p;
      },
      [this](void* p) {
        // Frees run from destructors, also while the process exits with the runtime already torn down: they
        // must not throw, and a free that fails then has nothing left to leak.
        if (set_device(index_) == kSuccess) device_free(p);
      });
  // RBEE_GPU_BLAS=off runs every GEMM on rbee's own kernel (to measure or test the ROCm fallback anywhere).
  if (!env::flag_or("RBEE_GPU_BLAS", true)) {
    blas_note_ = "vendor BLAS disabled by RBEE_GPU_BLAS=off; using rbee GEMM kernels";
  } else {
    blas_ = make_vendor_blas(&blas_note_);
  }
  log::debug("{}: {}", id_, blas_note_);
  // Opening cuDNN only resolves its entry points; its handle is made at the first convolution it takes.
  dnn_ = make_vendor_dnn(&dnn_note_);
  log::debug("{}: {}", id_, dnn_note_);
  kernels_ = std::make_unique<GpuKernels>(*this);
  {
    void* counters = nullptr;
    const size_t bytes = 2 * kSplitCounters * sizeof(int);
    RBEE_GPU_CHECK(device_malloc(&counters, bytes));
    RBEE_GPU_CHECK(memset_async(counters, 0, bytes, stream_));
    RBEE_GPU_CHECK(stream_synchronize(stream_));
    split_counters_ = static_cast<int*>(counters);
  }
  if (host_malloc_pinned(&staging_, kStagingBytes) == kSuccess) staging_bytes_ = kStagingBytes;
  else get_last_error();
}

GpuDevice::~GpuDevice() {
  // The process may be exiting with the driver already torn down: ignore errors here.
  release_held_memory();
  kernels_.reset();
  allocator_.reset();
  if (split_counters_) device_free(split_counters_);
  if (fork_event_) event_destroy(fork_event_);
  if (join_event_) event_destroy(join_event_);
  if (side_stream_) stream_destroy(side_stream_);
  if (stream_) stream_destroy(stream_);  // last: the BLAS handles were bound to it
}

void GpuDevice::release_held_memory() noexcept {
  try {
    if (set_device(index_) != kSuccess) {
      get_last_error();
      return;  // the runtime is gone, and its memory with it
    }
    if (side_stream_) stream_synchronize(side_stream_);
    if (stream_) stream_synchronize(stream_);  // no kernel or copy may still use what is freed below
    {
      std::lock_guard<std::mutex> lock(graphs_mutex_);
      for (auto& [id, graph] : graphs_) {
        graph_exec_destroy(graph.exec);
        graph.pool->detach();
      }
      graphs_.clear();
    }
    if (allocator_) allocator_->empty_cache();
    blas_.reset();  // cuBLASLt's workspace, then the cuBLASLt and cuBLAS handles (cublas_blas.cu)
    dnn_.reset();   // cuDNN's plans, zero bias and handle (cudnn_dnn.cu)
    {
      std::lock_guard<std::mutex> lock(staging_mutex_);
      if (staging_) host_free_pinned(staging_);
      staging_ = nullptr;
      staging_bytes_ = 0;
    }
    get_last_error();  // a failed free must not be blamed on a later call
  } catch (...) {
    // a mutex that cannot be locked: nothing more to release safely
  }
}

void GpuDevice::activate() const { RBEE_GPU_CHECK(set_device(index_)); }

DeviceInfo GpuDevice::info() const {
  activate();
  DeviceInfo d;
  d.backend = RBEE_GPU_BACKEND_NAME;
  d.index = index_;
  d.name = props_.name;
  d.vendor = RBEE_GPU_VENDOR;
  d.arch = props_.arch;
  d.warp_size = props_.warp_size;
  d.compute_units = props_.multiprocessors;
  size_t free_bytes = 0, total_bytes = 0;
  RBEE_GPU_CHECK(mem_get_info(&free_bytes, &total_bytes));
  d.memory_total = (int64_t)total_bytes;
  d.memory_free = (int64_t)free_bytes;
  d.extra.emplace_back("blas", blas_ ? blas_->name() : "none (rbee kernels)");
  d.extra.emplace_back("convolution library", dnn_ ? dnn_->name() : "none (rbee kernels)");
  const AllocatorStats s = allocator_->stats();
  d.extra.emplace_back("rbee allocator", fmt::format("{:.1f} MiB in use, {:.1f} MiB cached",
                                                     (double)s.in_use_bytes / (1 << 20),
                                                     (double)s.cached_bytes / (1 << 20)));
  return d;
}

std::shared_ptr<Buffer> GpuDevice::allocate(size_t bytes) {
  size_t rounded = 0;
  if (capturing_) {
    void* p = capture_pool_->allocate(bytes, &rounded);
    return std::make_shared<Buffer>(*this, p, rounded, capture_pool_);
  }
  void* p = allocator_->allocate(bytes, &rounded);
  return std::make_shared<Buffer>(*this, p, rounded, allocator_.get());
}

std::shared_ptr<Buffer> GpuDevice::allocate_exact(size_t bytes) {
  check_not_capturing("allocate_exact");
  size_t rounded = 0;
  void* p = allocator_->allocate_exact(bytes, &rounded);
  return std::make_shared<Buffer>(*this, p, rounded, allocator_->exact_releaser());
}

void GpuDevice::copy_from_host(void* dst, const void* host_src, size_t bytes) {
  check_not_capturing("copy_from_host");
  activate();
  std::lock_guard<std::mutex> lock(staging_mutex_);
  if (bytes <= staging_bytes_) {
    // The staging buffer may still feed an earlier copy: wait for the stream before reusing it.
    RBEE_GPU_CHECK(stream_synchronize(stream_));
    std::memcpy(staging_, host_src, bytes);
    RBEE_GPU_CHECK(memcpy_async(dst, staging_, bytes, stream_));
  } else {
    RBEE_GPU_CHECK(memcpy_async(dst, host_src, bytes, stream_));
    RBEE_GPU_CHECK(stream_synchronize(stream_));
  }
}

void GpuDevice::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  check_not_capturing("copy_to_host");
  activate();
  std::lock_guard<std::mutex> lock(staging_mutex_);
  if (bytes <= staging_bytes_) {
    RBEE_GPU_CHECK(memcpy_async(staging_, src, bytes, stream_));
    RBEE_GPU_CHECK(stream_synchronize(stream_));
    std::memcpy(host_dst, staging_, bytes);
  } else {
    RBEE_GPU_CHECK(memcpy_async(host_dst, src, bytes, stream_));
    RBEE_GPU_CHECK(stream_synchronize(stream_));
  }
}

void GpuDevice::copy_on_device(void* dst, const void* src, size_t bytes) {
  activate();
  RBEE_GPU_CHECK(memcpy_async(dst, src, bytes, stream()));
}

void GpuDevice::synchronize() {
  check_not_capturing("synchronize");
  activate();
  if (side_stream_) RBEE_GPU_CHECK(stream_synchronize(side_stream_));
  RBEE_GPU_CHECK(stream_synchronize(stream_));
}

void GpuDevice::begin_side() {
  RBEE_CHECK(!side_open_, "{}: begin_side while a side section is open", id_);
  activate();
  if (!side_stream_) {
    check_not_capturing("making the side stream");
    RBEE_GPU_CHECK(stream_create(&side_stream_));
    RBEE_GPU_CHECK(event_create_for_order(&fork_event_));
    RBEE_GPU_CHECK(event_create_for_order(&join_event_));
  }
  RBEE_GPU_CHECK(event_record(fork_event_, stream_));
  RBEE_GPU_CHECK(stream_wait_event(side_stream_, fork_event_));
  side_open_ = true;
  side_unjoined_ = true;
}

void GpuDevice::end_side() { side_open_ = false; }

void GpuDevice::join_side() {
  if (!side_unjoined_) return;
  activate();
  RBEE_GPU_CHECK(event_record(join_event_, side_stream_));
  RBEE_GPU_CHECK(stream_wait_event(stream_, join_event_));
  side_unjoined_ = false;
}

void GpuDevice::empty_cache() {
  check_not_capturing("empty_cache");
  allocator_->empty_cache();
  // The convolution / attention library's plans and handle go too when no captured graph may replay its kernels
  // (they are made again on the next call): so that a run that empties its caches before exiting holds nothing of
  // the library's at exit (tests/conformance/release_device_caches.cpp; compute-sanitizer's leak check).
  std::lock_guard<std::mutex> lock(graphs_mutex_);
  if (graphs_.empty() && dnn_) {
    RBEE_GPU_CHECK(stream_synchronize(stream_));  // no queued call of the library's may outlive its plans
    dnn_->release();
  }
}

void GpuDevice::check_not_capturing(const char* what) const {
  RBEE_CHECK(!capturing_, "{}: {} is not allowed while a graph capture is open", id_, what);
}

void GpuDevice::begin_graph_capture() {
  check_not_capturing("begin_graph_capture");
  activate();
  RBEE_GPU_CHECK(stream_begin_capture(stream_));
  {
    std::lock_guard<std::mutex> lock(graphs_mutex_);
    pools_.push_back(std::make_unique<GraphPool>(*allocator_));
    capture_pool_ = pools_.back().get();
  }
  capturing_ = true;
}

Device::GraphId GpuDevice::end_graph_capture() {
  RBEE_CHECK(capturing_, "{}: end_graph_capture without begin_graph_capture", id_);
  activate();
  side_open_ = false;
  // A capture must end with every forked stream joined to the one it began on.
  if (side_unjoined_) {
    if (event_record(join_event_, side_stream_) != kSuccess || stream_wait_event(stream_, join_event_) != kSuccess) {
      get_last_error();  // the capture is broken: stream_end_capture below reports it
    }
    side_unjoined_ = false;
  }
  Graph graph = nullptr;
  const Status s = stream_end_capture(stream_, &graph);
  capturing_ = false;
  GraphPool* pool = capture_pool_;
  capture_pool_ = nullptr;
  if (s != kSuccess || graph == nullptr) {
    get_last_error();  // a broken capture leaves its error behind: later calls must not be blamed
    if (graph) graph_destroy(graph);
    pool->detach();
    RBEE_THROW(ErrorCode::Backend, "{}: graph capture failed: {}", id_,
               s != kSuccess ? status_string(s) : "no graph was recorded");
  }
  GraphExec exec = nullptr;
  const Status si = graph_instantiate(&exec, graph);
  graph_destroy(graph);
  if (si != kSuccess) {
    get_last_error();
    pool->detach();
    RBEE_THROW(ErrorCode::Backend, "{}: instantiating the captured graph failed: {}", id_, status_string(si));
  }
  std::lock_guard<std::mutex> lock(graphs_mutex_);
  const GraphId id = next_graph_id_++;
  graphs_.emplace(id, GraphEntry{exec, pool});
  return id;
}

void GpuDevice::replay_graph(GraphId id) {
  check_not_capturing("replay_graph");
  activate();
  std::lock_guard<std::mutex> lock(graphs_mutex_);
  const auto it = graphs_.find(id);
  RBEE_CHECK(it != graphs_.end(), "{}: replay_graph: no graph {}", id_, id);
  RBEE_GPU_CHECK(graph_launch(it->second.exec, stream_));
}

void GpuDevice::release_graph(GraphId id) {
  check_not_capturing("release_graph");
  activate();
  RBEE_GPU_CHECK(stream_synchronize(stream_));  // a replay of it may still be running
  std::lock_guard<std::mutex> lock(graphs_mutex_);
  const auto it = graphs_.find(id);
  RBEE_CHECK(it != graphs_.end(), "{}: release_graph: no graph {}", id_, id);
  const GraphEntry graph = it->second;
  graphs_.erase(it);
  graph.pool->detach();  // after the synchronize above: no replay writes its blocks any more
  RBEE_GPU_CHECK(graph_exec_destroy(graph.exec));
}

Kernels& GpuDevice::kernels() { return *kernels_; }
void GpuDevice::copy_elements(const Tensor& src, Tensor& dst) { kernels_->copy_elements(src, dst); }

GpuBackend::GpuBackend() {
  int n = 0;
  if (::rbee::gpu::device_count(&n) != kSuccess) {
    get_last_error();
    n = 0;
  }
  for (int i = 0; i < n; ++i) devices_.push_back(std::make_unique<GpuDevice>(i));
}

Device& GpuBackend::device(int index) {
  RBEE_CHECK_CODE(index >= 0 && index < (int)devices_.size(), ErrorCode::NotFound,
                  "the {} backend has {} device(s), not {}", RBEE_GPU_BACKEND_NAME, devices_.size(), index);
  return *devices_[(size_t)index];
}

void GpuBackend::release_held_memory() noexcept {
  for (auto& d : devices_) d->release_held_memory();
}

std::unique_ptr<Communicator> GpuBackend::make_communicator(std::span<Device* const> devices, std::string* why) {
  std::vector<GpuDevice*> gpus;
  for (Device* d : devices) {
    GpuDevice* g = nullptr;
    for (auto& own : devices_) {
      if (own.get() == d) g = own.get();
    }
    if (!g) {
      if (why) *why = fmt::format("{} is not a device of the {} backend", d ? d->id() : "null", RBEE_GPU_BACKEND_NAME);
      return nullptr;
    }
    gpus.push_back(g);
  }
  try {
    return std::make_unique<GpuCommunicator>(std::move(gpus), why);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::InvalidArgument) throw;  // a bad RBEE_ALLREDUCE: say so, do not fall back
    if (why) *why = e.what();
    return nullptr;
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return nullptr;
  }
}

GpuDevice& gpu_device_of(const Tensor& t) { return static_cast<GpuDevice&>(t.device()); }

}  // namespace rbee::gpu

namespace {
// The registered backend, for the exit handler below (it lives in the process-wide registry until its static
// destructor runs, which is after the handler).
rbee::gpu::GpuBackend* g_backend_to_release = nullptr;
void release_devices_at_exit() {
  if (g_backend_to_release) g_backend_to_release->release_held_memory();
}
}  // namespace

// The plug-in ABI this library was built against (rbee/backend/plugin_abi.h): the engine asks before anything else.
extern "C" __attribute__((visibility("default"))) uint64_t rbee_backend_abi() { return rbee::kPluginAbiVersion; }

// Plug-in entry point (see rbee/backend/device.h).
extern "C" __attribute__((visibility("default"))) const char* rbee_register_backend(rbee::Registry& registry) {
  static std::string report;
  int n = 0;
  const rbee::gpu::Status s = rbee::gpu::device_count(&n);
  if (s != rbee::gpu::kSuccess || n == 0) {
    rbee::gpu::get_last_error();
    report = fmt::format("{} runtime present but no usable device ({})", RBEE_GPU_BACKEND_NAME,
                         s != rbee::gpu::kSuccess ? rbee::gpu::status_string(s) : "0 devices");
    return report.c_str();
  }
  auto backend = std::make_unique<rbee::gpu::GpuBackend>();
  report = fmt::format("registered {} with {} device(s)", RBEE_GPU_BACKEND_NAME, backend->device_count());
  rbee::gpu::GpuBackend* registered = backend.get();
  registry.add(std::move(backend));
  // The vendor runtime (static cudart, HIP) tears itself down, destroying the devices' contexts, from an exit
  // handler it registered when it started: before the registry's static destructor reaches the devices, whose
  // frees then fail, and everything they still held is reported as leaked (compute-sanitizer --leak-check full
  // listed the BLAS workspaces, handles and staging buffer). Exit handlers run in reverse order of registration,
  // so this one, registered after the runtime and the devices started, frees what the devices hold while the
  // runtime is still up, and after the exit handlers and static destructors of anything made later (which may
  // hand tensors back). (glibc runs it at dlclose, should the plug-in ever be unloaded.)
  if (!g_backend_to_release) {
    g_backend_to_release = registered;
    std::atexit(release_devices_at_exit);
  }
  return report.c_str();
}
