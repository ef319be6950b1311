// The CPU device: host memory through a caching allocator, synchronous "streams", facts from /proc.
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <cstring>
#include <fstream>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "rbee/core/error.h"
#include "rbee/core/thread_pool.h"

namespace rbee::cpu {

bool CpuKernels::supports(OpKind op, std::span<const DType> dtypes) const { return op_dtypes_valid(op, dtypes); }

namespace {

constexpr size_t kHostAlignment = 64;

std::string read_cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

// MemTotal / MemAvailable from /proc/meminfo, in bytes.
int64_t read_meminfo(const char* key) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  int64_t kib = 0;
  std::string unit;
  while (in >> name >> kib >> unit) {
    if (name == key) return kib * 1024;
  }
  return 0;
}

std::string vendor_of(const std::string& model) {
  if (model.find("AMD") != std::string::npos) return "AMD";
  if (model.find("Intel") != std::string::npos) return "Intel";
  return "unknown";
}

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(int index)
      : index_(index),
        id_(fmt::format("cpu:{}", index)),
        allocator_(
            id_,
            [](size_t bytes) -> void* {
              return std::aligned_alloc(kHostAlignment, (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment);
            },
            [](void* p) { std::free(p); }),
        model_(read_cpu_model()) {}

  DeviceInfo info() const override {
    DeviceInfo d;
    d.backend = "cpu";
    d.index = index_;
    d.name = model_;
    d.vendor = vendor_of(model_);
#if defined(__x86_64__)
    d.arch = "x86_64";
#elif defined(__aarch64__)
    d.arch = "aarch64";
#else
    d.arch = "unknown";
#endif
    d.warp_size = 1;
    d.compute_units = ThreadPool::global().size();
    d.memory_total = read_meminfo("MemTotal:");
    d.memory_free = read_meminfo("MemAvailable:");
    d.simd = simd_target_name();
    d.extra.emplace_back("cpus online", std::to_string(sysconf(_SC_NPROCESSORS_ONLN)));
    return d;
  }
  const std::string& id() const override { return id_; }
  bool host_accessible() const override { return true; }

  std::shared_ptr<Buffer> allocate(size_t bytes) override {
    size_t rounded = 0;
    void* p = allocator_.allocate(bytes, &rounded);
    return std::make_shared<Buffer>(*this, p, rounded, &allocator_);
  }
  std::shared_ptr<Buffer> allocate_exact(size_t bytes) override {
    size_t rounded = 0;
    void* p = allocator_.allocate_exact(bytes, &rounded);
    return std::make_shared<Buffer>(*this, p, rounded, allocator_.exact_releaser());
  }
  AllocatorStats memory_stats() const override { return allocator_.stats(); }
  void empty_cache() override { allocator_.empty_cache(); }

  void copy_from_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_on_device(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void synchronize() override {}
  Kernels& kernels() override { return kernels_; }
  void copy_elements(const Tensor& src, Tensor& dst) override { kernels_.copy_elements(src, dst); }

 private:
  int index_;
  std::string id_;
  CachingAllocator allocator_;
  std::string model_;
  CpuKernels kernels_;
};

// One device, the host (cpu:0), listed by device_count(); device(i) for i in 1..kCpuInstances-1 are further
// instances of the same host, made on first use, each with its own caching allocator and id (so
// RBEE_FAULT_ALLOC_DEVICE=cpu:1 can give one of them a small budget): they let a model be split over "devices"
// (layers, tensor shards) and checked against the one-device run on machines without GPUs.
constexpr int kCpuInstances = 8;

class CpuBackend final : public Backend {
 public:
  CpuBackend() { devices_[0] = std::make_unique<CpuDevice>(0); }
  std::string_view name() const override { return "cpu"; }
  int device_count() const override { return 1; }
  Device& device(int index) override {
    RBEE_CHECK_CODE(index >= 0 && index < kCpuInstances, ErrorCode::NotFound,
                    "the cpu backend has device 0 (the host) and instances 1-{} of it, not {}", kCpuInstances - 1,
                    index);
    std::lock_guard<std::mutex> lock(mutex_);
    auto& d = devices_[(size_t)index];
    if (!d) d = std::make_unique<CpuDevice>(index);
    return *d;
  }

 private:
  std::mutex mutex_;
  std::array<std::unique_ptr<CpuDevice>, kCpuInstances> devices_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace rbee::cpu
