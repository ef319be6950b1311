// Per-shape GPU timing of an LLM's batched-decode products on 16-bit weights: Llama-2-7B's (hidden 4096,
// intermediate 11008, vocabulary 32000) on one GPU and on one rank of a two-way tensor split, at M decode rows, each
// through the op the decoder layer calls (src/llm/models/blocks.cpp), against the copy bandwidth measured in the same
// run:
//   qkv       rms_norm_qmatmul      K 4096   N 12288 (rank: 6144)
//   attn out  qmatmul               K 4096 (rank: 2048)   N 4096
//   gate/up   add_rms_norm_qmatmul  K 4096   N 22016 (rank: 11008)
//   down      swiglu_qmatmul        K 11008 (rank: 5504)  N 4096, residual added
//   head      rms_norm_qmatmul      K 4096   N 32000 (rank: 16000), once a step
// From 9 rows these run the vendor GEMM on the rows rounded to the weight's type (quant_qmatmul.cu), so the row
// counts say which cuBLASLt plans are measured (cublas_blas.cu: RBEE_DECODE_GEMM_TUNE).
// Printed per shape and M: us a call as a replayed graph, the weights' bytes over that time (GB/s, the bytes a
// decode step must stream) and their ratio to the copy bandwidth (bench::copy_limit, bytes read + written per
// second), and the first call's wall time (plans and, with tuning on, the timed choice: what the first decode step
// of a new row group pays). Per M, the step's products (32 layers and the head) add up to a time, against the floor
// of streaming their weights at the copy bandwidth.
// Decode reads each weight once per step, from HBM: every call here reads another copy of its weights, cycling
// through enough copies (at most bench::kCallsPerGraph) that more than kColdBytes lie between two reads of one copy,
// so they do not stay in L2 (50 MB on H100).
// The path is what the process's environment selects, so one run per setting, e.g.:
//   RBEE_DECODE_GEMM_TUNE=0 rbee_bench_decode_gemm_gpu --label gemmex   (cublasGemmEx, the heuristic: the path before)
//   rbee_bench_decode_gemm_gpu --label tuned                            (cuBLASLt, timed per shape: the default)
// RBEE_LOG_LEVEL=debug prints each shape's choice (candidate, tile, split-K, its time and the heuristic's first's).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "gpu_bench_setup.h"
#include "rbee/backend/device.h"
#include "rbee/core/log.h"
#include "rbee/ops.h"

namespace {

using namespace rbee;
using bench::random_f16;
using bench::time_per_call;

enum class Op { NormProj, Proj, AddNormProj, SwigluProj };

struct DecodeShape {
  const char* what;
  Op op;
  int64_t k, n;     // one GPU
  int64_t rank_k, rank_n;  // one rank of a two-way tensor split
  int per_layer;    // calls per layer (0: once a step)
};

constexpr int64_t kHidden = 4096, kInter = 11008, kVocab = 32000;
const std::vector<DecodeShape> kShapes = {
    {"qkv", Op::NormProj, kHidden, 3 * kHidden, kHidden, 3 * kHidden / 2, 1},
    {"attn out", Op::Proj, kHidden, kHidden, kHidden / 2, kHidden, 1},
    {"gate/up", Op::AddNormProj, kHidden, 2 * kInter, kHidden, kInter, 1},
    {"down", Op::SwigluProj, kInter, kHidden, kInter / 2, kHidden, 1},
    {"head", Op::NormProj, kHidden, kVocab, kHidden, kVocab / 2, 0},
};

// Weight bytes between two reads of one copy of a weight: several times H100's 50 MB L2.
constexpr int64_t kColdBytes = int64_t{256} << 20;

struct Options {
  std::string label = "default", filter;
  std::vector<int64_t> rows = {16, 32, 64, 128};
  double min_seconds = 0.05;
  int layers = 32;
  DType dtype = DType::F16;
  bool one_gpu = true, rank = true;
};

std::vector<int64_t> parse_rows(const std::string& s) {
  std::vector<int64_t> rows;
  size_t at = 0;
  while (at < s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    rows.push_back(std::max<int64_t>(1, std::atoll(s.substr(at, comma - at).c_str())));
    at = comma + 1;
  }
  return rows;
}

// Random activations for op at m rows: the op's input x [m, k'] (k' = 2k for swiglu's gate/up rows) and, for the
// ops that take one, a residual [m, k] or [m, n].
struct Inputs {
  Tensor x, residual, norm;
};
Inputs make_inputs(Device& dev, Op op, int64_t m, int64_t k, int64_t n) {
  Inputs in;
  const int64_t xk = op == Op::SwigluProj ? 2 * k : k;
  in.x = ops::cast(random_f16({m, xk}, dev, 21), DType::F32);
  if (op == Op::AddNormProj) in.residual = ops::cast(random_f16({m, k}, dev, 22), DType::F32);
  if (op == Op::SwigluProj) in.residual = ops::cast(random_f16({m, n}, dev, 23), DType::F32);
  if (op == Op::NormProj || op == Op::AddNormProj) in.norm = ops::cast(random_f16({k}, dev, 24), DType::F32);
  return in;
}

void call(Op op, const Inputs& in, const Tensor& w) {
  constexpr float kEps = 1e-5f;
  switch (op) {
    case Op::NormProj: (void)ops::rms_norm_qmatmul(in.x, in.norm, kEps, w); break;
    case Op::Proj: (void)ops::qmatmul(in.x, w); break;
    case Op::AddNormProj: (void)ops::add_rms_norm_qmatmul(in.x, in.residual, in.norm, kEps, w); break;
    case Op::SwigluProj: (void)ops::swiglu_qmatmul(in.x, w, in.residual); break;
  }
}

const char* op_name(Op op) {
  switch (op) {
    case Op::NormProj: return "rms_norm_qmatmul";
    case Op::Proj: return "qmatmul";
    case Op::AddNormProj: return "add_rms_norm_qmatmul";
    case Op::SwigluProj: return "swiglu_qmatmul";
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--label" && i + 1 < argc) o.label = argv[++i];
    else if (a == "--filter" && i + 1 < argc) o.filter = argv[++i];
    else if (a == "--rows" && i + 1 < argc) o.rows = parse_rows(argv[++i]);
    else if (a == "--min-seconds" && i + 1 < argc) o.min_seconds = std::atof(argv[++i]);
    else if (a == "--layers" && i + 1 < argc) o.layers = std::max(1, std::atoi(argv[++i]));
    else if (a == "--bf16") o.dtype = DType::BF16;
    else if (a == "--one-gpu-only") o.rank = false;
    else if (a == "--rank-only") o.one_gpu = false;
    else {
      fmt::print(stderr,
                 "usage: rbee_bench_decode_gemm_gpu [--label NAME] [--rows 16,32,64,128] [--filter SUBSTRING]\n"
                 "       [--min-seconds S] [--layers N] [--bf16] [--one-gpu-only | --rank-only]\n");
      return 2;
    }
  }
  try {
    log::init_from_env();
    Device* gpu = bench::first_gpu_device();
    if (!gpu) return 1;
    Device& dev = *gpu;
    const DeviceInfo info = dev.info();
    fmt::print("device: {} ({}), {} compute units; label {}; weights {}; {} layers\n", info.name, info.arch,
               info.compute_units, o.label, dtype_name(o.dtype), o.layers);
    const bench::CopyLimit copy = bench::copy_limit(dev, o.min_seconds);
    fmt::print("limit {}: copy {} MiB {:.3f} ms = {:.0f} GB/s (read + write)\n", o.label, copy.elems * 2 >> 20,
               copy.seconds * 1e3, copy.bytes_per_s * 1e-9);

    for (int part = 0; part < 2; ++part) {
      if ((part == 0 && !o.one_gpu) || (part == 1 && !o.rank)) continue;
      const char* part_name = part == 0 ? "1 GPU" : "tp2 rank";
      std::vector<double> step_s(o.rows.size(), 0.0), step_bytes(o.rows.size(), 0.0);
      bool any = false;
      for (const DecodeShape& s : kShapes) {
        const int64_t k = part == 0 ? s.k : s.rank_k, n = part == 0 ? s.n : s.rank_n;
        const std::string shape = fmt::format("{} {} [K {} x N {}]", part_name, s.what, k, n);
        if (!o.filter.empty() && shape.find(o.filter) == std::string::npos) continue;
        any = true;
        const double w_bytes = 2.0 * (double)k * (double)n;
        const int copies = (int)std::clamp<int64_t>((kColdBytes + (int64_t)w_bytes - 1) / (int64_t)w_bytes + 1, 1,
                                                    bench::kCallsPerGraph);
        std::vector<Tensor> ws;
        for (int c = 0; c < copies; ++c) {
          Tensor w = random_f16({n, k}, dev, 100 + (uint64_t)c, 0.05f);
          ws.push_back(o.dtype == DType::F16 ? w : ops::cast(w, o.dtype));
        }
        for (size_t r = 0; r < o.rows.size(); ++r) {
          const int64_t m = o.rows[r];
          const Inputs in = make_inputs(dev, s.op, m, k, n);
          dev.synchronize();
          const auto t0 = std::chrono::steady_clock::now();
          call(s.op, in, ws[0]);  // the shape's first call: plans, timed choice
          dev.synchronize();
          const double first_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          int next = 0;
          const double t = time_per_call(dev, o.min_seconds, [&] {
            call(s.op, in, ws[(size_t)next]);
            next = (next + 1) % copies;
          });
          const double bw = w_bytes / t;
          const int calls = s.per_layer > 0 ? s.per_layer * o.layers : 1;
          step_s[r] += t * calls;
          step_bytes[r] += w_bytes * calls;
          fmt::print("decode {:<8} {:<36} {:<21} M {:>3} {:>8.2f} us {:>6.0f} GB/s  {:.2f} of copy bw  first call "
                     "{:.1f} ms\n",
                     o.label, shape, op_name(s.op), m, t * 1e6, bw * 1e-9, bw / copy.bytes_per_s, first_s * 1e3);
          std::fflush(stdout);
        }
      }
      if (!any) continue;
      for (size_t r = 0; r < o.rows.size(); ++r) {
        const double floor_s = step_bytes[r] / copy.bytes_per_s;
        fmt::print("step   {:<8} {} M {:>3}: products {:.3f} ms for {:.2f} GB of weights = {:.0f} GB/s, {:.2f} of copy "
                   "bw (floor {:.3f} ms)\n",
                   o.label, part_name, o.rows[r], step_s[r] * 1e3, step_bytes[r] * 1e-9,
                   step_bytes[r] / step_s[r] * 1e-9, floor_s / step_s[r], floor_s * 1e3);
      }
    }
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
