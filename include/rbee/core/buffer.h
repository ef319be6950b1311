// Buffer: one block of memory on one device. Tensors share Buffers through shared_ptr; the last owner
// returns the memory to the device's caching allocator (or releases an external mapping such as an mmap).
#pragma once

#include <cstddef>
#include <memory>

namespace rbee {

class Device;

// Where a Buffer's memory goes back to when the Buffer dies.
class BufferReleaser {
 public:
  virtual ~BufferReleaser() = default;
  virtual void release(void* ptr, size_t bytes) = 0;
};

class Buffer {
 public:
  // Memory owned through `releaser` (usually the device's caching allocator).
  Buffer(Device& device, void* ptr, size_t bytes, BufferReleaser* releaser)
      : device_(&device), ptr_(ptr), bytes_(bytes), releaser_(releaser) {}
  // Memory owned by someone else (an mmap, a caller's array); `keepalive` keeps that owner alive.
  Buffer(Device& device, void* ptr, size_t bytes, std::shared_ptr<const void> keepalive)
      : device_(&device), ptr_(ptr), bytes_(bytes), keepalive_(std::move(keepalive)) {}
  ~Buffer() {
    if (releaser_) releaser_->release(ptr_, bytes_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  Device& device() const { return *device_; }
  void* data() const { return ptr_; }
  size_t size() const { return bytes_; }

 private:
  Device* device_;
  void* ptr_;
  size_t bytes_;
  BufferReleaser* releaser_ = nullptr;
  std::shared_ptr<const void> keepalive_;
};

}  // namespace rbee
