// GPU LLM kernel benchmark: quantized / f16 matvec (decode), paged attention (decode and prefill, default, tensor-core
// and scalar kernels side by side), block-type qmatmul on int8
// tensor cores (MMQ: batched decode and prompt rows) and prompt qmatmul, each next to the limits measured in the
// same run: the device-to-device copy bandwidth and an f16 GEMM's rate.
//
//   rbee_bench_gpu_llm [--backend cuda|rocm|auto] [--device N] [--reps R] [--only SECTIONS] [--mmq-rows LIST]
//                      [--types TYPES]
//
// SECTIONS: comma-separated of matvec, fused, attention, mmq, prompt (default all; copy and the f16 GEMM always
// run). matvec: qmatmul at M = 1 and 8 on a Llama-7B layer's shapes, q/k/v and gate/up stacked as the GPU runtime
// stacks them; fused: a decode step's fused ops (op_table.def) next to the unfused op sequences they replace.
// LIST: the M values of the mmq section (default 16,64,128,512).
// TYPES: comma-separated weight types (e.g. q4_0,q4_k) the mmq and prompt sections keep (default: all of theirs).
//
// Timing: each case is run once (warm-up: its temporaries land in the caching allocator), then captured
// `per_graph` times into one graph, and the graph is replayed R times; time = wall time / (R * per_graph).
// Replaying a graph removes the host's launch overhead, so the numbers are the kernels' own. The calls of a
// graph cycle through copies of their operands that together exceed kColdBytes, so the weights and caches
// come from device memory, not from the L2 cache (50 MiB on H100) that a single 4096 x 4096 matrix fits in.
// Bandwidths:
//   copy:        bytes read + written by copy_on_device (2 x buffer size)
//   matvec:      weight bytes (packed) / time; activations are ~0.1% of the traffic
//   attention decode:  K + V bytes of the contexts read / time, vs copy
//   attention prefill: 4 d Hq sum_i (keys query i sees) / time (TFLOP/s of the causal work; QK^T and PV), vs
//                      the f16 GEMM's rate. Rows "scalar" are the same cases on the scalar kernel
//                      (RBEE_PAGED_FLASH=0), decode rows "flash" on the tensor-core kernel (RBEE_ATTN_DECODE_VEC=0).
//   gemm:        2 M N K / time of an f16 GEMM (ops::matmul on the vendor BLAS), M = N = K = 8192
//   mmq:         2 M N K / time (TOPS, int8 products counted as operations) against the f16 GEMM's rate, and the
//                packed weight bytes / time against the copy bandwidth (what bounds batched decode)
//   prompt:      2 M N K / time (TFLOP/s), and the Llama-7B prompt rate of the matmuls alone from them
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "rbee/backend/device.h"
#include "rbee/core/tensor.h"
#include "rbee/ops.h"

namespace {

using namespace rbee;
using Clock = std::chrono::steady_clock;

// Operand copies of a case together hold at least this many bytes (several times any GPU's L2 cache).
constexpr double kColdBytes = 256.0 * (1 << 20);
// Copies needed so that `bytes` each exceed kColdBytes together (at most 256).
int cold_copies(double bytes) { return (int)std::clamp(std::ceil(kColdBytes / bytes), 1.0, 256.0); }
// Calls per graph: at least 20, a whole number of rounds over `copies`.
int calls_per_graph(int copies) { return (20 + copies - 1) / copies * copies; }

// A copy of t at a new device address.
Tensor clone(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype(), t.device());
  t.device().copy_on_device(c.data(), t.data(), (size_t)t.nbytes());
  return c;
}

struct Options {
  std::string backend = "auto";
  int device = 0;
  int reps = 20;
  std::string only;  // empty: every section
  std::vector<int64_t> mmq_rows = {16, 64, 128, 512};
  std::vector<DType> types;  // empty: every type of the mmq / prompt sections
  bool runs(std::string_view section) const {
    if (only.empty()) return true;
    for (size_t p = 0; p <= only.size();) {
      const size_t q = std::min(only.find(',', p), only.size());
      if (std::string_view(only).substr(p, q - p) == section) return true;
      p = q + 1;
    }
    return false;
  }
  bool keeps(DType t) const { return types.empty() || std::find(types.begin(), types.end(), t) != types.end(); }
};

// Seconds per call of `enqueue(i)` (call i of a graph: issues one op on `device` and may drop its result),
// replayed from a graph. Cases that call the vendor BLAS are timed with plain launches instead (use_graph false): whether a
// BLAS call may be captured depends on its workspace handling, and such ops run long enough for launch
// overhead not to matter.
double time_per_call(Device& device, const std::function<void(int)>& enqueue, int per_graph, int reps,
                     bool use_graph = true) {
  for (int i = 0; i < per_graph; ++i) enqueue(i);  // warm-up: allocations of this case reach the cache
  device.synchronize();
  if (!use_graph) {
    const auto t0 = Clock::now();
    for (int i = 0; i < reps * per_graph; ++i) enqueue(i % per_graph);
    device.synchronize();
    return std::chrono::duration<double>(Clock::now() - t0).count() / (reps * per_graph);
  }
  device.begin_graph_capture();
  try {
    for (int i = 0; i < per_graph; ++i) enqueue(i);
  } catch (...) {
    try {
      device.release_graph(device.end_graph_capture());
    } catch (...) {
    }
    throw;
  }
  const Device::GraphId graph = device.end_graph_capture();
  device.replay_graph(graph);
  device.synchronize();
  const auto t0 = Clock::now();
  for (int r = 0; r < reps; ++r) device.replay_graph(graph);
  device.synchronize();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  device.release_graph(graph);
  return seconds / (reps * per_graph);
}

Tensor random_tensor(const Shape& shape, Device& device, uint64_t seed, float scale = 1.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, scale);
  std::vector<float> v((size_t)shape.numel());
  for (auto& x : v) x = normal(rng);
  return Tensor::from_vector(v, shape, device);
}

// Weights [n, k] of `type`, quantized (or cast) on the device from N(0, 0.02) values.
Tensor make_weights(DType type, int64_t n, int64_t k, Device& device) {
  const Tensor f = random_tensor({n, k}, device, 7 + (uint64_t)type, 0.02f);
  if (is_quantized(type)) return ops::quantize(f, type);
  return type == DType::F32 ? f : ops::cast(f, type);
}

// The same from values made on the device (0.02 sin(0.7548777 i + 0.1)): the stacked decode shapes need ~100M
// values per matrix, too many for the host's generator in a short benchmark. Speed does not depend on the
// values beyond their not being zeros.
Tensor make_device_weights(DType type, int64_t n, int64_t k, Device& device) {
  const Tensor i = ops::arange(0.0, 1.0, n * k, DType::F32, device);
  const Tensor f = ops::affine(ops::unary(UnaryOp::Sin, ops::affine(i, 0.7548777, 0.1)), 0.02, 0.0).view({n, k});
  if (is_quantized(type)) return ops::quantize(f, type);
  return type == DType::F32 ? f : ops::cast(f, type);
}

void print_row(const char* op, const std::string& what, double us, const std::string& rate, const std::string& ratio) {
  std::printf("%-18s %-34s %10.2f  %-16s %s\n", op, what.c_str(), us, rate.c_str(), ratio.c_str());
}

int run(const Options& opt) {
  Registry& registry = Registry::global();
  for (const auto& line : registry.load_plugins()) std::printf("# %s\n", line.c_str());
  std::string reason;
  Device& device = registry.select(opt.backend, opt.device, &reason);
  const DeviceInfo info = device.info();
  std::printf("# device: %s (%s, %s, %d compute units); %s\n", info.name.c_str(), info.backend.c_str(),
              info.arch.c_str(), info.compute_units, reason.c_str());
  if (!device.supports_graphs()) {
    std::printf("# %s has no graph support: this benchmark needs a GPU backend\n", device.id().c_str());
    return 1;
  }
  std::printf("%-18s %-34s %10s  %-16s %s\n", "op", "case", "time us", "rate", "vs copy");

  // ---- the reference: device-to-device copy ----
  const int64_t copy_bytes = int64_t{512} << 20;
  const Tensor src = Tensor::empty({copy_bytes}, DType::U8, device), dst = Tensor::empty({copy_bytes}, DType::U8, device);
  const double copy_s = time_per_call(
      device, [&](int) { device.copy_on_device(dst.data(), src.data(), (size_t)copy_bytes); }, 4, opt.reps);
  const double copy_gbs = 2.0 * (double)copy_bytes / copy_s / 1e9;
  print_row("copy d2d", "512 MiB, read + write", copy_s * 1e6, fmt::format("{:.0f} GB/s", copy_gbs), "1.00");
  auto vs_copy = [&](double gbs) { return fmt::format("{:.2f}", gbs / copy_gbs); };

  // ---- the reference: an f16 GEMM on the vendor BLAS ----
  double gemm_tflops = 0;
  {
    const int64_t g = 8192;
    const Tensor a = ops::cast(random_tensor({g, g}, device, 31), DType::F16);
    const Tensor b = ops::cast(random_tensor({g, g}, device, 32), DType::F16);
    const Tensor bt = b.transpose(0, 1);
    const double s = time_per_call(device, [&](int) { (void)ops::matmul(a, bt); }, 2, std::max(2, opt.reps / 4), false);
    gemm_tflops = 2.0 * (double)g * g * g / s / 1e12;
    print_row("gemm f16", "M=N=K=8192, f32 accumulation", s * 1e6, fmt::format("{:.0f} TFLOP/s", gemm_tflops), "");
  }

  const DType kTypes[] = {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F16};
  const std::pair<int64_t, int64_t> kShapes[] = {{4096, 4096}, {11008, 4096}, {4096, 11008}};  // the mmq section's

  // ---- decode matvec: M = 1 and M = 8, a Llama-7B layer's shapes (q/k/v [12288, 4096] and gate/up
  // [22016, 4096] stacked) ----
  const std::pair<int64_t, int64_t> kDecodeShapes[] = {
      {4096, 4096}, {11008, 4096}, {4096, 11008}, {12288, 4096}, {22016, 4096}};
  for (const auto& [n, k] : kDecodeShapes) {
    if (!opt.runs("matvec")) break;
    for (const DType type : kTypes) {
      const double bytes = (double)dtype_row_bytes(type, k) * (double)n;
      std::vector<Tensor> ws{make_device_weights(type, n, k, device)};
      while ((int)ws.size() < cold_copies(bytes)) ws.push_back(clone(ws[0]));
      const int per_graph = calls_per_graph((int)ws.size());
      for (const int64_t m : {1, 8}) {
        const Tensor x = random_tensor({m, k}, device, 11);
        const double s = time_per_call(
            device, [&](int i) { (void)ops::qmatmul(x, ws[(size_t)i % ws.size()]); }, per_graph, opt.reps);
        const double gbs = bytes / s / 1e9;
        print_row("qmatmul matvec", fmt::format("{} N={} K={} M={}", dtype_name(type), n, k, m), s * 1e6,
                  fmt::format("{:.0f} GB/s", gbs), vs_copy(gbs));
      }
    }
  }

  // ---- the fused decoder ops (M = 1) next to the op sequences they replace ----
  // norm+qkv: rms_norm_qmatmul(x, w [12288, 4096]) vs rms_norm then qmatmul; swiglu+down+add:
  // swiglu_qmatmul(gate_up [1, 22016], w [4096, 11008], residual) vs swiglu of the halves, qmatmul, add.
  if (opt.runs("fused")) {
    const DType kFusedTypes[] = {DType::Q4_0, DType::Q4_K, DType::Q8_0, DType::F16};
    const Tensor x = random_tensor({1, 4096}, device, 31), nw = random_tensor({4096}, device, 32);
    const Tensor gu = random_tensor({1, 22016}, device, 33), res = random_tensor({1, 4096}, device, 34);
    struct Case {
      const char* name;
      int64_t n, k;
      bool fused;
    };
    const Case cases[] = {{"norm+qkv, fused", 12288, 4096, true},
                          {"norm, qkv", 12288, 4096, false},
                          {"swiglu+down+add, fused", 4096, 11008, true},
                          {"swiglu, down, add", 4096, 11008, false}};
    for (const DType type : kFusedTypes) {
      for (const Case& c : cases) {
        const double bytes = (double)dtype_row_bytes(type, c.k) * (double)c.n;
        std::vector<Tensor> ws{make_device_weights(type, c.n, c.k, device)};
        while ((int)ws.size() < cold_copies(bytes)) ws.push_back(clone(ws[0]));
        const int per_graph = calls_per_graph((int)ws.size());
        const bool norm = c.k == 4096;
        const double s = time_per_call(
            device,
            [&](int i) {
              const Tensor& w = ws[(size_t)i % ws.size()];
              if (norm && c.fused) (void)ops::rms_norm_qmatmul(x, nw, 1e-5f, w);
              else if (norm) (void)ops::qmatmul(ops::rms_norm(x, nw, 1e-5f), w);
              else if (c.fused) (void)ops::swiglu_qmatmul(gu, w, res);
              else (void)ops::add(res, ops::qmatmul(ops::swiglu(gu.narrow(1, 0, 11008), gu.narrow(1, 11008, 11008)), w));
            },
            per_graph, opt.reps);
        const double gbs = bytes / s / 1e9;
        print_row("decode op", fmt::format("{} {} N={} K={}", dtype_name(type), c.name, c.n, c.k), s * 1e6,
                  fmt::format("{:.0f} GB/s", gbs), vs_copy(gbs));
      }
    }
  }

  // ---- paged attention: f16 caches, block size 16, head size 128 ----
  // Llama-2-7B (32 query / 32 kv heads) and Llama-3-8B (32 / 8). Each row also on the scalar kernel.
  struct Heads {
    const char* name;
    int hq, hkv;
  };
  const Heads kHeads[] = {{"32/32x128", 32, 32}, {"32/8x128", 32, 8}};
  const int d = 128, block_size = 16;
  // Rows on the default kernel (decode with GQA groups <= 4: the vector decode kernel; else tensor cores), then with
  // RBEE_ATTN_DECODE_VEC=0 (" flash": the tensor-core kernel; decode rows only), then on the scalar kernel.
  auto both_kernels = [&](const std::function<void(const char*)>& run_case, bool decode = false) {
    unsetenv("RBEE_PAGED_FLASH");
    unsetenv("RBEE_ATTN_DECODE_VEC");
    run_case("");
    setenv("RBEE_ATTN_DECODE_VEC", "0", 1);
    if (decode) run_case(" flash");
    setenv("RBEE_PAGED_FLASH", "0", 1);
    run_case(" scalar");
    unsetenv("RBEE_PAGED_FLASH");
    unsetenv("RBEE_ATTN_DECODE_VEC");
  };
  if (opt.runs("attention")) {
    // Prefill: one fresh prompt of n tokens (q_len = ctx = n), causal.
    for (const Heads& hd : kHeads) {
      for (const int n : {512, 4096}) {
        const int blocks = n / block_size;
        const Tensor kc = ops::cast(random_tensor({blocks, block_size, hd.hkv, d}, device, 41), DType::F16);
        const Tensor vc = ops::cast(random_tensor({blocks, block_size, hd.hkv, d}, device, 42), DType::F16);
        const Tensor q = random_tensor({n, hd.hq, d}, device, 43);
        std::vector<int32_t> table(blocks);
        for (int j = 0; j < blocks; ++j) table[j] = j;
        const Tensor seq_info = Tensor::from_vector(std::vector<int32_t>{0, n, n}, {1, 3}, device);
        const Tensor block_tables = Tensor::from_vector(table, {1, blocks}, device);
        AttentionParams params;
        params.scale = 1.f / std::sqrt((float)d);
        params.causal = true;
        const double flops = 4.0 * d * hd.hq * ((double)n * (n + 1) / 2);
        both_kernels([&](const char* tag) {
          const double s = time_per_call(
              device, [&](int) { (void)ops::paged_attention(q, kc, vc, seq_info, block_tables, params); }, 5,
              opt.reps);
          const double tflops = flops / s / 1e12;
          print_row("paged_attention", fmt::format("prefill {} {} f16{}", n, hd.name, tag), s * 1e6,
                    fmt::format("{:.1f} TFLOP/s", tflops), fmt::format("{:.2f}", tflops / gemm_tflops));
        });
      }
    }

    // Decode: `batch` sequences of one new token at context ctx.
    for (const Heads& hd : kHeads) {
      for (const int batch : {1, 16, 64, 128}) {
        for (const int ctx : {256, 512, 4096}) {
          if (batch == 128 && ctx == 4096) continue;
          const int blocks_per_seq = ctx / block_size;
          const int num_blocks = batch * blocks_per_seq;
          std::vector<Tensor> k_caches{
              ops::cast(random_tensor({num_blocks, block_size, hd.hkv, d}, device, 21), DType::F16)};
          std::vector<Tensor> v_caches{
              ops::cast(random_tensor({num_blocks, block_size, hd.hkv, d}, device, 22), DType::F16)};
          const double bytes = 2.0 * batch * ctx * hd.hkv * d * 2;
          while ((int)k_caches.size() < cold_copies(bytes)) {
            k_caches.push_back(clone(k_caches[0]));
            v_caches.push_back(clone(v_caches[0]));
          }
          const int per_graph = calls_per_graph((int)k_caches.size());
          const Tensor q = random_tensor({batch, hd.hq, d}, device, 23);
          std::vector<int32_t> info, tables;
          for (int b = 0; b < batch; ++b) {
            info.insert(info.end(), {b, 1, ctx});
            for (int j = 0; j < blocks_per_seq; ++j) tables.push_back(b * blocks_per_seq + j);
          }
          const Tensor seq_info = Tensor::from_vector(info, {batch, 3}, device);
          const Tensor block_tables = Tensor::from_vector(tables, {batch, blocks_per_seq}, device);
          AttentionParams params;
          params.scale = 1.f / std::sqrt((float)d);
          params.causal = true;
          both_kernels([&](const char* tag) {
            const double s = time_per_call(
                device,
                [&](int i) {
                  const size_t c = (size_t)i % k_caches.size();
                  (void)ops::paged_attention(q, k_caches[c], v_caches[c], seq_info, block_tables, params);
                },
                per_graph, opt.reps);
            const double gbs = bytes / s / 1e9;
            print_row("paged_attention", fmt::format("decode B={} ctx={} {} f16{}", batch, ctx, hd.name, tag),
                      s * 1e6, fmt::format("{:.0f} GB/s", gbs), vs_copy(gbs));
          }, true);
        }
      }
    }
  }

  // ---- MMQ: every block type at the batched-decode and prompt row counts, 7B weight shapes ----
  // Graph replays over copies of the weights (>= kColdBytes), so M = 16 reads them from device memory.
  const DType kBlockTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q8_1,
                               DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K};
  for (const DType type : kBlockTypes) {
    if (!opt.runs("mmq")) break;
    if (!opt.keeps(type)) continue;
    for (const auto& [n, k] : kShapes) {
      const double bytes = (double)dtype_row_bytes(type, k) * (double)n;
      std::vector<Tensor> ws{make_weights(type, n, k, device)};
      while ((int)ws.size() < cold_copies(bytes)) ws.push_back(clone(ws[0]));
      const int per_graph = calls_per_graph((int)ws.size());
      for (const int64_t m : opt.mmq_rows) {
        const Tensor x = random_tensor({m, k}, device, 13);
        const double s = time_per_call(
            device, [&](int i) { (void)ops::qmatmul(x, ws[(size_t)i % ws.size()]); }, per_graph, opt.reps);
        const double tops = 2.0 * (double)m * (double)n * (double)k / s / 1e12, gbs = bytes / s / 1e9;
        print_row("qmatmul mmq", fmt::format("{} N={} K={} M={}", dtype_name(type), n, k, m), s * 1e6,
                  fmt::format("{:.1f} TOPS {:.0f} GB/s", tops, gbs),
                  fmt::format("{:.2f} gemm {:.2f} copy", tops / gemm_tflops, gbs / copy_gbs));
      }
    }
  }

  // ---- prompt: M = 512, the weight shapes of a Llama-7B layer ----
  // Per layer: q, k, v, o (4096 x 4096), gate and up (11008 x 4096), down (4096 x 11008); 32 layers and the
  // 32000 x 4096 output head. The pp512 line adds these matmuls' times only (no attention, norms, rope).
  const int64_t m = 512;
  const std::pair<int64_t, int64_t> kPromptShapes[] = {{4096, 4096}, {11008, 4096}, {4096, 11008}, {32000, 4096}};
  const double kPerModel[] = {32 * 4, 32 * 2, 32, 1};
  for (const DType type : kTypes) {
    if (!opt.runs("prompt")) break;
    if (!opt.keeps(type)) continue;
    double model_s = 0;
    for (size_t si = 0; si < std::size(kPromptShapes); ++si) {
      const auto [n, k] = kPromptShapes[si];
      const Tensor w = make_weights(type, n, k, device);
      const Tensor x = random_tensor({m, k}, device, 12);
      const double s = time_per_call(device, [&](int) { (void)ops::qmatmul(x, w); }, 4, opt.reps, false);
      model_s += kPerModel[si] * s;
      const double tflops = 2.0 * (double)m * (double)n * (double)k / s / 1e12;
      print_row("qmatmul prompt", fmt::format("{} N={} K={} M={}", dtype_name(type), n, k, m), s * 1e6,
                fmt::format("{:.1f} TFLOP/s", tflops), fmt::format("{:.2f} gemm", tflops / gemm_tflops));
    }
    print_row("pp512 7B matmuls", fmt::format("{} weights, sum of the above", dtype_name(type)), model_s * 1e6,
              fmt::format("{:.0f} tok/s", (double)m / model_s), "");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--backend") opt.backend = value();
    else if (a == "--device") opt.device = std::atoi(value().c_str());
    else if (a == "--reps") opt.reps = std::max(1, std::atoi(value().c_str()));
    else if (a == "--only") opt.only = value();
    else if (a == "--mmq-rows") {
      opt.mmq_rows.clear();
      const std::string list = value();
      for (size_t p = 0; p < list.size();) {
        const size_t q = std::min(list.find(',', p), list.size());
        opt.mmq_rows.push_back(std::max<int64_t>(1, std::atoll(list.substr(p, q - p).c_str())));
        p = q + 1;
      }
    } else if (a == "--types") {
      const std::string list = value();
      for (size_t p = 0; p < list.size();) {
        const size_t q = std::min(list.find(',', p), list.size());
        const std::string name = list.substr(p, q - p);
        const std::optional<DType> t = dtype_from_name(name);
        if (!t) {
          std::fprintf(stderr, "--types: unknown dtype '%s'\n", name.c_str());
          return 2;
        }
        opt.types.push_back(*t);
        p = q + 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--backend cuda|rocm|auto] [--device N] [--reps R]"
                   " [--only matvec,fused,attention,mmq,prompt] [--mmq-rows 16,64,128,512] [--types q4_0,q4_k,...]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    return run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
