// f16/bf16 -> f32 row widening for the CPU kernels that compute 16-bit inputs in f32 (cpu_nn_util.h).
// Exact on every target (F16C on AVX2 and up, bit shifts for bf16).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/cpu_widen.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "backends/cpu/cpu_nn_util.h"

HWY_BEFORE_NAMESPACE();
namespace rbee::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void WidenF16(const uint16_t* src, float* dst, int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const int64_t N = (int64_t)hn::Lanes(df);
  const auto* h = reinterpret_cast<const hwy::float16_t*>(src);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, h + i)), df, dst + i);
  for (; i < n; ++i) dst[i] = f16_bits_to_f32(src[i]);
}

void WidenBF16(const uint16_t* src, float* dst, int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::bfloat16_t, decltype(df)> db;
  const int64_t N = (int64_t)hn::Lanes(df);
  const auto* b = reinterpret_cast<const hwy::bfloat16_t*>(src);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(db, b + i)), df, dst + i);
  for (; i < n; ++i) dst[i] = bf16_bits_to_f32(src[i]);
}

}  // namespace rbee::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rbee::cpu {
HWY_EXPORT(WidenF16);
HWY_EXPORT(WidenBF16);

void widen_f16(const f16* src, float* dst, int64_t n) {
  static_assert(sizeof(f16) == sizeof(uint16_t));
  HWY_DYNAMIC_DISPATCH(WidenF16)(reinterpret_cast<const uint16_t*>(src), dst, n);
}
void widen_bf16(const bf16* src, float* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(WidenBF16)(reinterpret_cast<const uint16_t*>(src), dst, n);
}
}  // namespace rbee::cpu
#endif
