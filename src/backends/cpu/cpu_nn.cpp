// CPU fused SwiGLU: out = silu(gate) * up, elementwise over contiguous tensors; GEGLU: out = hidden * gelu(gate)
// over the two halves of each row of x [rows, 2F].
//
// The other neural-network kernels live in cpu_norm.cpp (rms/layer/group norm, add_rms_norm), cpu_rope.cpp and
// cpu_attention.cpp (+ cpu_attention_blocks.cpp).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/cpu_nn.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <hwy/contrib/math/math-inl.h>

#include <cmath>

#include "backends/common/scalar_ops.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_nn_util.h"
#include "backends/cpu/exp_ggml-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rbee::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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

// out [rows, F] = x[:, :F] * gelu_erf(x[:, F:]) in the compute type (f32 for 16-bit storage), rounded once.
template <class T>
void geglu_impl(const Tensor& x, Tensor& out) {
  using C = nn_compute_t<T>;
  const int64_t rows = out.dim(0), f = out.dim(1);
  const T* px = static_cast<const T*>(x.data());
  T* po = static_cast<T*>(out.data());
  parallel_rows(rows, 2 * f, [&](int64_t r0, int64_t r1) {
    C* h = scratch<C>(0, (size_t)(2 * f));
    C* o = scratch<C>(1, (size_t)f);
    for (int64_t r = r0; r < r1; ++r) {
      load_row(px + r * 2 * f, h, 2 * f);
      for (int64_t i = 0; i < f; ++i) o[i] = h[i] * scalar::unary_value<C>(UnaryOp::GeluErf, h[f + i], C(0));
      store_row(o, po + r * f, f);
    }
  });
}

}  // namespace

void CpuKernels::geglu(const Tensor& x, Tensor& out) {
  visit_float_dtype(x.dtype(), [&](auto tag) { geglu_impl<decltype(tag)>(x, out); });
}

void CpuKernels::swiglu(const Tensor& gate, const Tensor& up, Tensor& out) {
  visit_float_dtype(gate.dtype(), [&](auto tag) { swiglu_impl<decltype(tag)>(gate, up, out); });
}

}  // namespace rbee::cpu
#endif  // HWY_ONCE
