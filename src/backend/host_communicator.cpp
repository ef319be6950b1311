// The host communicator: all_reduce_sum through host memory. Each rank copies its tensor to its own host slot
// and waits at a barrier; the last rank to arrive adds the slots in rank order into the result; after a second
// barrier every rank copies the result back to its device. Works for any mix of devices (CPU instances, GPUs of
// different vendors); all_gather_columns the same way, each column taken from its owner's copy. It synchronizes the host with each device, so it cannot be recorded into a device graph.
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string_view>

#include "rbee/backend/column_gather.h"
#include "rbee/backend/communicator.h"
#include "rbee/backend/device.h"
#include "rbee/core/error.h"

namespace rbee {

namespace {

class HostCommunicator final : public Communicator, public ColumnGather {
 public:
  explicit HostCommunicator(std::vector<Device*> devices)
      : devices_(std::move(devices)), slots_(devices_.size()) {
    RBEE_CHECK(!devices_.empty(), "host communicator: no devices");
    for (Device* d : devices_) RBEE_CHECK(d != nullptr, "host communicator: null device");
  }

  int size() const override { return (int)devices_.size(); }
  Device& device(int rank) const override { return *devices_.at((size_t)rank); }
  std::string name() const override { return "host"; }
  bool capturable() const override { return false; }

  void all_reduce_sum(int rank, const Tensor& x) override {
    RBEE_CHECK(rank >= 0 && rank < size(), "all_reduce_sum: rank {} of {}", rank, size());
    RBEE_CHECK(x.dtype() == DType::F32 && x.is_contiguous(), "all_reduce_sum: needs a contiguous f32 tensor, got {}",
               x.to_string());
    RBEE_CHECK(&x.device() == devices_[(size_t)rank], "all_reduce_sum: rank {} passed a tensor on {}, not {}", rank,
               x.device().id(), devices_[(size_t)rank]->id());
    exchange("all_reduce_sum", rank, x, [&](size_t n) {
      // Sum in rank order so every rank gets the same bits.
      result_.assign(slots_[0].begin(), slots_[0].end());
      for (size_t r = 1; r < slots_.size(); ++r) {
        const float* src = slots_[r].data();
        for (size_t i = 0; i < n; ++i) result_[i] += src[i];
      }
    });
  }

  // Each rank's whole tensor to its slot; the last rank in takes each column from its owner's slot.
  void all_gather_columns(int rank, const Tensor& x, std::span<const int64_t> bounds) override {
    check_gather_columns(*this, rank, x, bounds);
    const size_t rows = (size_t)x.dim(0), cols = (size_t)x.dim(1);
    exchange("all_gather_columns", rank, x, [&](size_t n) {
      result_.resize(n);
      for (size_t p = 0; p < slots_.size(); ++p) {
        const size_t c0 = (size_t)bounds[p], width = (size_t)bounds[p + 1] - c0;
        for (size_t r = 0; r < rows && width > 0; ++r) {
          std::memcpy(&result_[r * cols + c0], &slots_[p][r * cols + c0], width * sizeof(float));
        }
      }
    });
  }

  void abort(const std::string& why) override {
    std::lock_guard lock(mutex_);
    if (aborted_.empty()) aborted_ = why.empty() ? "aborted" : why;
    cv_.notify_all();
  }

 private:
  // One round of a collective: rank's x (f32, n values) into its slot; the last rank in checks that every rank
  // passed n values and runs combine(n), which writes result_ from the slots; every rank copies result_ into its x.
  template <class Combine>
  void exchange(std::string_view op, int rank, const Tensor& x, Combine&& combine) {
    const size_t n = (size_t)x.numel();
    std::vector<float>& mine = slots_[(size_t)rank];
    mine.resize(n);
    x.copy_to_host(mine.data(), n * sizeof(float));
    arrive([&] {
      for (const auto& s : slots_) RBEE_CHECK(s.size() == n, "{}: ranks passed {} and {} elements", op, s.size(), n);
      combine(n);
    });
    x.device().copy_from_host(x.data(), result_.data(), n * sizeof(float));
    // Nobody may start the next round (and overwrite result_) before every rank has copied this one out.
    arrive([] {});
  }

  // Barrier: the last of size() arrivals runs `last` (under the lock) and releases the others. Throws once the
  // group is aborted.
  template <class F>
  void arrive(F&& last) {
    std::unique_lock lock(mutex_);
    check_aborted();
    const uint64_t gen = generation_;
    if (++arrived_ == size()) {
      try {
        last();
      } catch (const std::exception& e) {
        aborted_ = e.what();
        cv_.notify_all();
        throw;
      }
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != gen || !aborted_.empty(); });
    check_aborted();
  }
  void check_aborted() const {
    RBEE_CHECK_CODE(aborted_.empty(), ErrorCode::Backend, "host communicator: the group was aborted ({})", aborted_);
  }

  std::vector<Device*> devices_;
  std::vector<std::vector<float>> slots_;  // one per rank, written by that rank's thread only
  std::vector<float> result_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::string aborted_;
};

}  // namespace

std::unique_ptr<Communicator> make_host_communicator(std::vector<Device*> devices) {
  return std::make_unique<HostCommunicator>(std::move(devices));
}

}  // namespace rbee
