// The side stream (rbee/backend/side_stream.h): work issued between begin_side and end_side starts after everything
// issued before begin_side, and main-stream work after join_side starts after the side work. Checked with chains of
// elementwise ops whose inputs are written right before the fork and whose outputs come from poisoned blocks (a
// side op that ran early would read or leave NaN); on the CPU (no side stream: the calls do nothing, issue order)
// and on every GPU device present (the emulator runs every launch when issued, so there it checks the bookkeeping,
// not the overlap; on GPUs the ordering too, and a side branch recorded into a graph). With two GPU devices, the
// peer-to-peer all-reduce on the side stream beside main-stream work, then one on the main stream: bit-equal to
// the f32 sum in rank order on both ranks, round after round (the kernels' round counters see one order per rank).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/harness.h"
#include "common/on_ranks.h"
#include "rbee/backend/communicator.h"
#include "rbee/backend/device.h"
#include "rbee/backend/side_stream.h"
#include "rbee/core/tensor.h"
#include "rbee/ops.h"

namespace rbee {
namespace {

constexpr int64_t kN = 1 << 18;  // elements per op: long enough for a GPU's side op to still run when main's starts

Backend* gpu_backend(int devices) {
  Registry& registry = Registry::global();
  registry.load_plugins();
  for (const char* name : {"cuda", "rocm"}) {
    Backend* b = registry.find(name);
    if (b && b->device_count() >= devices) return b;
  }
  return nullptr;
}

// Every element of t equals `want`.
void expect_all(const Tensor& t, float want, const std::string& what) {
  const std::vector<float> v = t.to_vector<float>();
  size_t wrong = 0;
  for (float x : v) wrong += x != want;
  EXPECT_EQ(wrong, 0u) << what << ": " << wrong << " of " << v.size() << " elements are not " << want
                       << " (first: " << v[0] << ")";
}

// a2 = 2 written right before the fork; side: b = 3 a2 + 1 (two ops); main meanwhile: c = 2 a2; after the join:
// d = b + c = 11. Twice in a row (the second fork must also wait for the first join's main work).
void fork_join_chain(Device& dev) {
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    test::poison_allocations(dev, kN * sizeof(float), 8);
    const Tensor a = ops::full({kN}, 1.0, DType::F32, dev);
    const Tensor a2 = ops::affine(a, 1.0, 1.0);
    Tensor b;
    {
      SideSection side(dev);
      EXPECT_EQ(has_side_stream(dev), dynamic_cast<SideStream*>(&dev) != nullptr);
      b = ops::affine(ops::affine(a2, 3.0, 0.0), 1.0, 1.0);
    }
    const Tensor c = ops::affine(a2, 2.0, 0.0);
    join_side(dev);
    const Tensor d = ops::add(b, c);
    expect_all(d, 11.f, "d = (3 a2 + 1) + 2 a2");
    expect_all(b, 7.f, "side result");
  }
}

TEST(SideStream, CpuRunsSideWorkInIssueOrder) {
  Device& cpu = Registry::global().select("cpu", 0);
  EXPECT_FALSE(has_side_stream(cpu));
  fork_join_chain(cpu);
}

TEST(SideStream, GpuForkAndJoinOrderTheWork) {
  Backend* gpu = gpu_backend(1);
  if (!gpu) GTEST_SKIP() << "no GPU backend (the emulator: tools/gpu_emu)";
  for (int i = 0; i < gpu->device_count(); ++i) {
    Device& dev = gpu->device(i);
    SCOPED_TRACE(dev.id());
    ASSERT_TRUE(has_side_stream(dev));
    fork_join_chain(dev);
  }
}

TEST(SideStream, GpuSectionRulesAndSynchronize) {
  Backend* gpu = gpu_backend(1);
  if (!gpu) GTEST_SKIP() << "no GPU backend (the emulator: tools/gpu_emu)";
  Device& dev = gpu->device(0);
  auto& side = dynamic_cast<SideStream&>(dev);
  // A section inside a section is refused; SideSection closes its section when the side work throws.
  begin_side(dev);
  EXPECT_TRUE(side.side_open());
  EXPECT_THROW(begin_side(dev), Error);
  end_side(dev);
  EXPECT_FALSE(side.side_open());
  try {
    SideSection section(dev);
    throw std::runtime_error("side work failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(side.side_open());
  join_side(dev);
  join_side(dev);  // nothing unjoined: nothing to do
  // synchronize() waits for unjoined side work too.
  test::poison_allocations(dev, kN * sizeof(float), 4);
  const Tensor a = ops::full({kN}, 2.0, DType::F32, dev);
  Tensor b;
  {
    SideSection section(dev);
    b = ops::affine(ops::affine(a, 3.0, 0.0), 1.0, -1.0);
  }
  dev.synchronize();
  expect_all(b, 5.f, "unjoined side work after synchronize");
  join_side(dev);
}

// A side branch recorded into a graph: in -> a2 = in + 1; side: b = 3 a2; main: c = 2 a2; join; d = b + c = 5 (in + 1).
// Replayed with new inputs; a second graph leaves its side branch unjoined (end_graph_capture joins it).
TEST(SideStream, GpuSideBranchInAGraph) {
  Backend* gpu = gpu_backend(1);
  if (!gpu) GTEST_SKIP() << "no GPU backend (the emulator: tools/gpu_emu)";
  Device& dev = gpu->device(0);
  if (!dev.supports_graphs()) GTEST_SKIP() << dev.id() << " records no graphs";
  const Tensor in = ops::full({kN}, 0.0, DType::F32, dev);
  for (bool join : {true, false}) {
    SCOPED_TRACE(join ? "joined" : "joined by end_graph_capture");
    Tensor d;
    const auto step = [&] {
      const Tensor a2 = ops::affine(in, 1.0, 1.0);
      Tensor b;
      {
        SideSection side(dev);
        b = ops::affine(a2, 3.0, 0.0);
      }
      const Tensor c = ops::affine(a2, 2.0, 0.0);
      if (!join) return b;  // d is b alone: the graph's end must still wait for the side branch
      join_side(dev);
      return ops::add(b, c);
    };
    d = step();  // warm-up: the capture's tensors come from the allocator's cache
    join_side(dev);
    dev.synchronize();
    try {
      dev.begin_graph_capture();
    } catch (const std::exception& e) {  // the emulator claims graphs but cannot record
      GTEST_SKIP() << e.what();
    }
    try {
      d = step();
    } catch (...) {
      dev.end_graph_capture();
      throw;
    }
    const Device::GraphId g = dev.end_graph_capture();
    for (float x : {1.f, 4.f, -2.f}) {
      ops::const_set(in, x);
      dev.replay_graph(g);
      dev.synchronize();
      expect_all(d, join ? 5.f * (x + 1.f) : 3.f * (x + 1.f), "replay with in = " + std::to_string(x));
    }
    dev.release_graph(g);
  }
}

// Per rank: A (one-shot size) all-reduced on the side stream beside a main-stream op, then B (the flag kernel's
// size) on the main stream after the join; three rounds. Values: rank r's element i is (i % 97 + 1) * 0.37 + r * 0.11
// (A) and the same with B's offsets; the sums are compared bit for bit with the f32 sum in rank order.
TEST(SideStream, GpuAllReduceOnTheSideStream) {
  Backend* gpu = gpu_backend(2);
  if (!gpu) GTEST_SKIP() << "no GPU backend with two devices (the emulator: RBEE_EMU_DEVICES=2)";
  std::vector<Device*> devices = {&gpu->device(0), &gpu->device(1)};
  std::string why;
  std::unique_ptr<Communicator> comm = gpu->make_communicator(devices, &why);
  if (!comm) GTEST_SKIP() << "no communicator: " << why;
  constexpr int64_t kA = 64 * 2048, kB = 64 * 4096;  // the halves and the whole of a 64-row, 4096-wide message
  const auto value = [](int64_t i, int rank, int round, float base) {
    return base + (float)(i % 97 + 1) * 0.37f + (float)rank * 0.11f + (float)round;
  };
  std::vector<std::vector<float>> host_a(2), host_b(2);
  for (int round = 0; round < 3; ++round) {
    test::on_ranks(2, [&](int r) {
      Device& dev = *devices[(size_t)r];
      std::vector<float> va((size_t)kA), vb((size_t)kB);
      for (int64_t i = 0; i < kA; ++i) va[(size_t)i] = value(i, r, round, 0.5f);
      for (int64_t i = 0; i < kB; ++i) vb[(size_t)i] = value(i, r, round, -3.25f);
      const Tensor a = Tensor::from_vector(va, {kA}, dev), b = Tensor::from_vector(vb, {kB}, dev);
      const Tensor other = ops::full({kN}, 1.0, DType::F32, dev);
      {
        SideSection side(dev);
        comm->all_reduce_sum(r, a);
      }
      const Tensor busy = ops::affine(ops::affine(other, 2.0, 0.0), 1.0, 1.0);
      join_side(dev);
      comm->all_reduce_sum(r, b);
      host_a[(size_t)r] = a.to_vector<float>();
      host_b[(size_t)r] = b.to_vector<float>();
      expect_all(busy, 3.f, "main-stream work beside the side all-reduce");
    });
    const auto sum = [&](int64_t i, float base) { return value(i, 0, round, base) + value(i, 1, round, base); };
    size_t wrong = 0;
    for (int r = 0; r < 2; ++r) {
      for (int64_t i = 0; i < kA; ++i) wrong += host_a[(size_t)r][(size_t)i] != sum(i, 0.5f);
      for (int64_t i = 0; i < kB; ++i) wrong += host_b[(size_t)r][(size_t)i] != sum(i, -3.25f);
    }
    EXPECT_EQ(wrong, 0u) << "round " << round << ": elements not the f32 sum in rank order";
  }
}

}  // namespace
}  // namespace rbee
