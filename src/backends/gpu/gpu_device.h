// The GPU device and backend, written once for CUDA and HIP over backends/gpu/platform.h.
// One GpuDevice per GPU: a non-blocking stream that every kernel and copy of that device is ordered on (and a side
// stream for work that may overlap it: rbee/backend/side_stream.h), a caching allocator over device memory, a
// pinned staging buffer for host copies, the vendor BLAS and the vendor
// convolution library (dnn.h; cuDNN where installed).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/gpu/blas.h"
#include "backends/gpu/dnn.h"
#include "backends/gpu/graph_pool.h"
#include "backends/gpu/platform.h"
#include "rbee/backend/device.h"
#include "rbee/backend/side_stream.h"

namespace rbee::gpu {

// Split-K tile counters a device holds per stream (GpuDevice::split_counters): output tiles of one launch at most.
inline constexpr int64_t kSplitCounters = 4096;

class GpuKernels;

class GpuDevice final : public Device, public SideStream {
 public:
  explicit GpuDevice(int index);
  ~GpuDevice() override;

  DeviceInfo info() const override;
  const std::string& id() const override { return id_; }
  bool host_accessible() const override { return false; }
  std::shared_ptr<Buffer> allocate(size_t bytes) override;
  std::shared_ptr<Buffer> allocate_exact(size_t bytes) override;
  AllocatorStats memory_stats() const override { return allocator_->stats(); }
  void empty_cache() override;
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void copy_on_device(void* dst, const void* src, size_t bytes) override;
  void synchronize() override;
  Kernels& kernels() override;
  void copy_elements(const Tensor& src, Tensor& dst) override;

  // Graphs (contract in rbee/backend/device.h) over the platform's stream capture: the device's stream is
  // captured in thread-local mode, so only the capturing thread's work on this device is recorded. Every
  // kernel of the decode path (qmatmul with M <= 8, paged attention, kv_cache_write, elementwise ops) is
  // capture-safe: no synchronization, no host reads of device data, launch shapes from tensor shapes only,
  // temporaries from the caching allocator (cache hits after a warm-up run; a miss throws while capturing).
  // Memory allocated while capturing belongs to the graph until release_graph (graph_pool.h says why).
  bool supports_graphs() const override { return true; }
  void begin_graph_capture() override;
  GraphId end_graph_capture() override;
  void replay_graph(GraphId id) override;
  void release_graph(GraphId id) override;
  bool capturing() const { return capturing_; }

  // The side stream (contract in rbee/backend/side_stream.h): a second non-blocking stream, made at the first
  // begin_side; begin_side records an event on the main stream that the side stream waits for, join_side one on
  // the side stream that the main stream waits for. Inside a graph capture the side stream joins the capture at
  // the fork and its work becomes a parallel branch of the graph.
  void begin_side() override;
  void end_side() override;
  void join_side() override;
  bool side_open() const override { return side_open_; }

  int index() const { return index_; }
  // The stream work issued now goes to: the side stream inside begin_side / end_side, else the main stream. Every
  // kernel, BLAS call and collective takes its stream from here.
  Stream stream() const { return side_open_ ? side_stream_ : stream_; }
  const DeviceProps& props() const { return props_; }
  Blas* blas() const { return blas_.get(); }
  // kSplitCounters split-K tile counters of the stream() now in use (the main stream's or the side stream's):
  // zero between launches; a kernel that counts on them sets each back to zero before it ends (gemm_skinny.cu).
  int* split_counters() const { return split_counters_ + (side_open_ ? kSplitCounters : 0); }
  // The convolution library (cuDNN), or nullptr; dnn_note() says why when absent (for one log line).
  Dnn* dnn() const { return dnn_.get(); }
  const std::string& dnn_note() const { return dnn_note_; }
  // Makes this device current on the calling thread (every entry point calls it).
  void activate() const;
  // Frees what the device holds for the process, in this order: the graphs' executables (their pools' free
  // blocks go back to the cache), the caching allocator's cached blocks, the vendor BLAS (its workspaces, then
  // its handles with their own allocations), the convolution library (its plans, zero bias and handle), the pinned
  // staging buffer; waits for the stream first. Blocks of live tensors stay theirs. Afterwards the device still
  // answers every call (GEMMs and convolutions take rbee's kernels, host copies go unstaged). Idempotent; never
  // throws (errors are ignored: the runtime may be going down). Runs from the destructor and from the plug-in's
  // exit handler (rbee_register_backend says why).
  void release_held_memory() noexcept;

 private:
  int index_;
  std::string id_;
  DeviceProps props_{};
  Stream stream_ = nullptr;
  // The side stream and its fork / join events (made at the first begin_side); side_open_: inside begin_side /
  // end_side; side_unjoined_: side work issued since the last join_side.
  Stream side_stream_ = nullptr;
  Event fork_event_ = nullptr;
  Event join_event_ = nullptr;
  bool side_open_ = false;
  bool side_unjoined_ = false;
  std::unique_ptr<CachingAllocator> allocator_;
  std::unique_ptr<Blas> blas_;
  int* split_counters_ = nullptr;  // 2 x kSplitCounters: main stream, side stream
  std::string blas_note_;
  std::unique_ptr<Dnn> dnn_;
  std::string dnn_note_;
  std::unique_ptr<GpuKernels> kernels_;
  // Pinned staging for host copies: pageable memory would make every copy a synchronous, slower one.
  std::mutex staging_mutex_;
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
  // Graphs: instantiated executables and their memory by id; the pool of the open capture. Pools live as long
  // as the device: tensors of a released graph may still return blocks through them.
  struct GraphEntry {
    GraphExec exec;
    GraphPool* pool;
  };
  std::atomic<bool> capturing_{false};
  GraphPool* capture_pool_ = nullptr;
  std::mutex graphs_mutex_;
  std::unordered_map<GraphId, GraphEntry> graphs_;
  std::vector<std::unique_ptr<GraphPool>> pools_;
  GraphId next_graph_id_ = 1;
  // Throws InvalidArgument naming `what` while a capture is open (calls that cannot be recorded).
  void check_not_capturing(const char* what) const;
};

class GpuBackend final : public Backend {
 public:
  GpuBackend();
  std::string_view name() const override { return RBEE_GPU_BACKEND_NAME; }
  int device_count() const override { return (int)devices_.size(); }
  Device& device(int index) override;
  // NCCL / RCCL and the peer-to-peer one-shot kernel (backends/gpu/collective.h).
  std::unique_ptr<Communicator> make_communicator(std::span<Device* const> devices, std::string* why) override;
  // GpuDevice::release_held_memory on every device.
  void release_held_memory() noexcept;

 private:
  std::vector<std::unique_ptr<GpuDevice>> devices_;
};

// The device a tensor lives on, as a GpuDevice.
GpuDevice& gpu_device_of(const Tensor& t);

}  // namespace rbee::gpu
