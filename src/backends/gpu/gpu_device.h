// The GPU device and backend, written once for CUDA and HIP over backends/gpu/platform.h.
// One GpuDevice per GPU: a non-blocking stream that every kernel and copy of that device is ordered on, a
// caching allocator over device memory, a pinned staging buffer for host copies, and the vendor BLAS.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/gpu/blas.h"
#include "backends/gpu/platform.h"
#include "rbee/backend/device.h"

namespace rbee::gpu {

class GpuKernels;

class GpuDevice final : public Device {
 public:
  explicit GpuDevice(int index);
  ~GpuDevice() override;

  DeviceInfo info() const override;
  const std::string& id() const override { return id_; }
  bool host_accessible() const override { return false; }
  std::shared_ptr<Buffer> allocate(size_t bytes) override;
  AllocatorStats memory_stats() const override { return allocator_->stats(); }
  void empty_cache() override { allocator_->empty_cache(); }
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void copy_on_device(void* dst, const void* src, size_t bytes) override;
  void synchronize() override;
  Kernels& kernels() override;

  int index() const { return index_; }
  Stream stream() const { return stream_; }
  const DeviceProps& props() const { return props_; }
  Blas* blas() const { return blas_.get(); }
  // Makes this device current on the calling thread (every entry point calls it).
  void activate() const;

 private:
  int index_;
  std::string id_;
  DeviceProps props_{};
  Stream stream_ = nullptr;
  std::unique_ptr<CachingAllocator> allocator_;
  std::unique_ptr<Blas> blas_;
  std::string blas_note_;
  std::unique_ptr<GpuKernels> kernels_;
  // Pinned staging for host copies: pageable memory would make every copy a synchronous, slower one.
  std::mutex staging_mutex_;
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
};

class GpuBackend final : public Backend {
 public:
  GpuBackend();
  std::string_view name() const override { return RBEE_GPU_BACKEND_NAME; }
  int device_count() const override { return (int)devices_.size(); }
  Device& device(int index) override;

 private:
  std::vector<std::unique_ptr<GpuDevice>> devices_;
};

// The device a tensor lives on, as a GpuDevice.
GpuDevice& gpu_device_of(const Tensor& t);

}  // namespace rbee::gpu
