// Dot products of F32 / F16 / BF16 weight rows with f32 activation rows (qmatmul with unquantized weights; for
// 16-bit weights the rows hold x already rounded to the weight's type, so every product is exact in f32).
// Weights are widened to f32 in registers and accumulated with FMA; portable Highway code on every target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/quant/dot_float.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "backends/cpu/quant/dot_common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rbee::cpu::quant::HWY_NAMESPACE {
namespace {

template <class D>
HWY_INLINE auto LoadWeights(D df, const float* p) {
  return hn::LoadU(df, p);
}
template <class D>
HWY_INLINE auto LoadWeights(D df, const hwy::float16_t* p) {
  return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::float16_t, D>(), p));
}
template <class D>
HWY_INLINE auto LoadWeights(D df, const hwy::bfloat16_t* p) {
  return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::bfloat16_t, D>(), p));
}
inline float ToFloat(float v) { return v; }
inline float ToFloat(hwy::float16_t v) {
  uint16_t bits;
  std::memcpy(&bits, &v, 2);
  return f16_bits_to_f32(bits);
}
inline float ToFloat(hwy::bfloat16_t v) {
  uint16_t bits;
  std::memcpy(&bits, &v, 2);
  return bf16_bits_to_f32(bits);
}

template <class WT>
struct FloatDot {
  template <int NR>
  struct Impl {
    static void Run(int64_t k, const void* wv, const void* xv, size_t xs, float* out, int64_t os) {
      const hn::ScalableTag<float> df;
      const int64_t n = (int64_t)hn::Lanes(df);
      const auto* w = static_cast<const WT*>(wv);
      const float* x[NR];
      for (int r = 0; r < NR; ++r) x[r] = reinterpret_cast<const float*>(static_cast<const char*>(xv) + r * xs);
      // Two accumulators per row hide the FMA latency when one row is all there is.
      using V = decltype(hn::Zero(df));
      V acc0[NR], acc1[NR];
      for (int r = 0; r < NR; ++r) acc0[r] = acc1[r] = hn::Zero(df);
      int64_t i = 0;
      for (; i + 2 * n <= k; i += 2 * n) {
        const V w0 = LoadWeights(df, w + i), w1 = LoadWeights(df, w + i + n);
        for (int r = 0; r < NR; ++r) {
          acc0[r] = hn::MulAdd(w0, hn::LoadU(df, x[r] + i), acc0[r]);
          acc1[r] = hn::MulAdd(w1, hn::LoadU(df, x[r] + i + n), acc1[r]);
        }
      }
      for (; i + n <= k; i += n) {
        const V w0 = LoadWeights(df, w + i);
        for (int r = 0; r < NR; ++r) acc0[r] = hn::MulAdd(w0, hn::LoadU(df, x[r] + i), acc0[r]);
      }
      for (int r = 0; r < NR; ++r) {
        float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0[r], acc1[r])));
        for (int64_t j = i; j < k; ++j) sum += ToFloat(w[j]) * x[r][j];
        out[r * os] = sum;
      }
    }
  };
  static void Dot(int64_t k, const void* w, const void* x, size_t xs, int rows, float* out, int64_t os) {
    ForRows<Impl>(rows, k, w, x, xs, out, os);
  }
};

}  // namespace

bool IsAvx3FloatRowTarget() { return HWY_TARGET == HWY_AVX3; }

RowDotFn GetFloatRowDot(DType t) {
  switch (t) {
    case DType::F32: return &FloatDot<float>::Dot;
    case DType::F16: return &FloatDot<hwy::float16_t>::Dot;
    case DType::BF16: return &FloatDot<hwy::bfloat16_t>::Dot;
    default: return nullptr;
  }
}

}  // namespace rbee::cpu::quant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rbee::cpu::quant {
HWY_EXPORT(GetFloatRowDot);
HWY_EXPORT(IsAvx3FloatRowTarget);
bool float_row_kernel_is_avx3() { return HWY_DYNAMIC_DISPATCH(IsAvx3FloatRowTarget)(); }
RowDotFn float_row_dot(DType weight) { return HWY_DYNAMIC_DISPATCH(GetFloatRowDot)(weight); }
}  // namespace rbee::cpu::quant
#endif
