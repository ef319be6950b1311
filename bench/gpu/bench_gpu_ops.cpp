// GPU op microbenchmarks (built with RBEE_CUDA or RBEE_HIP): prints one table row per case.
//
//   copy      device-to-device copy of 1 GiB, GB/s of bytes read + written: the bandwidth roof for the rows below
//   matmul    4096^3 (f16, bf16, f32) through the vendor Blas, and through rbee's own tiled GEMM (the ROCm
//             fallback; measured in a child process started with RBEE_GPU_BLAS=off), TFLOP/s
//   softmax   rows x n, GB/s of bytes read + written, and its ratio to the copy bandwidth
//   rms_norm  rows x n (and add_rms_norm), GB/s, ratio to copy
//   swiglu    rows x n, GB/s of gate, up and out, ratio to copy
//   rope      Neox over [tokens, heads, 128] (a q projection), GB/s of x and out, ratio to copy
//   attention prefill (causal, T = 2048) and decode (T_q = 1 over 4096 keys, GQA), TFLOP/s of the visible
//             (query, key) pairs at 2 (D + Dv) flops each, and GB/s of q, k, v and out for decode
//
// Usage: rbee_bench_gpu [--backend cuda|rocm] [--device N] [--reps N]. Timing: the ops' device API has no
// events, so each case runs a few warm-up calls, then repeats until 0.3 s have passed, with synchronize() and
// the wall clock around the whole loop.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "rbee/backend/device.h"
#include "rbee/ops.h"

namespace {

using namespace rbee;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string backend;  // empty: cuda, else rocm
  int device = 0;
  int min_reps = 5;
  bool rbee_gemm_only = false;  // child mode: only the rbee GEMM rows
};

// Seconds per call of fn: warm-up, then repeat until 0.3 s and at least min_reps calls.
double time_call(Device& dev, int min_reps, const std::function<void()>& fn) {
  for (int i = 0; i < 2; ++i) fn();
  dev.synchronize();
  int reps = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  while (reps < min_reps || elapsed < 0.3) {
    fn();
    ++reps;
    if (reps % 4 == 0 || reps >= min_reps) {
      dev.synchronize();
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    }
  }
  dev.synchronize();
  elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  return elapsed / reps;
}

// Uniform [-1, 1) values made on the host, cast to `dtype` there and uploaded.
Tensor random_tensor(const Shape& shape, DType dtype, Device& dev, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v((size_t)shape.numel());
  for (float& x : v) x = dist(rng);
  Device& cpu = Registry::global().cpu();
  return ops::cast(Tensor::from_vector(v, shape, cpu), dtype).to(dev);
}

void print_header() {
  fmt::print("{:<44} {:>12} {:>14} {:>10}\n", "case", "time (us)", "rate", "vs copy");
  fmt::print("{}\n", std::string(83, '-'));
}
void print_row(const std::string& name, double seconds, double rate, const char* unit, double copy_gbs = 0) {
  const std::string ratio = copy_gbs > 0 ? fmt::format("{:.2f}", rate / copy_gbs) : "";
  fmt::print("{:<44} {:>12.1f} {:>9.2f} {:<4} {:>10}\n", name, seconds * 1e6, rate, unit, ratio);
}

double bench_copy(Device& dev, const Options& o) {
  const int64_t n = (int64_t)1 << 28;  // 1 GiB of f32
  const Tensor src = ops::zeros({n}, DType::F32, dev);
  const Tensor dst = Tensor::empty({n}, DType::F32, dev);
  const double t = time_call(dev, o.min_reps, [&] { dev.copy_on_device(dst.data(), src.data(), (size_t)src.nbytes()); });
  const double gbs = 2.0 * (double)src.nbytes() / t * 1e-9;
  print_row("copy d2d 1 GiB", t, gbs, "GB/s");
  return gbs;
}

void bench_matmul(Device& dev, const Options& o, const char* label) {
  const int64_t m = 4096, n = 4096, k = 4096;
  for (DType dt : {DType::F16, DType::BF16, DType::F32}) {
    const Tensor a = random_tensor({m, k}, dt, dev, 1), b = random_tensor({k, n}, dt, dev, 2);
    const double t = time_call(dev, o.min_reps, [&] { ops::matmul(a, b); });
    print_row(fmt::format("matmul {} 4096^3 {}", label, dtype_name(dt)), t, 2.0 * m * n * k / t * 1e-12, "TF/s");
  }
  // A linear layer's shape: x [M, K] . w^T with w stored [N, K].
  const Tensor x = random_tensor({512, 4096}, DType::F16, dev, 3), w = random_tensor({11008, 4096}, DType::F16, dev, 4);
  const double t = time_call(dev, o.min_reps, [&] { ops::matmul(x, w.transpose(0, 1)); });
  print_row(fmt::format("matmul {} 512x4096 . (11008x4096)^T f16", label), t, 2.0 * 512 * 4096 * 11008 / t * 1e-12,
            "TF/s");
}

void bench_rows(Device& dev, const Options& o, double copy_gbs) {
  struct Case {
    int64_t rows, n;
    DType dtype;
  };
  for (const Case& c : {Case{8192, 4096, DType::F32}, Case{8192, 4096, DType::F16}, Case{256, 32768, DType::F32},
                        Case{16, 152064, DType::F32}}) {
    const Tensor x = random_tensor({c.rows, c.n}, c.dtype, dev, 5);
    const double t = time_call(dev, o.min_reps, [&] { ops::softmax(x); });
    const double gbs = 2.0 * (double)x.nbytes() / t * 1e-9;
    print_row(fmt::format("softmax {}x{} {}", c.rows, c.n, dtype_name(c.dtype)), t, gbs, "GB/s", copy_gbs);
  }
  for (const Case& c : {Case{8192, 4096, DType::F32}, Case{8192, 4096, DType::BF16}, Case{16, 4096, DType::F16}}) {
    const Tensor x = random_tensor({c.rows, c.n}, c.dtype, dev, 6), w = random_tensor({c.n}, c.dtype, dev, 7);
    const double t = time_call(dev, o.min_reps, [&] { ops::rms_norm(x, w, 1e-5f); });
    const double gbs = (2.0 * (double)x.nbytes() + (double)w.nbytes()) / t * 1e-9;
    print_row(fmt::format("rms_norm {}x{} {}", c.rows, c.n, dtype_name(c.dtype)), t, gbs, "GB/s", copy_gbs);
  }
  for (const Case& c : {Case{8192, 4096, DType::F16}, Case{16, 4096, DType::BF16}}) {
    const Tensor x = random_tensor({c.rows, c.n}, c.dtype, dev, 8), r = random_tensor({c.rows, c.n}, c.dtype, dev, 9);
    const Tensor w = random_tensor({c.n}, c.dtype, dev, 10);
    const double t = time_call(dev, o.min_reps, [&] { ops::add_rms_norm(x, r, w, 1e-5f); });
    const double gbs = (4.0 * (double)x.nbytes() + (double)w.nbytes()) / t * 1e-9;
    print_row(fmt::format("add_rms_norm {}x{} {}", c.rows, c.n, dtype_name(c.dtype)), t, gbs, "GB/s", copy_gbs);
  }
  for (const Case& c : {Case{4096, 14336, DType::F16}, Case{4096, 14336, DType::F32}}) {
    const Tensor g = random_tensor({c.rows, c.n}, c.dtype, dev, 11), u = random_tensor({c.rows, c.n}, c.dtype, dev, 12);
    const double t = time_call(dev, o.min_reps, [&] { ops::swiglu(g, u); });
    const double gbs = 3.0 * (double)g.nbytes() / t * 1e-9;
    print_row(fmt::format("swiglu {}x{} {}", c.rows, c.n, dtype_name(c.dtype)), t, gbs, "GB/s", copy_gbs);
  }
  for (const Case& c : {Case{4096, 32, DType::F16}, Case{4096, 32, DType::F32}}) {
    const Tensor x = random_tensor({c.rows, c.n, 128}, c.dtype, dev, 13);
    std::vector<int32_t> pos((size_t)c.rows);
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = (int32_t)i;
    const Tensor positions = Tensor::from_vector(pos, {c.rows}, dev);
    RopeParams rp;
    rp.rotary_dim = 128;
    const Tensor inv_freq = Tensor::from_vector(ops::rope_inv_freq(128, 10000.0f, {}), {64}, dev);
    const double t = time_call(dev, o.min_reps, [&] { ops::rope(x, positions, inv_freq, rp); });
    const double gbs = 2.0 * (double)x.nbytes() / t * 1e-9;
    print_row(fmt::format("rope neox {}x{}x128 {}", c.rows, c.n, dtype_name(c.dtype)), t, gbs, "GB/s", copy_gbs);
  }
}

void bench_attention(Device& dev, const Options& o, double copy_gbs) {
  struct Case {
    const char* name;
    int64_t batch, q_heads, kv_heads, tq, tk, dim;
    bool causal;
    DType dtype;
  };
  const Case cases[] = {
      {"prefill causal 1x32x2048 d128", 1, 32, 32, 2048, 2048, 128, true, DType::F16},
      {"prefill causal 1x32x2048 d128", 1, 32, 32, 2048, 2048, 128, true, DType::F32},
      {"prefill SD 2x8x4096 d64 (full)", 2, 8, 8, 4096, 4096, 64, false, DType::F16},
      {"decode 1x32/8x1x4096 d128", 1, 32, 8, 1, 4096, 128, true, DType::F16},
      {"decode 8x32/8x1x4096 d128", 8, 32, 8, 1, 4096, 128, true, DType::F16},
  };
  for (const Case& c : cases) {
    const Tensor q = random_tensor({c.batch, c.q_heads, c.tq, c.dim}, c.dtype, dev, 8);
    const Tensor k = random_tensor({c.batch, c.kv_heads, c.tk, c.dim}, c.dtype, dev, 9);
    const Tensor v = random_tensor({c.batch, c.kv_heads, c.tk, c.dim}, c.dtype, dev, 10);
    AttentionParams p;
    p.scale = 1.0f / std::sqrt((float)c.dim);
    p.causal = c.causal;
    const double t = time_call(dev, o.min_reps, [&] { ops::attention(q, k, v, p); });
    // Visible pairs: all of them, or for a causal square the lower triangle.
    double pairs = (double)c.tq * (double)c.tk;
    if (c.causal && c.tq > 1) pairs = (double)c.tq * (double)(c.tq + 1) / 2 + (double)c.tq * (double)(c.tk - c.tq);
    const double flops = pairs * (double)(c.batch * c.q_heads) * 2.0 * (double)(2 * c.dim);
    const std::string name = fmt::format("attention {} {}", c.name, dtype_name(c.dtype));
    if (c.tq == 1) {
      const double bytes = (double)(q.nbytes() + k.nbytes() + v.nbytes() + q.nbytes());
      print_row(name, t, bytes / t * 1e-9, "GB/s", copy_gbs);
    } else {
      print_row(name, t, flops / t * 1e-12, "TF/s");
    }
  }
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Error(ErrorCode::InvalidArgument, fmt::format("{} needs a value", a));
      return argv[++i];
    };
    if (a == "--backend") o.backend = value();
    else if (a == "--device") o.device = std::stoi(value());
    else if (a == "--reps") o.min_reps = std::max(1, std::stoi(value()));
    else if (a == "--rbee-gemm-only") o.rbee_gemm_only = true;
    else throw Error(ErrorCode::InvalidArgument, fmt::format("unknown argument '{}'", a));
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    Registry& registry = Registry::global();
    const std::vector<std::string> report = registry.load_plugins();
    std::string backend = o.backend;
    if (backend.empty()) {
      Backend* cuda = registry.find("cuda");
      backend = cuda && cuda->device_count() > 0 ? "cuda" : "rocm";
    }
    Backend* b = registry.find(backend);
    if (!b || b->device_count() == 0) {
      fmt::print(stderr, "no {} device; plug-ins:\n", backend);
      for (const auto& line : report) fmt::print(stderr, "  {}\n", line);
      return 1;
    }
    Device& dev = b->device(o.device);
    if (o.rbee_gemm_only) {
      bench_matmul(dev, o, "rbee-gemm");
      return 0;
    }
    const DeviceInfo info = dev.info();
    fmt::print("device: {} ({}, {}), {} compute units\n", info.name, info.backend, info.arch, info.compute_units);
    for (const auto& [key, value] : info.extra) fmt::print("  {}: {}\n", key, value);
    print_header();
    const double copy_gbs = bench_copy(dev, o);
    bench_matmul(dev, o, "blas");
    std::fflush(stdout);
    // rbee's GEMM needs a device without the vendor Blas: a child process of this program, same arguments.
    const std::string child = fmt::format("RBEE_GPU_BLAS=off '{}' --backend {} --device {} --reps {} --rbee-gemm-only",
                                          argv[0], backend, o.device, o.min_reps);
    if (std::system(child.c_str()) != 0) fmt::print("(rbee GEMM child process failed)\n");
    bench_rows(dev, o, copy_gbs);
    bench_attention(dev, o, copy_gbs);
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
