// qmatmul's double-precision references, shared by the qmatmul suite (test_quant.cpp) and the fused decoder ops
// built on it (test_fused.cpp). out [m, n] = x [m, k] . w [n, k]^T is checked against two sums in double:
//  - tight: sum_k w^[n, k] * x^[m, k], w^ = what w holds (dequantized or widened), x^ = the activations the kernel
//    really multiplies (activations_multiplied): the kernels' integer sums and 16-bit products are exact, so only
//    f32 scaling and accumulation remain: 2e-5 * sum |w^ x^| (+ for Q4_1 / Q5_1 the f16 activation block sum:
//    2^-10 * |m_w * sum_block x^| per block);
//  - exact x: sum_k w^[n, k] * x[m, k], within that bound plus the activation rounding: half a quantization step
//    plus d's f16 rounding, |x^ - x| <= 0.57 * max|x_block| / 127, or half an ulp of a 16-bit type,
//    2^-p |x| + 2^(emin - p) (p = 11 for f16, 8 for bf16).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "rbee/core/device.h"
#include "rbee/core/dtype.h"
#include "rbee/core/tensor.h"

namespace rbee::test {

// A 16-bit float format: significand bits (with the implicit one), smallest normal exponent, largest finite.
struct HalfFormat {
  int p, emin;
  double max_finite;
};
HalfFormat half_format(DType t);
bool is_half(DType t);
// x rounded to `f` (nearest, ties to even; beyond the largest finite value +-inf), computed in double
// independently of rbee's conversions: the value qmatmul's 16-bit weights multiply.
double naive_round16(double x, const HalfFormat& f);
// Each value rounded to f32, then to t (F16 / BF16).
std::vector<double> naive_round16(const std::vector<double>& x, DType t);

// The 8-bit activation rule qmatmul defines for 32-element-block weights (ggml's CPU backend quantizes its
// activations this way, so rbee's products follow llama.cpp's): per block amax = max |x|, quants
// nearest-even(x * (127 / amax)) in f32 (0 when amax is 0), scale f16(amax / 127). It differs from the Q8_0
// weight quantizer (x * (1 / d), ties away from zero) in the rounding of a few quants. Returns q * d.
std::vector<double> naive_activation_q8(const std::vector<double>& x);

// The activation format qmatmul pairs with a weight type (F32: the activations themselves; F16 / BF16: the
// activations rounded to the weight's type, the QMatmul contract of op_table.def).
DType activation_type(DType w);

// What qmatmul multiplies for activations x [m, k] (f32 values) paired with format `atype`: the 8-bit rule
// above for 32-element blocks, Q8_K through `q8k_device`'s quantizer, x rounded for F16 / BF16, x for F32.
std::vector<double> activations_multiplied(const std::vector<double>& x, int64_t m, int64_t k, DType atype,
                                           Device& q8k_device);

struct Weights {
  Tensor w;
  std::vector<double> w_hat;  // what w holds
  std::vector<double> mins;   // Q4_1 / Q5_1: the f16 min of each block (the Q8_1 sum term)
};
// w [n, k]: N(0, 1) rows from `rng` with varied scales, quantized (or rounded) to `type` on `device`.
Weights make_weights(Device& device, DType type, int64_t n, int64_t k, std::mt19937_64& rng);

// Checks got [m, n] against both references for activations `a` [m, k] (f32 values fed to the kernel), plus
// `residual` [m, n] when not empty (one more f32 rounding). Q8_K activations are quantized on `q8k_device`.
void expect_qmatmul(const std::vector<double>& got, const Weights& w, DType wtype, const std::vector<double>& a,
                    int64_t m, int64_t n, int64_t k, const std::vector<double>& residual, Device& q8k_device);

}  // namespace rbee::test
