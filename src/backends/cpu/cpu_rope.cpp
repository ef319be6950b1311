// CPU rotary position embedding.
//
// x [N, H, D] (last axis contiguous, any strides on N and H) -> out [N, H, D] contiguous. For token n the
// angles a_i = positions[n] * inv_freq[i] (i < rotary_dim / 2) are formed in double and reduced to [-pi, pi]
// before f32 sin/cos, so large positions keep full precision; one cos/sin table per token serves all heads.
// With params.freq_ratio > 0 the angles are llama.cpp's instead (op_kinds.h): the running f32 product
// p * r * r ..., with libm's f32 cos and sin, as ggml's CPU rope computes them. Every rotated pair (x0, x1)
// becomes x0 c - x1 s = fma(x0, c, -(x1 s)) and x0 s + x1 c = fma(x0, s, x1 c), the roundings of ggml's
// compiled rotation.
// Normal mode rotates pairs (2i, 2i+1), Neox mode pairs (i, i + rotary_dim/2); dims >= rotary_dim are copied.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/cpu_rope.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <hwy/contrib/math/math-inl.h>

#include <cmath>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_nn_util.h"

HWY_BEFORE_NAMESPACE();
namespace rbee::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// c[i] = cos(angle[i]) * mscale, s[i] = sin(angle[i]) * mscale; angles already in [-pi, pi].
void SinCosF32(const float* angle, float mscale, float* c, float* s, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = (int64_t)hn::Lanes(d);
  const auto vm = hn::Set(d, mscale);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto a = hn::LoadU(d, angle + i);
    hn::StoreU(hn::Mul(hn::Cos(d, a), vm), d, c + i);
    hn::StoreU(hn::Mul(hn::Sin(d, a), vm), d, s + i);
  }
  for (; i < n; ++i) {
    c[i] = std::cos(angle[i]) * mscale;
    s[i] = std::sin(angle[i]) * mscale;
  }
}

// Neox: out[i] = x[i] c[i] - x[i+half] s[i], out[i+half] = x[i+half] c[i] + x[i] s[i], i < half.
void RopeNeoxF32(const float* x, const float* c, const float* s, int64_t half, float* out) {
  const hn::ScalableTag<float> d;
  const int64_t N = (int64_t)hn::Lanes(d);
  int64_t i = 0;
  for (; i + N <= half; i += N) {
    const auto x0 = hn::LoadU(d, x + i), x1 = hn::LoadU(d, x + half + i);
    const auto vc = hn::LoadU(d, c + i), vs = hn::LoadU(d, s + i);
    hn::StoreU(hn::MulSub(x0, vc, hn::Mul(x1, vs)), d, out + i);
    hn::StoreU(hn::MulAdd(x0, vs, hn::Mul(x1, vc)), d, out + half + i);
  }
  for (; i < half; ++i) {
    const float x0 = x[i], x1 = x[half + i];
    out[i] = std::fma(x0, c[i], -(x1 * s[i]));
    out[half + i] = std::fma(x0, s[i], x1 * c[i]);
  }
}

// Normal: with c2 = (c0, c0, c1, c1, ...) and s2 = (-s0, s0, -s1, s1, ...) over `rot` lanes,
// out = x * c2 + swap_pairs(x) * s2, i.e. out[2i] = x[2i] c - x[2i+1] s, out[2i+1] = x[2i+1] c + x[2i] s.
void RopeNormalF32(const float* x, const float* c2, const float* s2, int64_t rot, float* out) {
  const hn::ScalableTag<float> d;
  const int64_t N = (int64_t)hn::Lanes(d);
  int64_t i = 0;
  if (N >= 2) {  // pairs never straddle a vector: N and the start are even
    for (; i + N <= rot; i += N) {
      const auto v = hn::LoadU(d, x + i);
      const auto sw = hn::Reverse2(d, v), vc = hn::LoadU(d, c2 + i), vs = hn::LoadU(d, s2 + i);
      // even lanes fma(x0, c, x1 * -s), odd lanes fma(x0, s, x1 * c): x0 is v's even lane, sw's odd lane.
      hn::StoreU(hn::OddEven(hn::MulAdd(sw, vs, hn::Mul(v, vc)), hn::MulAdd(v, vc, hn::Mul(sw, vs))), d, out + i);
    }
  }
  for (; i < rot; i += 2) {
    const float x0 = x[i], x1 = x[i + 1];
    out[i] = std::fma(x0, c2[i], x1 * s2[i]);
    out[i + 1] = std::fma(x0, s2[i + 1], x1 * c2[i + 1]);
  }
}

}  // namespace rbee::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rbee::cpu {
HWY_EXPORT(SinCosF32);
HWY_EXPORT(RopeNeoxF32);
HWY_EXPORT(RopeNormalF32);

namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

// position * inv_freq reduced to [-pi, pi] in double.
inline double reduced_angle(int32_t position, float inv_freq) {
  const double a = (double)position * (double)inv_freq;
  return a - kTwoPi * std::nearbyint(a / kTwoPi);
}

// The per-token tables the rotation reads: c, s of length rotary_dim/2 (Neox), or the pair-expanded
// c2, s2 of length rotary_dim (Normal, see RopeNormalF32). Each already multiplied by mscale.
// f64 takes libm's cos/sin of the unreduced angle (libm reduces exactly).
template <class C>
void build_tables(int32_t position, const float* inv_freq, int64_t half, float mscale, float freq_ratio,
                  RopeMode mode, C* c, C* s) {
  if (freq_ratio > 0.f) {
    float angle = (float)position;
    for (int64_t i = 0; i < half; ++i, angle *= freq_ratio) {
      c[i] = std::cos((C)angle) * (C)mscale;  // f64 rows: f64 cos/sin of the f32 angle
      s[i] = std::sin((C)angle) * (C)mscale;
    }
  } else if constexpr (std::is_same_v<C, float>) {
    float* angle = scratch<float>(4, (size_t)half);
    for (int64_t i = 0; i < half; ++i) angle[i] = (float)reduced_angle(position, inv_freq[i]);
    HWY_DYNAMIC_DISPATCH(SinCosF32)(angle, mscale, c, s, half);
  } else {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = (double)position * (double)inv_freq[i];
      c[i] = std::cos(angle) * (double)mscale;
      s[i] = std::sin(angle) * (double)mscale;
    }
  }
  if (mode == RopeMode::Normal) {  // expand in place, back to front
    for (int64_t i = half - 1; i >= 0; --i) {
      const C ci = c[i], si = s[i];
      c[2 * i] = ci;
      c[2 * i + 1] = ci;
      s[2 * i] = -si;
      s[2 * i + 1] = si;
    }
  }
}

void rotate(const float* x, const float* c, const float* s, int64_t rot, RopeMode mode, float* out) {
  if (mode == RopeMode::Neox) HWY_DYNAMIC_DISPATCH(RopeNeoxF32)(x, c, s, rot / 2, out);
  else HWY_DYNAMIC_DISPATCH(RopeNormalF32)(x, c, s, rot, out);
}
void rotate(const double* x, const double* c, const double* s, int64_t rot, RopeMode mode, double* out) {
  const int64_t half = rot / 2;
  if (mode == RopeMode::Neox) {
    for (int64_t i = 0; i < half; ++i) {
      const double x0 = x[i], x1 = x[half + i];
      out[i] = x0 * c[i] - x1 * s[i];
      out[half + i] = x1 * c[i] + x0 * s[i];
    }
  } else {
    for (int64_t i = 0; i < rot; i += 2) {
      const double x0 = x[i], x1 = x[i + 1];
      out[i] = x0 * c[i] + x1 * s[i];
      out[i + 1] = x1 * c[i + 1] + x0 * s[i + 1];
    }
  }
}

template <class T>
void rope_impl(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, const RopeParams& params,
               Tensor& out) {
  using C = nn_compute_t<T>;
  const int64_t tokens = x.dim(0), heads = x.dim(1), dim = x.dim(2);
  const int64_t token_stride = x.stride(0), head_stride = x.stride(1);
  const int64_t rot = params.rotary_dim, half = rot / 2;
  const T* px = static_cast<const T*>(x.data());
  T* po = static_cast<T*>(out.data());
  const int32_t* pos = static_cast<const int32_t*>(positions.data());
  const float* freq = static_cast<const float*>(inv_freq.data());
  parallel_rows(tokens, heads * dim, [&](int64_t n0, int64_t n1) {
    C* c = scratch<C>(0, (size_t)rot);
    C* s = scratch<C>(1, (size_t)rot);
    for (int64_t n = n0; n < n1; ++n) {
      build_tables<C>(pos[n], freq, half, params.mscale, params.freq_ratio, params.mode, c, s);
      for (int64_t h = 0; h < heads; ++h) {
        const T* src = px + n * token_stride + h * head_stride;
        T* dst = po + (n * heads + h) * dim;
        if constexpr (is_half_v<T>) {
          float* buf = scratch<float>(2, (size_t)rot);
          load_row(src, buf, rot);
          rotate(buf, c, s, rot, params.mode, buf);
          store_row(buf, dst, rot);
        } else {
          rotate(src, c, s, rot, params.mode, dst);
        }
        if (rot < dim) std::memcpy(dst + rot, src + rot, (size_t)(dim - rot) * sizeof(T));
      }
    }
  });
}

}  // namespace

void CpuKernels::rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, const RopeParams& params,
                      Tensor& out) {
  visit_float_dtype(x.dtype(), [&](auto tag) { rope_impl<decltype(tag)>(x, positions, inv_freq, params, out); });
}

}  // namespace rbee::cpu
#endif  // HWY_ONCE
