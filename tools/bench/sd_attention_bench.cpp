// rbee_sd_bench --attention (sd_attention_bench.h).
#include "sd_attention_bench.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "rbee/backend/device.h"
#include "rbee/core/log.h"
#include "rbee/ops.h"

namespace {

using Clock = std::chrono::steady_clock;

struct AttnShape {
  const char* name;
  int64_t batch, heads, tq, tk, dim;
};

// Both guidance halves (batch 2) of the main attention calls of the two UNets (the 8x8 level and SD 1.5's cross-
// attention below 64x64 left out).
constexpr AttnShape kShapes[] = {
    {"sd15 self 64x64", 2, 8, 4096, 4096, 40},   {"sd15 cross 64x64", 2, 8, 4096, 77, 40},
    {"sd15 self 32x32", 2, 8, 1024, 1024, 80},   {"sd15 self 16x16", 2, 8, 256, 256, 160},
    {"sdxl self 64x64", 2, 10, 4096, 4096, 64},  {"sdxl cross 64x64", 2, 10, 4096, 77, 64},
    {"sdxl self 32x32", 2, 20, 1024, 1024, 64},  {"sdxl cross 32x32", 2, 20, 1024, 77, 64},
};

// [B, len, H * D] f16 storage viewed as [B, H, len, D] (what nn::mha hands to ops::attention).
rbee::Tensor head_view(int64_t b, int64_t len, int64_t h, int64_t d, uint64_t seed, rbee::Device& dev) {
  std::vector<float> v((size_t)(b * len * h * d));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : v) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    x = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
  const rbee::Tensor t = rbee::Tensor::from_vector(v, {b, len, h * d}, dev).to(rbee::DType::F16);
  return t.as_strided({b, h, len, d}, {len * h * d, d, h * d, 1}, t.offset());
}

}  // namespace

void run_sd_attention_bench(rbee::Device& dev) {
  const char* cudnn = std::getenv("RBEE_ATTN_CUDNN");
  std::printf("attention: shape, us/call, TFLOP/s (4 Tq Tk D per head, both guidance halves); out written as "
              "[B, T, H * D]; RBEE_ATTN_CUDNN=%s\n", cudnn ? cudnn : "(unset: default rule)");
  // The GPU backends log the path of each new attention shape at debug level (stderr, before its row).
  const char* level = std::getenv("RBEE_LOG_LEVEL");
  if (!level) rbee::log::set_level("debug");
  for (const AttnShape& s : kShapes) {
    const rbee::Tensor q = head_view(s.batch, s.tq, s.heads, s.dim, 1, dev);
    const rbee::Tensor k = head_view(s.batch, s.tk, s.heads, s.dim, 2, dev);
    const rbee::Tensor v = head_view(s.batch, s.tk, s.heads, s.dim, 3, dev);
    rbee::Tensor out_storage = rbee::Tensor::empty({s.batch, s.tq, s.heads * s.dim}, rbee::DType::F16, dev);
    rbee::Tensor out = out_storage.as_strided({s.batch, s.heads, s.tq, s.dim},
                                              {s.tq * s.heads * s.dim, s.dim, s.heads * s.dim, 1}, 0);
    rbee::AttentionParams p;
    p.scale = (float)(1.0 / std::sqrt((double)s.dim));
    for (int i = 0; i < 3; ++i) rbee::ops::attention(q, k, v, p, out);
    dev.synchronize();
    int reps = 0;
    const auto t0 = Clock::now();
    double elapsed = 0;
    while (reps < 20 || elapsed < 0.2) {
      rbee::ops::attention(q, k, v, p, out);
      if (++reps % 10 == 0) {
        dev.synchronize();
        elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
      }
    }
    dev.synchronize();
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    const double us = elapsed / reps * 1e6;
    const double flop = 4.0 * (double)(s.batch * s.heads) * (double)s.tq * (double)s.tk * (double)s.dim;
    std::fflush(stderr);
    std::printf("attention: %-18s %9.1f us %7.1f TFLOP/s\n", s.name, us, flop / us * 1e-6);
    std::fflush(stdout);
  }
  if (!level) rbee::log::set_level("info");
}
