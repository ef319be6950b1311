// CPU fused SwiGLU: out = silu(gate) * up, elementwise over contiguous tensors.
//
// The other neural-network kernels live in cpu_norm.cpp (rms/layer/group norm, add_rms_norm), cpu_rope.cpp and
// cpu_attention.cpp (+ cpu_attention_blocks.cpp).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/cpu_nn.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <hwy/contrib/math/math-inl.h>

#include <cmath>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_nn_util.h"

HWY_BEFORE_NAMESPACE();
namespace rbee::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// exp(x) in f32 by the scheme ggml's CPU backend vectorizes (llama.cpp's numerics, so that SwiGLU outputs
// match it bit for bit): x = n ln2 + b with n = nearest(x / ln2) taken from the fraction bits of
// x * log2(e) + 1.5 * 2^23, b reduced with a two-part ln2; exp(b) - 1 by a degree-5 polynomial in b without
// constant term; result 2^n + 2^n (exp(b) - 1). Lanes with |n| > 126 split 2^n into two factors so that
// results overflow to inf or underflow through the subnormals gradually; |n| > 192 gives inf or 0 outright.
// Maximum error about 1.5 ulp.
template <class D>
HWY_INLINE hn::Vec<D> ExpGgml(D d, hn::Vec<D> x) {
  const hn::RebindToSigned<D> di;
  const auto shift = hn::Set(d, 0x1.8p23f);
  const auto z = hn::MulAdd(x, hn::Set(d, 0x1.715476p+0f), shift);
  const auto n = hn::Sub(z, shift);
  const auto b = hn::NegMulAdd(n, hn::Set(d, 0x1.7f7d1cp-20f), hn::NegMulAdd(n, hn::Set(d, 0x1.62e4p-1f), x));
  const auto e = hn::ShiftLeft<23>(hn::BitCast(di, z));  // n in the exponent field (two's complement)
  const auto k = hn::BitCast(d, hn::Add(e, hn::BitCast(di, hn::Set(d, 1.0f))));  // 2^n for |n| <= 126
  const auto u = hn::Mul(b, b);
  const auto j = hn::MulAdd(hn::MulAdd(hn::MulAdd(hn::Set(d, 0x1.0e4020p-7f), b, hn::Set(d, 0x1.573e2ep-5f)), u,
                                       hn::MulAdd(hn::Set(d, 0x1.555e66p-3f), b, hn::Set(d, 0x1.fffdb6p-2f))),
                            u, hn::Mul(hn::Set(d, 0x1.ffffecp-1f), b));  // exp(b) - 1
  const auto big = hn::Gt(hn::Abs(n), hn::Set(d, 126.0f));
  if (hn::AllFalse(d, big)) return hn::MulAdd(j, k, k);
  // 2^n = s1 * s2: s1 = 2^127 (n > 0) or 2^-125 (n <= 0), s2 carries the rest of the exponent.
  const auto neg = hn::BitCast(di, hn::VecFromMask(d, hn::Le(n, hn::Zero(d))));
  const auto g = hn::And(neg, hn::Set(di, (int32_t)0x82000000u));
  const auto s1 = hn::BitCast(d, hn::Add(g, hn::Set(di, 0x7f000000)));
  const auto s2 = hn::BitCast(d, hn::Sub(e, g));
  const auto huge = hn::Gt(hn::Abs(n), hn::Set(d, 192.0f));
  const auto split = hn::Mul(hn::MulAdd(s2, j, s2), s1);
  return hn::IfThenElse(huge, hn::Mul(s1, s1), hn::IfThenElse(big, split, hn::MulAdd(j, k, k)));
}

// out = g / (1 + exp(-g)) * u.
void SwigluF32(const float* g, const float* u, float* out, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = (int64_t)hn::Lanes(d);
  const auto one = hn::Set(d, 1.0f);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto vg = hn::LoadU(d, g + i);
    const auto e = ExpGgml(d, hn::Sub(hn::Zero(d), vg));
    hn::StoreU(hn::Mul(hn::Div(vg, hn::Add(one, e)), hn::LoadU(d, u + i)), d, out + i);
  }
  for (; i < n; ++i) out[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

}  // namespace rbee::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rbee::cpu {
HWY_EXPORT(SwigluF32);

namespace {

constexpr int64_t kSwigluChunk = 4096;  // elements a task widens and computes at once (16-bit inputs)

template <class T>
void swiglu_impl(const Tensor& gate, const Tensor& up, Tensor& out) {
  const int64_t n = gate.numel();
  const T* pg = static_cast<const T*>(gate.data());
  const T* pu = static_cast<const T*>(up.data());
  T* po = static_cast<T*>(out.data());
  const int64_t chunks = (n + kSwigluChunk - 1) / kSwigluChunk;
  parallel_rows(chunks, kSwigluChunk, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t begin = c * kSwigluChunk, len = std::min(kSwigluChunk, n - begin);
      if constexpr (std::is_same_v<T, double>) {
        for (int64_t i = begin; i < begin + len; ++i) po[i] = pg[i] / (1.0 + std::exp(-pg[i])) * pu[i];
      } else if constexpr (std::is_same_v<T, float>) {
        HWY_DYNAMIC_DISPATCH(SwigluF32)(pg + begin, pu + begin, po + begin, len);
      } else {
        float* g = scratch<float>(0, kSwigluChunk);
        float* u = scratch<float>(1, kSwigluChunk);
        load_row(pg + begin, g, len);
        load_row(pu + begin, u, len);
        HWY_DYNAMIC_DISPATCH(SwigluF32)(g, u, g, len);
        store_row(g, po + begin, len);
      }
    }
  });
}

}  // namespace

void CpuKernels::swiglu(const Tensor& gate, const Tensor& up, Tensor& out) {
  visit_float_dtype(gate.dtype(), [&](auto tag) { swiglu_impl<decltype(tag)>(gate, up, out); });
}

}  // namespace rbee::cpu
#endif  // HWY_ONCE
