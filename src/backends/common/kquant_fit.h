// Scale searches of the K-quant quantizers, shared by the CPU backend (backends/cpu/quant/quantize_k.cpp) and the
// GPU kernels (backends/gpu/kernels/quant_kquant_fit.cuh): one definition, so a tensor quantized on either backend
// gets the same blocks. They follow the procedures of ggml's reference quantizers (make_qkx2_quants,
// make_q3_quants, make_qx_quants) so that our quantization errors match theirs. Groups hold n <= 32 values.
// Attribution: ggml / llama.cpp (https://github.com/ggml-org/ggml), MIT License, Copyright (c) 2023-2024 The ggml
// authors; NOTICE holds the license text.
#pragma once

#include <math.h>

#include <cstdint>

#include "rbee/core/host_device.h"

namespace rbee::kquant {

constexpr int kMaxGroup = 32;
// Groups whose largest magnitude is below this are treated as all zero.
constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even (what ggml's nearest_int computes); NaN gives 0, out-of-range values saturate.
RBEE_HOST_DEVICE inline int nearest_int(float v) {
  if (!(v == v)) return 0;
  if (v > 2147483520.f) return INT32_MAX;
  if (v < -2147483520.f) return INT32_MIN;
  return (int)rintf(v);
}

RBEE_HOST_DEVICE inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

// Asymmetric fit x ~ scale * L + min with L in [0, nmax] and min <= 0, minimizing sum w * |err|^p (p = 1 when
// use_abs_error, else 2). Starts from the range [min(x, 0), max(x)], then tries nstep + 1 grid scales
// (nmax + rmin + rdelta * i) / range, each followed by a weighted least-squares solve for scale and min, and
// keeps the best. Writes L[0..n), returns the scale and sets *neg_min = -min (>= 0).
RBEE_HOST_DEVICE inline float fit_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L,
                                            float* neg_min, float rmin, float rdelta, int nstep, bool use_abs_error) {
  float lo = x[0], hi = x[0];
  float sum_w = w[0], sum_x = w[0] * x[0];
  for (int i = 1; i < n; ++i) {
    lo = fminf(lo, x[i]);
    hi = fmaxf(hi, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *neg_min = -lo;
    return 0.f;
  }
  // Weighted error of the levels `levels` under (scale, min).
  auto error_of = [&](float scale, float min, const uint8_t* levels) {
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = scale * (float)levels[i] + min - x[i];
      err += w[i] * (use_abs_error ? fabsf(diff) : diff * diff);
    }
    return err;
  };
  float iscale = (float)nmax / (hi - lo);
  float scale = 1 / iscale;
  float min = lo;
  for (int i = 0; i < n; ++i) L[i] = (uint8_t)clamp_int(nearest_int(iscale * (x[i] - lo)), 0, nmax);
  float best = error_of(scale, min, L);

  uint8_t trial[kMaxGroup];
  for (int step = 0; step <= nstep; ++step) {
    iscale = (rmin + rdelta * (float)step + (float)nmax) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * (x[i] - lo)), 0, nmax);
      trial[i] = (uint8_t)l;
      sum_l += w[i] * (float)l;
      sum_l2 += w[i] * (float)(l * l);
      sum_xl += w[i] * (float)l * x[i];
    }
    // Weighted least squares for x ~ s * l + m over this assignment.
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det <= 0) continue;
    float s = (sum_w * sum_xl - sum_x * sum_l) / det;
    float m = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (m > 0) {
      m = 0;
      s = sum_xl / sum_l2;
    }
    const float err = error_of(s, m, trial);
    if (err < best) {
      for (int i = 0; i < n; ++i) L[i] = trial[i];
      best = err;
      scale = s;
      min = m;
    }
  }
  *neg_min = -min;
  return scale;
}

// The element of largest magnitude, with its sign (0 when all are below kGroupMaxEps).
RBEE_HOST_DEVICE inline float signed_max(int n, const float* x) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    if (fabsf(x[i]) > amax) {
      amax = fabsf(x[i]);
      max = x[i];
    }
  }
  return amax < kGroupMaxEps ? 0.f : max;
}

// Symmetric fit x ~ scale * (L - nmax) with L - nmax in [-nmax, nmax - 1], weights x^2: the scale from the
// largest-magnitude element, then up to 5 passes of per-element coordinate descent on the weighted error.
// Writes L[0..n) (offset by nmax) and returns the scale (signed; 0 for an all-zero group).
RBEE_HOST_DEVICE inline float fit_symmetric_descent(int n, int nmax, const float* x, int8_t* L) {
  const float max = signed_max(n, x);
  if (max == 0.f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = -(float)nmax / max;
  float sum_lx = 0, sum_l2 = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = (int8_t)clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    const float w = x[i] * x[i];
    sum_lx += w * x[i] * (float)L[i];
    sum_l2 += w * (float)(L[i] * L[i]);
  }
  // Move one element at a time to the level that is optimal given the others, when that lowers the error
  // (for the least-squares scale sum_lx / sum_l2 the error falls as sum_lx^2 / sum_l2 grows).
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float lx = sum_lx - w * x[i] * (float)L[i];
      if (lx <= 0) continue;
      float l2 = sum_l2 - w * (float)(L[i] * L[i]);
      const int l = clamp_int(nearest_int(x[i] * l2 / lx), -nmax, nmax - 1);
      if (l == L[i]) continue;
      lx += w * x[i] * (float)l;
      l2 += w * (float)(l * l);
      if (l2 > 0 && lx * lx * sum_l2 > sum_lx * sum_lx * l2) {
        L[i] = (int8_t)l;
        sum_lx = lx;
        sum_l2 = l2;
        ++changed;
      }
    }
    if (!changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
  return sum_l2 > 0 ? sum_lx / sum_l2 : 0.f;
}

// Symmetric fit as above, but searching 19 grid scales -(nmax + 0.1 i) / max(x), i = 0, -9..9, for the best
// weighted least-squares scale (weights x^2). Writes L (offset by nmax), returns the scale.
RBEE_HOST_DEVICE inline float fit_symmetric_grid(int n, int nmax, const float* x, int8_t* L) {
  const float max = signed_max(n, x);
  if (max == 0.f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  // The sums (sum_lx, sum_l2) of the assignment that `iscale` gives; writes the levels when `out` is set.
  auto assign = [&](float iscale, int8_t* out, float& sum_lx, float& sum_l2) {
    sum_lx = sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      if (out) out[i] = (int8_t)(l + nmax);
      const float w = x[i] * x[i];
      sum_lx += w * x[i] * (float)l;
      sum_l2 += w * (float)(l * l);
    }
  };
  float sum_lx, sum_l2;
  assign(-(float)nmax / max, L, sum_lx, sum_l2);
  float scale = sum_l2 != 0 ? sum_lx / sum_l2 : 0.f;
  float best = scale * sum_lx;
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    const float iscale = -((float)nmax + 0.1f * (float)step) / max;
    assign(iscale, nullptr, sum_lx, sum_l2);
    if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) {
      assign(iscale, L, sum_lx, sum_l2);
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

}  // namespace rbee::kquant
