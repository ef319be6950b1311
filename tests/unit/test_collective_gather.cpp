// all_gather_columns (rbee/backend/communicator.h) against the owners' inputs: every rank fills its whole tensor,
// its own columns with values and every other column with NaN (the contract says those are never read, so a
// kernel that sums or copies them fails), and afterwards every rank must hold each owner's columns bit for bit.
// Checked on the host communicator, on the fallback for a communicator without ColumnGather (zeros, then
// all_reduce_sum), and on the GPU
// backend's communicator where two devices exist (real GPUs or tools/gpu_emu with RBEE_EMU_DEVICES=2 or 3): under
// RBEE_TP_GATHER=own (the flag kernel in gather mode above 512 KiB) and =sum (the default at every size), with the
// all-reduce paths RBEE_ALLREDUCE can force, eagerly with all-reduces in between (the inboxes' parities reused by
// both kinds of round) and, on real GPUs, recorded into a graph and replayed with new inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/allreduce_spec.h"
#include "common/on_ranks.h"
#include "rbee/backend/column_gather.h"
#include "rbee/backend/communicator.h"
#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/core/tensor.h"

namespace rbee {
namespace {

using test::on_ranks;

// [rows, cols] and the first column of each rank after rank 0, as fractions of cols (rounded down).
struct GatherCase {
  int64_t rows, cols;
  bool uneven;  // bounds off multiples of 4 (the flag kernel's single-float units)
};
// 128 KiB (one decode row of a 32000-row head: the default path on GPUs), 8 MiB (64 rows: two flag chunks in
// gather mode), 840 KB with ragged bounds, 640 KiB with 16-byte units and unequal shares.
const std::vector<GatherCase> kCases = {{1, 32000, false}, {64, 32000, false}, {70, 3001, true}, {40, 4096, false}};

std::vector<int64_t> bounds_of(const GatherCase& c, int ranks) {
  std::vector<int64_t> b{0};
  for (int r = 1; r < ranks; ++r) {
    int64_t at = c.cols * r / ranks + (c.uneven ? 1 : -c.cols / 8);  // unequal shares
    if (!c.uneven) at -= at % 4;
    b.push_back(at);
  }
  b.push_back(c.cols);
  return b;
}

// Rank r's input: its own columns random (seeded by round and rank), every other column NaN.
std::vector<float> gather_input(const GatherCase& c, const std::vector<int64_t>& b, int r, uint64_t seed) {
  std::mt19937_64 rng(seed * 31 + (uint64_t)r);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> v((size_t)(c.rows * c.cols), std::numeric_limits<float>::quiet_NaN());
  for (int64_t i = 0; i < c.rows; ++i) {
    for (int64_t j = b[(size_t)r]; j < b[(size_t)r + 1]; ++j) v[(size_t)(i * c.cols + j)] = dist(rng);
  }
  return v;
}

// What every rank must hold: each column from its owner.
std::vector<float> gathered(const GatherCase& c, const std::vector<int64_t>& b,
                            const std::vector<std::vector<float>>& in) {
  std::vector<float> out((size_t)(c.rows * c.cols));
  for (size_t r = 0; r + 1 < b.size(); ++r) {
    for (int64_t i = 0; i < c.rows; ++i) {
      for (int64_t j = b[r]; j < b[r + 1]; ++j) out[(size_t)(i * c.cols + j)] = in[r][(size_t)(i * c.cols + j)];
    }
  }
  return out;
}

// Every case, `rounds` times, each gather followed by an all-reduce of 4096 floats (a decode row) and one of
// 64 * 4096 (64 rows: the flag kernel), so that both kinds of round share the per-block counters and inboxes.
void check_gathers(Communicator& comm, int rounds) {
  const int ranks = comm.size();
  for (int round = 0; round < rounds; ++round) {
    for (const GatherCase& c : kCases) {
      const std::vector<int64_t> b = bounds_of(c, ranks);
      SCOPED_TRACE(comm.name() + ": round " + std::to_string(round) + ", [" + std::to_string(c.rows) + ", " +
                   std::to_string(c.cols) + "], " + std::to_string(ranks) + " ranks");
      std::vector<std::vector<float>> in((size_t)ranks), out((size_t)ranks);
      for (int r = 0; r < ranks; ++r) in[(size_t)r] = gather_input(c, b, r, 100 * round + (uint64_t)c.rows);
      on_ranks(ranks, [&](int r) {
        Tensor x = Tensor::from_vector(in[(size_t)r], {c.rows, c.cols}, comm.device(r));
        all_gather_columns(comm, r, x, b);
        out[(size_t)r] = x.to_vector<float>();
        for (int64_t n : {(int64_t)4096, (int64_t)64 * 4096}) {
          Tensor y = Tensor::from_vector(std::vector<float>((size_t)n, 1.f), {n}, comm.device(r));
          comm.all_reduce_sum(r, y);
          const std::vector<float> s = y.to_vector<float>();
          if (s[0] != (float)ranks || s.back() != (float)ranks) throw std::runtime_error("all-reduce between gathers");
        }
      });
      const std::vector<float> expect = gathered(c, b, in);
      for (int r = 0; r < ranks; ++r) {
        for (size_t i = 0; i < expect.size(); ++i) {
          ASSERT_EQ(0, std::memcmp(&expect[i], &out[(size_t)r][i], sizeof(float)))
              << "rank " << r << ", row " << i / (size_t)c.cols << ", column " << i % (size_t)c.cols << ": "
              << out[(size_t)r][i] << ", owner's value " << expect[i];
        }
      }
    }
  }
}

// A communicator without ColumnGather (the fallback: zeros and all_reduce_sum) over the host communicator.
class DefaultGather final : public Communicator {
 public:
  explicit DefaultGather(std::vector<Device*> devices) : inner_(make_host_communicator(std::move(devices))) {}
  int size() const override { return inner_->size(); }
  Device& device(int rank) const override { return inner_->device(rank); }
  std::string name() const override { return "host, default gather"; }
  void all_reduce_sum(int rank, const Tensor& x) override { inner_->all_reduce_sum(rank, x); }
  bool capturable() const override { return false; }
  void abort(const std::string& why) override { inner_->abort(why); }

 private:
  std::unique_ptr<Communicator> inner_;
};

std::vector<Device*> cpu_instances(int ranks) {
  std::vector<Device*> devices;
  for (int r = 0; r < ranks; ++r) devices.push_back(&Registry::global().select("cpu", r + 1));
  return devices;
}

TEST(CollectiveGather, HostCommunicatorTakesEachColumnFromItsOwner) {
  for (int ranks : {2, 3}) {
    auto comm = make_host_communicator(cpu_instances(ranks));
    check_gathers(*comm, 2);
  }
}

TEST(CollectiveGather, DefaultZeroesAndSums) {
  for (int ranks : {2, 3}) {
    DefaultGather comm(cpu_instances(ranks));
    check_gathers(comm, 2);
  }
}

TEST(CollectiveGather, BadBoundsAreRefused) {
  auto comm = make_host_communicator(cpu_instances(2));
  Tensor x = Tensor::from_vector(std::vector<float>(8, 0.f), {2, 4}, comm->device(0));
  for (const std::vector<int64_t>& b : {std::vector<int64_t>{0, 4}, {0, 3, 5}, {1, 2, 4}, {0, 3, 2}}) {
    EXPECT_THROW(all_gather_columns(*comm, 0, x, b), Error);
  }
  Tensor flat = Tensor::from_vector(std::vector<float>(8, 0.f), {8}, comm->device(0));
  EXPECT_THROW(all_gather_columns(*comm, 0, flat, std::vector<int64_t>{0, 4, 8}), Error);
}

Backend* gpu_backend(int min_devices) {
  Registry& registry = Registry::global();
  registry.load_plugins();
  for (const char* name : {"cuda", "rocm"}) {
    Backend* b = registry.find(name);
    if (b && b->device_count() >= min_devices) return b;
  }
  return nullptr;
}

// RBEE_TP_GATHER and RBEE_ALLREDUCE for the communicators made while it lives; `path` may name the kernels' knobs
// after '+' (common/allreduce_spec.h: "release", "wide", ...), which the flag kernel's gather mode uses too.
struct GatherEnv {
  GatherEnv(const char* gather, const std::string& path) {
    ::setenv("RBEE_TP_GATHER", gather, 1);
    const std::string unknown = test::apply_allreduce_spec(path);
    if (!unknown.empty()) ADD_FAILURE() << path << ": unknown knob " << unknown;
  }
  ~GatherEnv() {
    ::unsetenv("RBEE_TP_GATHER");
    test::clear_allreduce_env();
  }
};

std::unique_ptr<Communicator> gpu_communicator(Backend& backend, int ranks, std::string* why) {
  std::vector<Device*> devices;
  for (int r = 0; r < ranks; ++r) devices.push_back(&backend.device(r));
  return backend.make_communicator(devices, why);
}

TEST(CollectiveGather, GpuCommunicatorEager) {
  Backend* gpu = gpu_backend(2);
  if (!gpu) GTEST_SKIP() << "no GPU backend with two devices (the emulator: RBEE_EMU_DEVICES=2)";
  for (int ranks = 2; ranks <= std::min(3, gpu->device_count()); ++ranks) {
    for (const char* gather : {"own", "sum"}) {
      for (const char* path : {"auto", "flag", "oneshot", "ll", "flag+release+wide"}) {
        GatherEnv env(gather, path);
        std::string why;
        auto comm = gpu_communicator(*gpu, ranks, &why);
        ASSERT_TRUE(comm) << why;
        SCOPED_TRACE(std::string("RBEE_TP_GATHER=") + gather + ", RBEE_ALLREDUCE=" + path);
        check_gathers(*comm, 3);
      }
    }
  }
}

TEST(CollectiveGather, BadSwitchIsRefused) {
  Backend* gpu = gpu_backend(2);
  if (!gpu) GTEST_SKIP() << "no GPU backend with two devices";
  GatherEnv env("all", "auto");
  std::string why;
  EXPECT_THROW(gpu_communicator(*gpu, 2, &why), Error);
}

// A gather of 64 head rows between two all-reduces, recorded into one graph per rank and replayed with new inputs.
TEST(CollectiveGather, GpuCommunicatorInGraphs) {
  Backend* gpu = gpu_backend(2);
  if (!gpu) GTEST_SKIP() << "no GPU backend with two devices";
  if (!gpu->device(0).supports_graphs()) GTEST_SKIP() << gpu->device(0).id() << " records no graphs (the emulator)";
  for (const char* gather : {"own", "sum"}) {
    GatherEnv env(gather, "auto");
    std::string why;
    auto comm = gpu_communicator(*gpu, 2, &why);
    ASSERT_TRUE(comm) << why;
    if (!comm->capturable()) GTEST_SKIP() << comm->name() << " cannot be recorded: " << why;
    const GatherCase c{64, 32000, false};
    const std::vector<int64_t> b = bounds_of(c, 2);
    const int64_t n_sum = 4096;
    std::vector<Tensor> x(2), y(2);
    std::vector<Device::GraphId> graphs(2);
    for (int r = 0; r < 2; ++r) {
      x[(size_t)r] = Tensor::from_vector(gather_input(c, b, r, 1), {c.rows, c.cols}, comm->device(r));
      y[(size_t)r] = Tensor::from_vector(std::vector<float>((size_t)n_sum, 0.f), {n_sum}, comm->device(r));
    }
    std::vector<std::string> no_capture(2);
    on_ranks(2, [&](int r) {
      Device& dev = comm->device(r);
      try {
        dev.begin_graph_capture();
      } catch (const std::exception& e) {  // the emulator claims graphs but cannot record
        no_capture[(size_t)r] = e.what();
        return;
      }
      try {
        comm->all_reduce_sum(r, y[(size_t)r]);
        all_gather_columns(*comm, r, x[(size_t)r], b);
        comm->all_reduce_sum(r, y[(size_t)r]);
      } catch (...) {
        dev.end_graph_capture();
        throw;
      }
      graphs[(size_t)r] = dev.end_graph_capture();
    });
    if (!no_capture[0].empty() || !no_capture[1].empty()) GTEST_SKIP() << no_capture[0] << no_capture[1];
    for (int rep = 0; rep < 4; ++rep) {
      SCOPED_TRACE(std::string("RBEE_TP_GATHER=") + gather + ", replay " + std::to_string(rep));
      std::vector<std::vector<float>> in(2), out(2), sums(2);
      for (int r = 0; r < 2; ++r) {
        in[(size_t)r] = gather_input(c, b, r, 10 + (uint64_t)rep);
        comm->device(r).copy_from_host(x[(size_t)r].data(), in[(size_t)r].data(), in[(size_t)r].size() * sizeof(float));
        const std::vector<float> ones((size_t)n_sum, 1.f);
        comm->device(r).copy_from_host(y[(size_t)r].data(), ones.data(), ones.size() * sizeof(float));
      }
      on_ranks(2, [&](int r) {
        comm->device(r).replay_graph(graphs[(size_t)r]);
        out[(size_t)r] = x[(size_t)r].to_vector<float>();
        sums[(size_t)r] = y[(size_t)r].to_vector<float>();
      });
      const std::vector<float> expect = gathered(c, b, in);
      for (int r = 0; r < 2; ++r) {
        ASSERT_EQ(0, std::memcmp(expect.data(), out[(size_t)r].data(), expect.size() * sizeof(float))) << "rank " << r;
        ASSERT_EQ(sums[(size_t)r][0], 4.f) << "rank " << r << ": (1 + 1) twice";
      }
    }
    for (int r = 0; r < 2; ++r) comm->device(r).release_graph(graphs[(size_t)r]);
  }
}

}  // namespace
}  // namespace rbee
