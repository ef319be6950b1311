// Layers shared by the SD models, composed from rbee::ops (so they run on whichever device holds the tensors).
// Activations are F32; weights may be F32 or F16 (linear layers go through qmatmul, which takes either).
#pragma once

#include <string>

#include "rbee/core/tensor.h"
#include "rbee/sd/weights.h"

namespace rbee::sd::nn {

struct Linear {
  Tensor w, b;  // w [out, in] (compute dtype), b [out] F32 or undefined
  int64_t in = 0, out = 0;
  static Linear load(const Weights& wt, const std::string& name, int64_t in, int64_t out, bool bias = true);
  // x [..., in] -> [..., out]
  Tensor operator()(const Tensor& x) const;
};

struct Conv2d {
  Tensor w, b;  // w [out, in, k, k] F32, b [out] F32
  int64_t in = 0, out = 0;
  int k = 1, stride = 1, pad = 0;
  static Conv2d load(const Weights& wt, const std::string& name, int64_t in, int64_t out, int k, int stride = 1,
                     int pad = -1);
  // x [N, in, H, W] -> [N, out, Ho, Wo]
  Tensor operator()(const Tensor& x) const;
};

struct Norm {  // LayerNorm over the last axis, or GroupNorm over NCHW channels
  Tensor w, b;
  int groups = 0;  // 0: layer norm
  float eps = 1e-5f;
  static Norm layer(const Weights& wt, const std::string& name, int64_t dim, float eps);
  static Norm group(const Weights& wt, const std::string& name, int64_t channels, int groups, float eps);
  Tensor operator()(const Tensor& x) const;
};

// Multi-head attention on [B, T, C] queries and [B, S, C'] keys/values already projected to C: heads of C / heads.
Tensor mha(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, bool causal);
// Concatenation along `axis` (a new tensor; copies through views).
Tensor concat(const Tensor& a, const Tensor& b, int axis);
// x [N, C, H, W] -> [N, C, H + bottom, W + right] with zeros appended (asymmetric padding before a conv).
Tensor pad_bottom_right(const Tensor& x, int64_t bottom, int64_t right);
// x * sigmoid(1.702 x) (CLIP's quick_gelu)
Tensor quick_gelu(const Tensor& x);

}  // namespace rbee::sd::nn
