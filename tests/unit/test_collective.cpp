// all_reduce_sum (rbee/backend/communicator.h) against sums computed here: the host communicator over instances
// of the CPU (always), and the GPU backend's communicator over two or three of its devices where present (the
// emulator: RBEE_EMU_DEVICES=2 or 3 with tools/gpu_emu's plug-in; or real GPUs, where graph replay is checked
// too). Each rank's thread calls the same sequence of all-reduces of changing sizes (1 element, odd tails, one
// decode row, a batch of rows, more than one one-shot chunk, more than one flag-kernel chunk), several rounds in a
// row, so that the peer-to-peer kernels' double-buffered inboxes are reused at both parities with other sizes (and
// the other kernel) in between. The GPU cases run for each path RBEE_ALLREDUCE can force (auto, oneshot, flag, ll:
// backends/gpu/collective.h). Every rank must hold the same bits afterwards; those bits must equal the f32 sum in
// rank order where a peer-to-peer kernel or the host adds (the contract), and be within f32 rounding of the double
// sum where a collective library adds. all_reduce_sum_with (rank 0's addend added to its partial first) runs the same
// sizes once per communicator and path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/allreduce_spec.h"
#include "common/on_ranks.h"
#include "rbee/backend/communicator.h"
#include "rbee/backend/device.h"
#include "rbee/backend/reduce_with.h"
#include "rbee/core/tensor.h"

namespace rbee {
namespace {

using test::on_ranks;

// Sizes of consecutive all-reduces; 262144 is the one-shot chunk (GpuCommunicator::kOneShotChunk), 1 << 20 the
// flag kernel's (kFlagChunk); 131072 floats (512 KiB) the largest message of the one-shot kernel by default
// (kOneShotMaxBytes), 1 << 20 floats (4 MiB) the largest of the flag kernel where a library is loaded.
const std::vector<int64_t> kSizes = {4096,  1, 4099, 262144 + 1000, 4096, 64 * 4096, 7, 131072, 131076,
                                     (1 << 20) + 5, 4096};

// The all-reduce paths a GPU communicator can be asked for (RBEE_ALLREDUCE, read when it is made), with the flag
// kernel's knobs after '+': "block" (RBEE_ALLREDUCE_FENCE=block: one fence per block), a number
// (RBEE_ALLREDUCE_BLOCKS: its grid; 64 was the default before, 7 leaves ragged tails in every block, 256 is the
// most), "scalar" (RBEE_ALLREDUCE_LOADS=scalar: the peers' values as volatile 4-byte loads), "release"
// (RBEE_ALLREDUCE_FENCE=release: release / acquire flags, no fences), "wide" (RBEE_ALLREDUCE_STORES=wide: 16-byte
// units copied whole). The number is also the ll kernel's grid: 7 blocks give a thread more units than its batch
// (kLlBatch), 256 fewer units than threads.
const std::vector<std::string> kPaths = {"auto",     "oneshot",      "flag",      "flag+block+split", "flag+64+scalar",
                                         "flag+7",   "auto+256",     "flag+thread+split", "flag+thread",
                                         "flag+split+7",             "ll",        "ll+7",       "ll+256"};

// Sets RBEE_ALLREDUCE (and the kernels' knobs: common/allreduce_spec.h) for the communicators made while it lives.
struct ForcedPath {
  explicit ForcedPath(const std::string& spec) {
    const std::string unknown = test::apply_allreduce_spec(spec);
    if (!unknown.empty()) ADD_FAILURE() << spec << ": unknown knob " << unknown;
  }
  ~ForcedPath() { test::clear_allreduce_env(); }
};

// The largest message the GPU communicator named `name` adds in rank order under RBEE_ALLREDUCE=`path` (-1: every
// message): the peer-to-peer kernels up to their limits where a library is loaded (the library above), every size
// without a library; a library alone never.
int64_t rank_order_limit(const std::string& name, const std::string& path) {
  const bool p2p = name.rfind("p2p", 0) == 0, library = name != "host" && name != "p2p";
  if (!library) return -1;
  if (!p2p) return 0;
  return path == "oneshot" ? (int64_t)1 << 20 : (int64_t)4 << 20;  // "flag+..." and "ll" as "flag"
}

std::vector<float> random_values(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> v((size_t)n);
  for (float& x : v) x = dist(rng);
  return v;
}

// `exact`: the contract's f32 sum in rank order (one-shot kernel, host); else within f32 rounding of the
// double sum (a library's reduction order).
void check_sum(const std::vector<std::vector<float>>& in, const std::vector<std::vector<float>>& out, bool exact,
               const std::string& what) {
  const size_t ranks = in.size(), n = in[0].size();
  for (size_t r = 1; r < ranks; ++r) {
    ASSERT_EQ(0, std::memcmp(out[0].data(), out[r].data(), n * sizeof(float))) << what << ": rank " << r
                                                                               << " differs from rank 0";
  }
  for (size_t i = 0; i < n; ++i) {
    float s = 0.f;
    double d = 0, mag = 0;
    for (size_t r = 0; r < ranks; ++r) {
      s += in[r][i];
      d += in[r][i];
      mag += std::fabs(in[r][i]);
    }
    if (exact) {
      ASSERT_EQ(0, std::memcmp(&s, &out[0][i], sizeof(float))) << what << ": element " << i << " is " << out[0][i]
                                                               << ", the f32 sum in rank order is " << s;
    } else {
      ASSERT_NEAR(out[0][i], d, 4e-7 * mag + 1e-30) << what << ": element " << i;
    }
  }
}

// kSizes one after another, `rounds` times, eagerly. `library_above`: messages above this many bytes may go
// through a collective library (not summed in rank order); -1: never. `plus`: all_reduce_sum_with, rank 0 passing
// an addend of random values (the other ranks none) and every rank a next_read hint: the expected sum is
// (x_0 + addend) + x_1 + ..., rank 0's partial and the addend added in f32 first.
void check_eager(Communicator& comm, int rounds, int64_t library_above, bool plus = false) {
  const int ranks = comm.size();
  for (int round = 0; round < rounds; ++round) {
    for (size_t k = 0; k < kSizes.size(); ++k) {
      const int64_t n = kSizes[k];
      std::vector<std::vector<float>> in((size_t)ranks), out((size_t)ranks);
      for (int r = 0; r < ranks; ++r) in[(size_t)r] = random_values(n, 1000 * round + 10 * k + r);
      const std::vector<float> addend = plus ? random_values(n, 5000 + 1000 * round + k) : std::vector<float>();
      on_ranks(ranks, [&](int r) {
        Tensor x = Tensor::from_vector(in[(size_t)r], {n}, comm.device(r));
        if (plus) {
          const Tensor add = r == 0 ? Tensor::from_vector(addend, {n}, comm.device(r)) : Tensor();
          // A hint of what the rank reads next (an odd size: the prefetch takes its aligned interior): no effect on
          // the result.
          const Tensor next = Tensor::from_vector(random_values(n + 3, 9000 + r), {n + 3}, comm.device(r));
          all_reduce_sum_with(comm, r, x, ReduceExtras{add, next});
        } else {
          comm.all_reduce_sum(r, x);
        }
        out[(size_t)r] = x.to_vector<float>();
      });
      if (plus) {
        for (int64_t i = 0; i < n; ++i) in[0][(size_t)i] += addend[(size_t)i];
      }
      const bool exact = library_above < 0 || n * (int64_t)sizeof(float) <= library_above;
      check_sum(in, out, exact,
                comm.name() + (plus ? " plus" : "") + " round " + std::to_string(round) + ", " + std::to_string(n) +
                    " floats");
    }
  }
}

TEST(Collective, HostCommunicatorSumsInRankOrder) {
  Registry& registry = Registry::global();
  for (int ranks : {2, 3}) {
    std::vector<Device*> devices;
    for (int r = 0; r < ranks; ++r) devices.push_back(&registry.select("cpu", r + 1));
    auto comm = make_host_communicator(devices);
    check_eager(*comm, 2, -1);
    check_eager(*comm, 1, -1, true);
  }
}

// The addend's contract: rank 0 alone, f32 of x's shape on the rank's device; anything else is refused before any
// rank waits (the checks come first, so a single thread can call it).
TEST(Collective, AddendIsCheckedBeforeTheSum) {
  Registry& registry = Registry::global();
  auto comm = make_host_communicator({&registry.select("cpu", 1), &registry.select("cpu", 2)});
  const Tensor x1 = Tensor::from_vector(std::vector<float>(8, 1.f), {8}, comm->device(1));
  const Tensor add1 = Tensor::from_vector(std::vector<float>(8, 1.f), {8}, comm->device(1));
  EXPECT_THROW(all_reduce_sum_with(*comm, 1, x1, ReduceExtras{add1, Tensor()}), Error);  // rank 1 passed one
  const Tensor x0 = Tensor::from_vector(std::vector<float>(8, 1.f), {8}, comm->device(0));
  const Tensor short0 = Tensor::from_vector(std::vector<float>(4, 1.f), {4}, comm->device(0));
  EXPECT_THROW(all_reduce_sum_with(*comm, 0, x0, ReduceExtras{short0, Tensor()}), Error);  // wrong shape
  EXPECT_THROW(all_reduce_sum_with(*comm, 0, x0, ReduceExtras{add1, Tensor()}), Error);    // on another device
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

std::unique_ptr<Communicator> gpu_communicator(Backend& backend, int ranks, std::string* why) {
  std::vector<Device*> devices;
  for (int r = 0; r < ranks; ++r) devices.push_back(&backend.device(r));
  return backend.make_communicator(devices, why);
}

TEST(Collective, GpuCommunicatorEager) {
  Backend* gpu = gpu_backend(2);
  if (!gpu) GTEST_SKIP() << "no GPU backend with two devices (the emulator: RBEE_EMU_DEVICES=2)";
  for (int ranks = 2; ranks <= std::min(3, gpu->device_count()); ++ranks) {
    for (const std::string& path : kPaths) {
      ForcedPath forced(path);
      std::string why;
      auto comm = gpu_communicator(*gpu, ranks, &why);
      ASSERT_TRUE(comm) << why;
      SCOPED_TRACE(comm->name() + " over " + std::to_string(ranks) + " devices, RBEE_ALLREDUCE=" + path + ": " + why);
      check_eager(*comm, 3, rank_order_limit(comm->name(), path));
      check_eager(*comm, 1, rank_order_limit(comm->name(), path), true);
    }
  }
}

// Three all-reduces recorded into one graph per rank, replayed with new inputs each time: the one-shot kernel
// keeps its round numbers on the device, so replays need no host update.
// Under every RBEE_ALLREDUCE path: a recorded all-reduce is always a peer-to-peer kernel (auto: the one-shot
// kernel for 4096 floats, the flag kernel for the others), whatever the size.
TEST(Collective, GpuCommunicatorInGraphs) {
  Backend* gpu = gpu_backend(2);
  if (!gpu) GTEST_SKIP() << "no GPU backend with two devices";
  if (!gpu->device(0).supports_graphs()) GTEST_SKIP() << gpu->device(0).id() << " records no graphs (the emulator)";
  for (const std::string& path : kPaths) {
  ForcedPath forced(path);
  std::string why;
  auto comm = gpu_communicator(*gpu, 2, &why);
  ASSERT_TRUE(comm) << why;
  if (!comm->capturable()) GTEST_SKIP() << comm->name() << " cannot be recorded: " << why;
  const int ranks = comm->size();
  for (int64_t n : {(int64_t)4096, (int64_t)64 * 4096, (int64_t)262144 + 3, (int64_t)(1 << 20) + 4096}) {
    SCOPED_TRACE("RBEE_ALLREDUCE=" + path + ", " + std::to_string(n) + " floats");
    std::vector<Tensor> x((size_t)ranks);
    std::vector<Device::GraphId> graphs((size_t)ranks);
    for (int r = 0; r < ranks; ++r) x[(size_t)r] = Tensor::from_vector(random_values(n, r), {n}, comm->device(r));
    std::vector<std::string> no_capture((size_t)ranks);
    on_ranks(ranks, [&](int r) {
      Device& dev = comm->device(r);
      try {
        dev.begin_graph_capture();
      } catch (const std::exception& e) {  // the emulator claims graphs but cannot record
        no_capture[(size_t)r] = e.what();
        return;
      }
      try {
        for (int k = 0; k < 3; ++k) comm->all_reduce_sum(r, x[(size_t)r]);
      } catch (...) {
        dev.end_graph_capture();
        throw;
      }
      graphs[(size_t)r] = dev.end_graph_capture();
    });
    if (!no_capture[0].empty() || !no_capture[1].empty()) GTEST_SKIP() << no_capture[0] << no_capture[1];
    for (int rep = 0; rep < 4; ++rep) {
      std::vector<std::vector<float>> in((size_t)ranks), out((size_t)ranks);
      for (int r = 0; r < ranks; ++r) {
        in[(size_t)r] = random_values(n, 77 * rep + r);
        comm->device(r).copy_from_host(x[(size_t)r].data(), in[(size_t)r].data(), (size_t)n * sizeof(float));
      }
      on_ranks(ranks, [&](int r) {
        comm->device(r).replay_graph(graphs[(size_t)r]);
        out[(size_t)r] = x[(size_t)r].to_vector<float>();
      });
      // Expected: three rounds of the rank-order f32 sum.
      std::vector<std::vector<float>> expect = in;
      for (int k = 0; k < 3; ++k) {
        std::vector<float> s((size_t)n, 0.f);
        for (int r = 0; r < ranks; ++r) {
          for (int64_t i = 0; i < n; ++i) s[(size_t)i] += expect[(size_t)r][(size_t)i];
        }
        for (int r = 0; r < ranks; ++r) expect[(size_t)r] = s;
      }
      for (int r = 0; r < ranks; ++r) {
        ASSERT_EQ(0, std::memcmp(expect[(size_t)r].data(), out[(size_t)r].data(), (size_t)n * sizeof(float)))
            << "replay " << rep << ", rank " << r;
      }
    }
    for (int r = 0; r < ranks; ++r) comm->device(r).release_graph(graphs[(size_t)r]);
  }
  }
}

TEST(Collective, UnknownPathIsRefused) {
  Backend* gpu = gpu_backend(2);
  if (!gpu) GTEST_SKIP() << "no GPU backend with two devices";
  ForcedPath forced("ring");
  std::string why;
  try {
    auto comm = gpu_communicator(*gpu, 2, &why);
    FAIL() << "RBEE_ALLREDUCE=ring was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("RBEE_ALLREDUCE=ring"), std::string::npos) << e.what();
  }
}

TEST(Collective, FlagKnobsOutOfRangeAreRefused) {
  Backend* gpu = gpu_backend(2);
  if (!gpu) GTEST_SKIP() << "no GPU backend with two devices";
  for (const char* blocks : {"0", "257", "12x"}) {
    ::setenv("RBEE_ALLREDUCE_BLOCKS", blocks, 1);
    std::string why;
    EXPECT_THROW(gpu_communicator(*gpu, 2, &why), Error) << "RBEE_ALLREDUCE_BLOCKS=" << blocks;
  }
  ::unsetenv("RBEE_ALLREDUCE_BLOCKS");
  ::setenv("RBEE_ALLREDUCE_LOADS", "narrow", 1);
  std::string why;
  EXPECT_THROW(gpu_communicator(*gpu, 2, &why), Error);
  ::unsetenv("RBEE_ALLREDUCE_LOADS");
  ::setenv("RBEE_ALLREDUCE_PREFETCH", "columns", 1);
  EXPECT_THROW(gpu_communicator(*gpu, 2, &why), Error);
  ::unsetenv("RBEE_ALLREDUCE_PREFETCH");
  ::setenv("RBEE_ALLREDUCE_FENCE", "acquire", 1);
  EXPECT_THROW(gpu_communicator(*gpu, 2, &why), Error);
  ::unsetenv("RBEE_ALLREDUCE_FENCE");
  ::setenv("RBEE_ALLREDUCE_STORES", "narrow", 1);
  EXPECT_THROW(gpu_communicator(*gpu, 2, &why), Error);
  ::unsetenv("RBEE_ALLREDUCE_STORES");
}

}  // namespace
}  // namespace rbee
