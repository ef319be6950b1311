// qmatmul's double-precision references (qmatmul_reference.h).
#include "conformance/qmatmul_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "common/harness.h"
#include "rbee/core/half.h"
#include "rbee/ops.h"

namespace rbee::test {

HalfFormat half_format(DType t) {
  return t == DType::F16 ? HalfFormat{11, -14, 65504.0} : HalfFormat{8, -126, 3.3895313892515355e38};
}

bool is_half(DType t) { return t == DType::F16 || t == DType::BF16; }

double naive_round16(double x, const HalfFormat& f) {
  if (x == 0 || !std::isfinite(x)) return x;
  const int e = std::max(std::ilogb(x), f.emin);
  const double ulp = std::ldexp(1.0, e - (f.p - 1));
  const double r = std::nearbyint(x / ulp) * ulp;  // the default rounding mode: to nearest even
  return std::fabs(r) > f.max_finite ? std::copysign(INFINITY, x) : r;
}

std::vector<double> naive_round16(const std::vector<double>& x, DType t) {
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = naive_round16((double)(float)x[i], half_format(t));
  return out;
}

std::vector<double> naive_activation_q8(const std::vector<double>& x) {
  std::vector<double> out(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0.f;
    for (size_t j = b; j < b + 32; ++j) amax = std::max(amax, std::fabs((float)x[j]));
    const float id = amax != 0.f ? 127.f / amax : 0.f;
    const double d = f16_bits_to_f32(f32_to_f16_bits(amax / 127.f));
    for (size_t j = b; j < b + 32; ++j) out[j] = (double)std::nearbyint((float)x[j] * id) * d;
  }
  return out;
}

DType activation_type(DType w) {
  switch (w) {
    case DType::Q4_1:
    case DType::Q5_1: return DType::Q8_1;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::Q8_K: return DType::Q8_K;
    case DType::F32:
    case DType::F16:
    case DType::BF16: return w;
    default: return DType::Q8_0;
  }
}

std::vector<double> activations_multiplied(const std::vector<double>& x, int64_t m, int64_t k, DType atype,
                                           Device& q8k_device) {
  if (atype == DType::F32) return x;
  if (is_half(atype)) return naive_round16(x, atype);
  if (atype == DType::Q8_K) {
    const Tensor xt = make_tensor(x, {m, k}, DType::F32, q8k_device);
    return to_doubles(ops::dequantize(ops::quantize(xt, DType::Q8_K)));
  }
  return naive_activation_q8(x);
}

Weights make_weights(Device& device, DType type, int64_t n, int64_t k, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> wf((size_t)(n * k));
  for (int64_t r = 0; r < n; ++r) {
    const float scale = 0.05f * (float)(1 + r % 7);
    for (int64_t c = 0; c < k; ++c) wf[(size_t)(r * k + c)] = normal(rng) * scale + (r % 3 == 0 ? 0.02f : 0.f);
  }
  Weights out;
  out.w = Tensor::from_vector(wf, {n, k}, device);
  if (is_quantized(type)) out.w = ops::quantize(out.w, type);
  else if (type != DType::F32) out.w = ops::cast(out.w, type);
  out.w_hat = to_doubles(is_quantized(type) ? ops::dequantize(out.w) : ops::cast(out.w, DType::F32));
  if (type == DType::Q4_1 || type == DType::Q5_1) {  // the f16 min sits at offset 2 of each block
    std::vector<unsigned char> bytes((size_t)out.w.nbytes());
    out.w.copy_to_host(bytes.data(), bytes.size());
    const int ts = dtype_type_size(type);
    for (size_t b = 0; b < bytes.size() / ts; ++b) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + b * ts + 2, 2);
      out.mins.push_back(f16_bits_to_f32(h));
    }
  }
  return out;
}

void expect_qmatmul(const std::vector<double>& got, const Weights& w, DType wtype, const std::vector<double>& a,
                    int64_t m, int64_t n, int64_t k, const std::vector<double>& residual, Device& q8k_device) {
  const DType atype = activation_type(wtype);
  const auto a_hat = activations_multiplied(a, m, k, atype, q8k_device);
  const int64_t act_block = atype == DType::F32 || is_half(atype) ? 1 : dtype_block_size(atype);
  int64_t bad_tight = 0, bad_loose = 0;
  std::string first;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double tight = 0, loose = 0, mag = 0, act_err = 0, sum_term = 0;
      for (int64_t k0 = 0; k0 < k; k0 += act_block) {
        double amax = 0, block_sum = 0;
        for (int64_t c = k0; c < k0 + act_block; ++c) {
          amax = std::max(amax, std::fabs(a[r * k + c]));
          block_sum += a_hat[r * k + c];
        }
        for (int64_t c = k0; c < k0 + act_block; ++c) {
          const double wk = w.w_hat[j * k + c];
          tight += wk * a_hat[r * k + c];
          loose += wk * a[r * k + c];
          mag += std::fabs(wk * a_hat[r * k + c]);
          if (is_half(atype)) {
            const HalfFormat f = half_format(atype);
            act_err += std::fabs(wk) * (std::ldexp(std::fabs(a[r * k + c]), -f.p) + std::ldexp(1.0, f.emin - f.p));
          } else if (atype != DType::F32) {
            act_err += std::fabs(wk) * 0.57 * amax / 127.0;
          }
        }
        if (!w.mins.empty()) sum_term += std::fabs(w.mins[(size_t)((j * k + k0) / 32)] * block_sum) / 1024.0;
      }
      double tol = 2e-5 * mag + sum_term + 1e-6;
      if (!residual.empty()) {
        const double res = residual[r * n + j];
        tight += res;
        loose += res;
        tol += 1.2e-7 * (std::fabs(res) + std::fabs(tight));
      }
      const double g = got[r * n + j];
      if (!(std::fabs(g - tight) <= tol) && bad_tight++ < 3) {
        first += fmt::format("\n  [{}, {}] got {} want {} (tol {})", r, j, g, tight, tol);
      }
      if (!(std::fabs(g - loose) <= tol + act_err)) ++bad_loose;
    }
  }
  EXPECT_EQ(bad_tight, 0) << bad_tight << " outputs off the quantized-activation reference" << first;
  EXPECT_EQ(bad_loose, 0) << bad_loose << " outputs off the exact-activation reference by more than its rounding";
}

}  // namespace rbee::test
