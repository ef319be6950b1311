// The fused all-reduce + residual add + RMS norm of a tensor split (rbee/backend/reduce_norm.h, collective_norm.cu)
// against its composition, as a 64-stream decode step of a 4096-wide model pays them: per rank, `count` calls
// recorded into one device graph, replayed `reps` times on every rank at once; microseconds per call (wall time of
// the replays / (reps x count)). The product after the norm is a small one (w [16, K], so the table shows the
// all-reduce and the norm; the big product is the same on both sides):
//   fused        all_reduce_add_rms_norm_qmatmul (one kernel, then the GEMM)
//   composition  all_reduce_sum, then add_rms_norm_qmatmul (the all-reduce kernel, the norm pass, the GEMM)
//   all-reduce   all_reduce_sum alone
// Usage: rbee_bench_reduce_norm [--rows 64] [--k 4096] [--count 32] [--reps 50]
#include <chrono>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench_ranks.h"
#include "rbee/backend/communicator.h"
#include "rbee/backend/device.h"
#include "rbee/backend/reduce_norm.h"
#include "rbee/core/tensor.h"
#include "rbee/ops.h"

namespace {

using namespace rbee;
using Clock = std::chrono::steady_clock;

using bench::on_ranks;

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 64, k = 4096;
  int count = 32, reps = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--rows") rows = std::stoll(next());
    else if (a == "--k") k = std::stoll(next());
    else if (a == "--count") count = std::stoi(next());
    else if (a == "--reps") reps = std::stoi(next());
    else {
      fmt::print(stderr, "usage: rbee_bench_reduce_norm [--rows 64] [--k 4096] [--count 32] [--reps 50]\n");
      return 2;
    }
  }
  try {
    ::setenv("RBEE_TP_REDUCE_NORM", "1", 1);  // the communicator allocates the fused pass's buffers only then
    Registry& registry = Registry::global();
    registry.load_plugins();
    Backend* backend = nullptr;
    for (const char* name : {"cuda", "rocm"}) {
      Backend* b = registry.find(name);
      if (b && b->device_count() >= 2) backend = b;
    }
    if (!backend) {
      fmt::print(stderr, "rbee_bench_reduce_norm: no GPU backend with 2 devices\n");
      return 1;
    }
    const int ranks = 2;
    std::vector<Device*> devices = {&backend->device(0), &backend->device(1)};
    std::string why;
    std::unique_ptr<Communicator> comm = backend->make_communicator(devices, &why);
    if (!comm || !devices[0]->supports_graphs()) {
      fmt::print(stderr, "rbee_bench_reduce_norm: no communicator or no graphs: {}\n", why);
      return 1;
    }
    // Per rank: partial x (zeros: sums stay finite), residual, norm weight, a small F16 product.
    struct Operands {
      Tensor x, residual, norm_weight, w;
    };
    std::vector<Operands> ops_of((size_t)ranks);
    for (int r = 0; r < ranks; ++r) {
      Device& d = *devices[(size_t)r];
      ops_of[(size_t)r] = {Tensor::from_vector(std::vector<float>((size_t)(rows * k), 0.f), {rows, k}, d),
                           Tensor::from_vector(std::vector<float>((size_t)(rows * k), 0.5f), {rows, k}, d),
                           Tensor::from_vector(std::vector<float>((size_t)k, 1.f), {k}, d),
                           ops::cast(Tensor::from_vector(std::vector<float>((size_t)(16 * k), 0.01f), {16, k}, d),
                                     DType::F16)};
    }
    fmt::print("{} x {} ({}), {} rows x {} floats, {} calls per graph, {} replays\n", ranks, devices[0]->id(),
               comm->name(), rows, k, count, reps);
    fmt::print("| what | us per call in a graph |\n|---|---|\n");
    auto time = [&](const char* what, const std::function<void(int)>& call) {
      std::vector<Device::GraphId> graphs((size_t)ranks);
      on_ranks(ranks, [&](int r) {
        for (int i = 0; i < 3; ++i) call(r);  // eager warm-up (first-call planning of the GEMM)
        devices[(size_t)r]->synchronize();
        devices[(size_t)r]->begin_graph_capture();
        try {
          for (int i = 0; i < count; ++i) call(r);
        } catch (...) {
          devices[(size_t)r]->end_graph_capture();
          throw;
        }
        graphs[(size_t)r] = devices[(size_t)r]->end_graph_capture();
        devices[(size_t)r]->replay_graph(graphs[(size_t)r]);
        devices[(size_t)r]->synchronize();
      });
      const Clock::time_point t0 = Clock::now();
      on_ranks(ranks, [&](int r) {
        for (int i = 0; i < reps; ++i) devices[(size_t)r]->replay_graph(graphs[(size_t)r]);
        devices[(size_t)r]->synchronize();
      });
      const double us = std::chrono::duration<double>(Clock::now() - t0).count() * 1e6 / ((double)reps * count);
      for (int r = 0; r < ranks; ++r) devices[(size_t)r]->release_graph(graphs[(size_t)r]);
      fmt::print("| {} | {:.1f} |\n", what, us);
    };
    const uint64_t before = fused_reduce_norms();
    time("fused", [&](int r) {
      const Operands& o = ops_of[(size_t)r];
      all_reduce_add_rms_norm_qmatmul(*comm, r, o.x, o.residual, o.norm_weight, 1e-5f, o.w, ReduceExtras{});
    });
    if (fused_reduce_norms() == before) fmt::print("(the communicator took no fused pass: the fused row is the composition)\n");
    time("composition", [&](int r) {
      const Operands& o = ops_of[(size_t)r];
      comm->all_reduce_sum(r, o.x);
      ops::add_rms_norm_qmatmul(o.residual, o.x, o.norm_weight, 1e-5f, o.w);
    });
    time("all-reduce", [&](int r) { comm->all_reduce_sum(r, ops_of[(size_t)r].x); });
    time("norm + product", [&](int r) {
      const Operands& o = ops_of[(size_t)r];
      ops::add_rms_norm_qmatmul(o.residual, o.x, o.norm_weight, 1e-5f, o.w);
    });
  } catch (const std::exception& e) {
    fmt::print(stderr, "rbee_bench_reduce_norm: {}\n", e.what());
    return 1;
  }
  return 0;
}
