// rbee::GraphCache (rbee/backend/graph_cache.h) on a fake graph device: warm-up, capture and replay per key, one
// graph per key, least-recently-used eviction, clear(), and the eager fall-backs when a capture fails or the device
// refuses graphs. The fake records the step's "kernels" (host closures) while capturing and re-runs them on replay,
// the semantics of Device's graph calls (rbee/core/device.h) without a GPU; memory, copies and kernels go to the
// CPU device. Every step gets other inputs, so a stale or skipped replay shows in its output.
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/harness.h"
#include "rbee/backend/graph_cache.h"

namespace rbee {
namespace {

class FakeGraphDevice final : public Device {
 public:
  explicit FakeGraphDevice(Device& cpu) : cpu_(cpu) {}

  // Runs `kernel` now, or records it into the graph being captured.
  void launch(std::function<void()> kernel) {
    if (capturing_) {
      recording_.push_back(std::move(kernel));
    } else {
      kernel();
    }
  }
  bool capturing() const { return capturing_; }

  bool refuse_capture = false;  // begin_graph_capture() throws, as on a device that cannot capture at all
  bool break_end = false;       // end_graph_capture() throws, as for a capture the driver invalidated
  int begins = 0, releases = 0;
  size_t live_graphs() const { return graphs_.size(); }

  bool supports_graphs() const override { return true; }
  void begin_graph_capture() override {
    ++begins;
    if (refuse_capture) RBEE_THROW(ErrorCode::Unsupported, "fake device refuses graph capture");
    capturing_ = true;
    recording_.clear();
  }
  GraphId end_graph_capture() override {
    capturing_ = false;
    if (break_end) RBEE_THROW(ErrorCode::Backend, "fake capture invalidated");
    graphs_[next_] = std::move(recording_);
    return next_++;
  }
  void replay_graph(GraphId id) override {
    for (const auto& kernel : graphs_.at(id)) kernel();
  }
  void release_graph(GraphId id) override {
    ASSERT_EQ(graphs_.erase(id), 1u) << "graph " << id << " released twice or never recorded";
    ++releases;
  }

  DeviceInfo info() const override { return cpu_.info(); }
  const std::string& id() const override { return id_; }
  bool host_accessible() const override { return true; }
  std::shared_ptr<Buffer> allocate(size_t bytes) override { return cpu_.allocate(bytes); }
  AllocatorStats memory_stats() const override { return cpu_.memory_stats(); }
  void empty_cache() override { cpu_.empty_cache(); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { cpu_.copy_from_host(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { cpu_.copy_to_host(dst, src, bytes); }
  void copy_on_device(void* dst, const void* src, size_t bytes) override { cpu_.copy_on_device(dst, src, bytes); }
  void synchronize() override {}
  Kernels& kernels() override { return cpu_.kernels(); }
  void copy_elements(const Tensor& src, Tensor& dst) override { cpu_.copy_elements(src, dst); }

 private:
  Device& cpu_;
  std::string id_ = "fake:0";
  bool capturing_ = false;
  std::vector<std::function<void()>> recording_;
  std::map<GraphId, std::vector<std::function<void()>>> graphs_;
  GraphId next_ = 1;
};

// A step keyed by its length n: out F32 [n] = 2 * in + 1, with in F32 [n] the entry's slot.
struct Key {
  int64_t n = 0;
  bool operator==(const Key&) const = default;
  std::string to_string() const { return "of length " + std::to_string(n); }
};
struct Slots {
  Tensor in;
};
using Cache = GraphCache<Key, Slots>;

class GraphCacheTest : public ::testing::Test {
 protected:
  Device& cpu = test::cpu_device();
  FakeGraphDevice device{cpu};
  int bodies = 0;              // body() calls, eager or captured
  bool throw_in_capture = false;  // body() throws while the device captures
  float next_input = 0.f;

  // One step of `n` values through `cache`; checks its output against the inputs it was given.
  void step(Cache& cache, int64_t n) {
    std::vector<float> x((size_t)n);
    for (float& v : x) v = next_input += 1.f;
    const Tensor out = cache.run(
        Key{n}, [&] { return Slots{Tensor::empty({n}, DType::F32, cpu)}; },
        [&](Slots& s) { cpu.copy_from_host(s.in.data(), x.data(), x.size() * sizeof(float)); },
        [&](const Slots& s) {
          ++bodies;
          if (throw_in_capture && device.capturing()) RBEE_THROW(ErrorCode::Unsupported, "op cannot be captured");
          Tensor y = Tensor::from_vector(std::vector<float>((size_t)n, -1e30f), {n}, cpu);  // poisoned
          device.launch([in = s.in, y] {
            for (int64_t i = 0; i < in.numel(); ++i) y.data_ptr<float>()[i] = 2.f * in.data_ptr<float>()[i] + 1.f;
          });
          return y;
        });
    const std::vector<float> got = out.to_vector<float>();
    ASSERT_EQ(got.size(), x.size());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], 2.f * x[i] + 1.f) << "step of length " << n << ", i " << i;
  }
};

TEST_F(GraphCacheTest, WarmsUpThenCapturesThenReplays) {
  Cache cache(device, 4, "test step");
  step(cache, 4);  // warm-up: eager
  EXPECT_EQ(cache.captures(), 0u);
  EXPECT_EQ(cache.replays(), 0u);
  EXPECT_EQ(bodies, 1);
  step(cache, 4);  // captured, then replayed once
  EXPECT_EQ(cache.captures(), 1u);
  EXPECT_EQ(cache.replays(), 1u);
  EXPECT_EQ(bodies, 2);
  for (int i = 0; i < 3; ++i) step(cache, 4);  // replays only: body() is not called again
  EXPECT_EQ(cache.captures(), 1u);
  EXPECT_EQ(cache.replays(), 4u);
  EXPECT_EQ(bodies, 2);
  EXPECT_EQ(device.live_graphs(), 1u);
}

TEST_F(GraphCacheTest, ReplayedOutputIsACopy) {
  Cache cache(device, 4, "test step");
  step(cache, 3);
  step(cache, 3);
  const std::vector<float> x = {10.f, 20.f, 30.f};
  const Tensor first = cache.run(
      Key{3}, [&]() -> Slots { throw std::logic_error("entry exists"); },
      [&](Slots& s) { cpu.copy_from_host(s.in.data(), x.data(), x.size() * sizeof(float)); },
      [&](const Slots&) -> Tensor { throw std::logic_error("replays"); });
  step(cache, 3);  // replays again: rewrites the graph's output, not `first`
  EXPECT_EQ(first.to_vector<float>(), (std::vector<float>{21.f, 41.f, 61.f}));
}

// copy_out false (a tensor split's ranks > 0, whose logits nobody reads): a replay hands out the graph's own output,
// which the next replay rewrites; the values of the step itself are right.
TEST_F(GraphCacheTest, ReplayWithoutCopyOutHandsOutTheGraphsOutput) {
  Cache cache(device, 4, "test step");
  step(cache, 3);
  step(cache, 3);
  auto replay = [&](float base) {
    const std::vector<float> x = {base, base + 1.f, base + 2.f};
    return cache.run(
        Key{3}, [&]() -> Slots { throw std::logic_error("entry exists"); },
        [&](Slots& s) { cpu.copy_from_host(s.in.data(), x.data(), x.size() * sizeof(float)); },
        [&](const Slots&) -> Tensor { throw std::logic_error("replays"); }, false);
  };
  const Tensor first = replay(10.f);
  EXPECT_EQ(first.to_vector<float>(), (std::vector<float>{21.f, 23.f, 25.f}));
  const Tensor second = replay(20.f);
  EXPECT_EQ(second.data(), first.data()) << "no copy: the same output tensor";
  EXPECT_EQ(first.to_vector<float>(), (std::vector<float>{41.f, 43.f, 45.f}));
}

TEST_F(GraphCacheTest, OneGraphPerKey) {
  Cache cache(device, 4, "test step");
  for (int round = 0; round < 3; ++round) {
    step(cache, 4);
    step(cache, 8);
  }
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.captures(), 2u);
  EXPECT_EQ(cache.replays(), 4u);  // rounds 2 and 3 of both keys
  EXPECT_EQ(bodies, 4);            // warm-up and capture of each key
  EXPECT_EQ(device.live_graphs(), 2u);
}

TEST_F(GraphCacheTest, EvictsTheLeastRecentlyUsedEntry) {
  Cache cache(device, 2, "test step");
  for (int64_t n : {1, 2}) {
    step(cache, n);
    step(cache, n);
  }
  step(cache, 1);  // key 1 is now the most recently used: key 2 goes first
  step(cache, 3);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(device.releases, 1);
  EXPECT_EQ(device.live_graphs(), 1u);  // key 1's; key 3 only warmed up
  const int before = bodies;
  step(cache, 1);  // still recorded: replayed
  EXPECT_EQ(bodies, before);
  step(cache, 2);  // evicted (key 3 goes): warms up again, then records again
  step(cache, 2);
  EXPECT_EQ(bodies, before + 2);
  EXPECT_EQ(cache.captures(), 3u);
  EXPECT_EQ(device.releases, 1);  // key 3 had no graph to release
  EXPECT_EQ(device.live_graphs(), 2u);
}

TEST_F(GraphCacheTest, ClearAndDestructorReleaseEveryGraph) {
  {
    Cache cache(device, 4, "test step");
    for (int64_t n : {2, 5}) {
      step(cache, n);
      step(cache, n);
    }
    ASSERT_EQ(device.live_graphs(), 2u);
    cache.clear();
    EXPECT_EQ(device.live_graphs(), 0u);
    EXPECT_EQ(cache.size(), 0u);
    step(cache, 2);  // a new entry: warm-up again
    EXPECT_EQ(cache.captures(), 2u);
    step(cache, 2);
    EXPECT_EQ(cache.captures(), 3u);
    EXPECT_EQ(device.live_graphs(), 1u);
  }
  EXPECT_EQ(device.live_graphs(), 0u);
  EXPECT_EQ(device.releases, 3);
}

TEST_F(GraphCacheTest, BodyFailingUnderCaptureRunsThatKeyEagerly) {
  Cache cache(device, 4, "test step");
  throw_in_capture = true;
  step(cache, 4);
  step(cache, 4);  // capture fails; the step is re-run eagerly and its output is right
  EXPECT_EQ(cache.captures(), 0u);
  EXPECT_EQ(device.live_graphs(), 0u);  // the broken capture's graph was released
  EXPECT_EQ(device.begins, 1);
  EXPECT_EQ(bodies, 3);
  step(cache, 4);  // eager from now on: no second attempt
  EXPECT_EQ(device.begins, 1);
  EXPECT_EQ(bodies, 4);
  EXPECT_TRUE(cache.enabled());
  throw_in_capture = false;
  step(cache, 6);  // another key still records
  step(cache, 6);
  EXPECT_EQ(cache.captures(), 1u);
  step(cache, 4);
  EXPECT_EQ(device.begins, 2);
}

TEST_F(GraphCacheTest, FailedEndOfCaptureRunsThatKeyEagerly) {
  Cache cache(device, 4, "test step");
  device.break_end = true;
  step(cache, 4);
  step(cache, 4);
  EXPECT_EQ(cache.captures(), 0u);
  EXPECT_EQ(bodies, 3);  // warm-up, capture, eager re-run
  step(cache, 4);
  EXPECT_EQ(device.begins, 1);
  EXPECT_EQ(cache.replays(), 0u);
}

TEST_F(GraphCacheTest, DeviceRefusingCaptureTurnsTheCacheOff) {
  Cache cache(device, 4, "test step");
  device.refuse_capture = true;
  step(cache, 4);
  step(cache, 4);
  EXPECT_FALSE(cache.enabled());
  step(cache, 4);
  step(cache, 7);
  step(cache, 7);
  EXPECT_EQ(device.begins, 1);
  EXPECT_EQ(cache.captures(), 0u);
  EXPECT_EQ(bodies, 5);
}

TEST_F(GraphCacheTest, MadeDisabledNeverCaptures) {
  Cache cache(device, 4, "test step", /*enabled=*/false);
  for (int i = 0; i < 3; ++i) step(cache, 4);
  EXPECT_EQ(device.begins, 0);
  EXPECT_EQ(bodies, 3);
}

TEST_F(GraphCacheTest, RejectsZeroEntries) {
  EXPECT_THROW(Cache(device, 0, "test step"), Error);
}

}  // namespace
}  // namespace rbee
