// All-reduce latency over the GPUs of one backend, as a tensor-split decode step pays it (issue 14; the per-token
// breakdown of docs/perf-notes/multi-device.md). For each message size, every rank records `count` all-reduces of
// an f32 tensor into one device graph (what a decode graph holds: two per layer), then the ranks replay their
// graphs `reps` times at once; the table gives microseconds per all-reduce (wall time of the replays, each rank
// synchronized at the end, / (reps x count)) and, for the same sizes, per eager all-reduce (one launch each).
// Sizes (floats, --sizes): one decode row of a 4096-wide model (Llama-2-7B), of an 8192-wide one (70B), 4 and 16
// rows of 4096 (64 KiB, 256 KiB), 32 and 48 rows (512 KiB: 64 streams' message cut in two by RBEE_TP_OVERLAP; 768
// KiB: its larger part at RBEE_TP_OVERLAP_SPLIT=75), 64 rows of 4096 (1 MiB: 64 streams of 7B), 128 and 256 rows
// (2 and 4 MiB).
// The column "GB/s" is bytes of the message / time in a graph: what crosses the link per direction at two ranks
// for a kernel that sends each value once (4 bytes).
//
// Usage: rbee_bench_collective [--backend cuda|rocm] [--ranks N] [--count 64] [--reps 50] [--sizes N,N,...]
//                               [--paths SPEC,SPEC,...]
// RBEE_ALLREDUCE=auto|oneshot|flag|ll|nccl picks the path (backends/gpu/collective.h; nccl is recorded into the
// graphs too), RBEE_ALLREDUCE_BLOCKS / _LOADS / _FENCE / _STORES the flag kernel's grid (also the ll kernel's),
// loads, fences and stores (printed in the header). --paths runs the table once per SPEC, each with a communicator
// made under its settings: PATH+KNOB+... (tests/common/allreduce_spec.h: a number: RBEE_ALLREDUCE_BLOCKS; block /
// thread / release: RBEE_ALLREDUCE_FENCE; scalar: RBEE_ALLREDUCE_LOADS; wide / split: RBEE_ALLREDUCE_STORES; knobs
// not named are unset), e.g. --paths auto,flag,flag+release+wide,ll,ll+256,nccl.
// Programmatic dependent launch (RBEE_PDL, default on; RBEE_ALLREDUCE_PDL=0 turns it off for the all-reduce
// kernels alone) decides whether consecutive all-reduces of a graph overlap their launches; run it with each
// setting.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench_ranks.h"
#include "common/allreduce_spec.h"
#include "rbee/backend/communicator.h"
#include "rbee/backend/device.h"
#include "rbee/core/tensor.h"

namespace {

using namespace rbee;
using Clock = std::chrono::steady_clock;

using bench::on_ranks;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> out;
  for (size_t p = 0; p < list.size();) {
    const size_t e = std::min(list.find(',', p), list.size());
    out.push_back(list.substr(p, e - p));
    p = e + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend_name;
  int ranks = 2, count = 64, reps = 50;
  std::vector<int64_t> sizes = {4096,      8192,      4 * 4096,   16 * 4096,  32 * 4096,
                                48 * 4096, 64 * 4096, 128 * 4096, 256 * 4096};
  std::vector<std::string> paths;  // empty: the environment as it is, one table
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        fmt::print(stderr, "{} needs a value\n", a);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--backend") backend_name = next();
    else if (a == "--ranks") ranks = std::atoi(next().c_str());
    else if (a == "--count") count = std::atoi(next().c_str());
    else if (a == "--reps") reps = std::atoi(next().c_str());
    else if (a == "--sizes") {
      sizes.clear();
      for (const std::string& n : split_commas(next())) sizes.push_back(std::atoll(n.c_str()));
    } else if (a == "--paths") {
      paths = split_commas(next());
    } else {
      fmt::print(stderr, "usage: rbee_bench_collective [--backend cuda|rocm] [--ranks N] [--count 64] [--reps 50] "
                         "[--sizes N,N,...] [--paths SPEC,SPEC,...]\n");
      return 2;
    }
  }
  bool sizes_ok = !sizes.empty();
  for (int64_t n : sizes) sizes_ok = sizes_ok && n >= 1;
  bool paths_ok = true;
  for (const std::string& p : paths) paths_ok = paths_ok && !p.empty() && p[0] != '+';
  if (ranks < 2 || count < 1 || reps < 1 || !sizes_ok || !paths_ok) {
    fmt::print(stderr, "rbee_bench_collective: --ranks >= 2, --count >= 1, --reps >= 1, --sizes of positive counts, "
                       "--paths of PATH+KNOB specs\n");
    return 2;
  }
  if (paths.empty()) paths.push_back("");  // one table under the environment as given
  try {
    Registry& registry = Registry::global();
    registry.load_plugins();
    Backend* backend = nullptr;
    for (const char* name : {"cuda", "rocm"}) {
      if (!backend_name.empty() && backend_name != name) continue;
      Backend* b = registry.find(name);
      if (b && b->device_count() >= ranks) {
        backend = b;
        break;
      }
    }
    if (!backend) {
      fmt::print(stderr, "rbee_bench_collective: no GPU backend with {} devices\n", ranks);
      return 1;
    }
    std::vector<Device*> devices;
    for (int r = 0; r < ranks; ++r) devices.push_back(&backend->device(r));
    for (const std::string& spec : paths) {
      if (const std::string unknown = spec.empty() ? "" : rbee::test::apply_allreduce_spec(spec); !unknown.empty()) {
        fmt::print(stderr,
                   "rbee_bench_collective: --paths {}: unknown knob {} (block, thread, release, scalar, wide, split or "
                   "a number)\n", spec, unknown);
        return 2;
      }
      std::string why;
      std::unique_ptr<Communicator> comm = backend->make_communicator(devices, &why);
      if (!comm) {
        fmt::print(stderr, "rbee_bench_collective: no communicator: {}\n", why);
        return 1;
      }
      auto env = [](const char* name, const char* unset) {
        const char* v = std::getenv(name);
        return std::string(v ? v : unset);
      };
      fmt::print("{}all-reduce over {} x {} ({}): {}; {} all-reduces per graph, {} replays; RBEE_ALLREDUCE={} "
                 "RBEE_PDL={} RBEE_ALLREDUCE_PDL={} RBEE_ALLREDUCE_BLOCKS={} RBEE_ALLREDUCE_LOADS={} "
                 "RBEE_ALLREDUCE_FENCE={} RBEE_ALLREDUCE_STORES={}\n",
                 spec.empty() ? "" : fmt::format("\npath {}: ", spec), ranks, devices[0]->id(), comm->name(), why,
                 count, reps, env("RBEE_ALLREDUCE", "(unset: auto)"), env("RBEE_PDL", "(unset: on)"),
                 env("RBEE_ALLREDUCE_PDL", "(unset: on)"), env("RBEE_ALLREDUCE_BLOCKS", "(unset: 128)"),
                 env("RBEE_ALLREDUCE_LOADS", "(unset: wide)"), env("RBEE_ALLREDUCE_FENCE", "(unset: release)"),
                 env("RBEE_ALLREDUCE_STORES", "(unset: wide)"));
      fmt::print("| floats | bytes | us per all-reduce in a graph | GB/s in a graph | us per eager all-reduce |\n"
                 "|---|---|---|---|---|\n");
      for (int64_t n : sizes) {
        std::vector<Tensor> x((size_t)ranks);
        // Zeros: the sums stay finite over any number of rounds (tests/unit/test_collective.cpp checks the bits).
        for (int r = 0; r < ranks; ++r) x[(size_t)r] = Tensor::from_vector(std::vector<float>((size_t)n, 0.f), {n}, *devices[(size_t)r]);
        // Eager: warm-up, then `count` launches per rank.
        on_ranks(ranks, [&](int r) {
          for (int k = 0; k < 4; ++k) comm->all_reduce_sum(r, x[(size_t)r]);
          devices[(size_t)r]->synchronize();
        });
        Clock::time_point t0 = Clock::now();
        on_ranks(ranks, [&](int r) {
          for (int k = 0; k < count; ++k) comm->all_reduce_sum(r, x[(size_t)r]);
          devices[(size_t)r]->synchronize();
        });
        const double eager_us = seconds_since(t0) * 1e6 / count;
        double graph_us = -1;
        if (comm->capturable() && devices[0]->supports_graphs()) {
          std::vector<Device::GraphId> graphs((size_t)ranks);
          std::vector<char> recorded((size_t)ranks, 0);
          on_ranks(ranks, [&](int r) {
            Device& dev = *devices[(size_t)r];
            try {
              dev.begin_graph_capture();
            } catch (const std::exception&) {  // the emulator claims graphs but cannot record: no graph column
              return;
            }
            try {
              for (int k = 0; k < count; ++k) comm->all_reduce_sum(r, x[(size_t)r]);
            } catch (...) {
              dev.end_graph_capture();
              throw;
            }
            graphs[(size_t)r] = dev.end_graph_capture();
            recorded[(size_t)r] = 1;
          });
          const bool all_recorded = std::count(recorded.begin(), recorded.end(), 1) == ranks;
          for (int r = 0; r < ranks && !all_recorded; ++r) {
            if (recorded[(size_t)r]) devices[(size_t)r]->release_graph(graphs[(size_t)r]);
          }
          if (all_recorded) {
            on_ranks(ranks, [&](int r) {
              devices[(size_t)r]->replay_graph(graphs[(size_t)r]);
              devices[(size_t)r]->synchronize();
            });
            t0 = Clock::now();
            on_ranks(ranks, [&](int r) {
              for (int k = 0; k < reps; ++k) devices[(size_t)r]->replay_graph(graphs[(size_t)r]);
              devices[(size_t)r]->synchronize();
            });
            graph_us = seconds_since(t0) * 1e6 / ((double)reps * count);
            for (int r = 0; r < ranks; ++r) devices[(size_t)r]->release_graph(graphs[(size_t)r]);
          }
        }
        fmt::print("| {} | {} | {} | {} | {:.1f} |\n", n, n * 4,
                   graph_us < 0 ? std::string("-") : fmt::format("{:.1f}", graph_us),
                   graph_us < 0 ? std::string("-") : fmt::format("{:.0f}", (double)n * 4 / (graph_us * 1e3)), eager_us);
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "rbee_bench_collective: {}\n", e.what());
    return 1;
  }
  return 0;
}
