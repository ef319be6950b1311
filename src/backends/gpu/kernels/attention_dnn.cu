// Attention through the vendor library (attention_dnn.h). The path each new shape takes is logged once (debug level;
// a shape the library refuses at info level with cuDNN's reason), so `rbee_sd_bench --attention` shows it per call.
#include "backends/gpu/kernels/attention_dnn.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string_view>
#include <utility>

#include "backends/gpu/dnn.h"
#include "backends/gpu/gpu_device.h"
#include "rbee/core/log.h"
#include "rbee/core/env.h"

namespace rbee::gpu {

namespace {

// RBEE_ATTN_CUDNN=0: off. Otherwise (unset, =1) every shape the library takes: on the H100 cuDNN 9's fused kernel
// (the machine's libcudnn.so.9) took 0.38-0.86 of the flash kernel's time on every attention shape of the SD 1.5 and
// SDXL UNets (self and 77-key cross, head sizes 40, 64, 80, 160; docs/perf-notes/sd-speed.md, session 9), so no shape
// is held back.
bool dnn_enabled() {
  static const bool on = env::flag_or("RBEE_ATTN_CUDNN", true);
  return on;
}

// The largest power of two up to 16 that divides the address.
int alignment_of(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  int a = 16;
  while (a > 1 && v % (uintptr_t)a != 0) a /= 2;
  return a;
}

// One debug line per new (shape, path) pair.
void note_path(const DnnAttention& a, const char* path) {
  static std::mutex mutex;
  static std::set<std::pair<std::array<int64_t, 19>, std::string_view>> seen;
  std::lock_guard<std::mutex> lock(mutex);
  if (!seen.emplace(a.key(), path).second) return;
  log::debug("attention [{}, {}, {}, {}, {}] {}: {}", a.b, a.h, a.tq, a.tk, a.d,
             a.dtype == DType::BF16 ? "bf16" : "f16", path);
}

}  // namespace

bool attention_dnn(GpuDevice& dev, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& params,
                   Tensor& out) {
  const DType dt = q.dtype();
  if (!dnn_enabled() || (dt != DType::F16 && dt != DType::BF16)) return false;
  if (params.causal || params.window > 0 || params.softcap > 0) return false;
  const int64_t d = q.dim(3);
  if (k.dim(1) != q.dim(1) || v.dim(3) != d || d % 8 != 0 || d > 256 || q.dim(2) == 0 || k.dim(2) == 0) return false;
  for (const Tensor* t : {&q, &k, &v, (const Tensor*)&out}) {
    if (t->stride(3) != 1) return false;
    for (int ax = 0; ax < 3; ++ax) {
      if (t->stride(ax) < 0) return false;
    }
  }
  DnnAttention a;
  a.dtype = dt;
  a.b = q.dim(0);
  a.h = q.dim(1);
  a.tq = q.dim(2);
  a.tk = k.dim(2);
  a.d = d;
  a.q_strides = {q.stride(0), q.stride(1), q.stride(2)};
  a.k_strides = {k.stride(0), k.stride(1), k.stride(2)};
  a.v_strides = {v.stride(0), v.stride(1), v.stride(2)};
  a.o_strides = {out.stride(0), out.stride(1), out.stride(2)};
  a.align =
      std::min({alignment_of(q.data()), alignment_of(k.data()), alignment_of(v.data()), alignment_of(out.data())});
  Dnn* dnn = dev.dnn();
  if (!dnn) {
    static std::once_flag logged;
    std::call_once(logged, [&] { log::info("{}: {}", dev.id(), dev.dnn_note()); });
    return false;
  }
  size_t ws_bytes = 0;
  if (!dnn->plan_attention(a, !dev.capturing(), &ws_bytes)) {
    note_path(a, "rbee's kernels (the library declined or the shape was first seen in a graph capture)");
    return false;
  }
  const Tensor workspace = ws_bytes ? Tensor::empty({(int64_t)ws_bytes}, DType::U8, dev) : Tensor();
  if (!dnn->run_attention(a, params.scale, q.data(), k.data(), v.data(), out.data(),
                          ws_bytes ? workspace.data() : nullptr, ws_bytes, dev.stream()))
    return false;
  note_path(a, "cuDNN fused flash attention");
  return true;
}

}  // namespace rbee::gpu
