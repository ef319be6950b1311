// Front-ends of the fused decoder ops (rms_norm_qmatmul and add_rms_norm_qmatmul: kernel norm_qmatmul;
// swiglu_qmatmul; rope_kv_cache_write; contracts in rbee/backend/op_table.def). Each equals the composition of
// unfused ops written in rbee/ops.h and checks its arguments as those ops would; the backend runs it in fewer
// launches (GPUs: one activation pass + one matvec instead of two or three launches and an f32 round trip
// through memory).
#include <cmath>
#include <utility>

#include "ops/op_checks.h"
#include "rbee/ops.h"

namespace rbee::ops {

using detail::check_defined;
using detail::check_supported;
using detail::common_device;

namespace {

// w as qmatmul takes it ([N, K]: a block dtype or F32/F16/BF16, whole blocks) for activations of k features.
void check_weight(const char* op, const Tensor& w, int64_t k) {
  RBEE_CHECK(is_quantized(w.dtype()) || w.dtype() == DType::F32 || w.dtype() == DType::F16 || w.dtype() == DType::BF16,
             "{}: w must be a block dtype or f32/f16/bf16, got {}", op, dtype_name(w.dtype()));
  RBEE_CHECK(w.rank() == 2, "{}: w must be [N, K], got shape {}", op, w.shape().to_string());
  RBEE_CHECK(w.dim(1) == k, "{}: the activations have {} features but w expects K = {} (shape {})", op, k, w.dim(1),
             w.shape().to_string());
  const int bs = dtype_block_size(w.dtype());
  RBEE_CHECK(k % bs == 0, "{}: K = {} is not a multiple of the {} block size {}", op, k, dtype_name(w.dtype()), bs);
}

void check_f32(const char* op, const char* arg, const Tensor& t) {
  RBEE_CHECK(t.dtype() == DType::F32, "{}: '{}' must be f32, got {}", op, arg, dtype_name(t.dtype()));
}

// Rows of a [..., K] tensor as [rows, K].
Shape as_rows(const Shape& shape) {
  int64_t rows = 1;
  for (int i = 0; i + 1 < shape.rank(); ++i) rows *= shape[i];
  return Shape{rows, shape[shape.rank() - 1]};
}

// x [..., K] with the last dim replaced by n.
Shape with_last(Shape shape, int64_t n) {
  shape[shape.rank() - 1] = n;
  return shape;
}

std::pair<Tensor, Tensor> norm_qmatmul(const char* op, const Tensor& x, const Tensor* residual, const Tensor& weight,
                                       float eps, const Tensor& w) {
  check_defined(op, "x", x);
  check_defined(op, "norm_weight", weight);
  check_defined(op, "w", w);
  if (residual) check_defined(op, "residual", *residual);
  Device& device = common_device(op, {&x, &weight, &w, residual});
  check_f32(op, "x", x);
  check_f32(op, "norm_weight", weight);
  RBEE_CHECK(x.rank() >= 1, "{}: x must be [..., K], got shape {}", op, x.shape().to_string());
  const int64_t k = x.dim(-1);
  RBEE_CHECK(weight.rank() == 1 && weight.dim(0) == k, "{}: 'norm_weight' must have shape [{}], got {}", op, k,
             weight.shape().to_string());
  if (residual) {
    check_f32(op, "residual", *residual);
    RBEE_CHECK(residual->shape() == x.shape(), "{}: x shape {} differs from residual shape {}", op,
               x.shape().to_string(), residual->shape().to_string());
  }
  RBEE_CHECK(std::isfinite(eps) && eps >= 0, "{}: eps must be finite and >= 0, got {}", op, eps);
  check_weight(op, w, k);
  check_supported(op, device, OpKind::NormQMatmul, {x.dtype(), w.dtype(), weight.dtype(), DType::F32});

  const Shape rows = as_rows(x.shape());
  Tensor out = Tensor::empty(with_last(x.shape(), w.dim(0)), DType::F32, device);
  Tensor sum = residual ? Tensor::empty(x.shape(), DType::F32, device) : Tensor();
  if (x.numel() == 0) return {sum, out};
  if (w.dim(0) == 0 || k == 0) {  // nothing to multiply; the sum is still x + residual
    if (residual) sum = add(x, *residual);
    return {sum, zeros(out.shape(), DType::F32, device)};
  }
  const Tensor xr = x.contiguous().view(rows);
  const Tensor rr = residual ? residual->contiguous().view(rows) : Tensor();
  const Tensor wc = w.contiguous(), nw = weight.contiguous();
  Tensor out_rows = out.view(Shape{rows[0], w.dim(0)});
  Tensor sum_rows = residual ? sum.view(rows) : Tensor();
  device.kernels().norm_qmatmul(xr, wc, nw, residual ? &rr : nullptr, eps, residual ? &sum_rows : nullptr, out_rows);
  return {sum, out};
}

}  // namespace

Tensor rms_norm_qmatmul(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w) {
  return norm_qmatmul("rms_norm_qmatmul", x, nullptr, norm_weight, eps, w).second;
}

std::pair<Tensor, Tensor> add_rms_norm_qmatmul(const Tensor& x, const Tensor& residual, const Tensor& norm_weight,
                                               float eps, const Tensor& w) {
  return norm_qmatmul("add_rms_norm_qmatmul", x, &residual, norm_weight, eps, w);
}

Tensor swiglu_qmatmul(const Tensor& gate_up, const Tensor& w, const Tensor& residual) {
  const char* op = "swiglu_qmatmul";
  check_defined(op, "gate_up", gate_up);
  check_defined(op, "w", w);
  Device& device = common_device(op, {&gate_up, &w, &residual});
  check_f32(op, "gate_up", gate_up);
  RBEE_CHECK(gate_up.rank() >= 1 && gate_up.dim(-1) % 2 == 0,
             "{}: gate_up must be [..., 2I] (gate features, then up features), got shape {}", op,
             gate_up.shape().to_string());
  const int64_t inner = gate_up.dim(-1) / 2;
  check_weight(op, w, inner);
  const Shape out_shape = with_last(gate_up.shape(), w.dim(0));
  if (residual.defined()) {
    check_f32(op, "residual", residual);
    RBEE_CHECK(residual.shape() == out_shape, "{}: residual must have the output's shape {}, got {}", op,
               out_shape.to_string(), residual.shape().to_string());
  }
  check_supported(op, device, OpKind::SwigluQMatmul, {gate_up.dtype(), w.dtype(), DType::F32});
  if (out_shape.numel() == 0) return Tensor::empty(out_shape, DType::F32, device);
  if (inner == 0) return residual.defined() ? residual.contiguous().clone() : zeros(out_shape, DType::F32, device);
  const Shape rows = as_rows(gate_up.shape());
  const Tensor gu = gate_up.contiguous().view(rows);
  const Tensor res = residual.defined() ? residual.contiguous().view(Shape{rows[0], w.dim(0)}) : Tensor();
  Tensor out = Tensor::empty(out_shape, DType::F32, device);
  Tensor out_rows = out.view(Shape{rows[0], w.dim(0)});
  device.kernels().swiglu_qmatmul(gu, w.contiguous(), residual.defined() ? &res : nullptr, out_rows);
  return out;
}

Tensor rope_kv_cache_write(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                           const Tensor& inv_freq, const RopeParams& params, const Tensor& slots,
                           const Tensor& k_cache, const Tensor& v_cache) {
  const char* op = "rope_kv_cache_write";
  for (const auto* t : {&q, &k, &v, &positions, &inv_freq, &slots, &k_cache, &v_cache}) check_defined(op, "tensor", *t);
  Device& device = common_device(op, {&q, &k, &v, &positions, &inv_freq, &slots, &k_cache, &v_cache});
  RBEE_CHECK(q.rank() == 3 && k.rank() == 3 && v.shape() == k.shape() && k.dim(0) == q.dim(0) && k.dim(2) == q.dim(2),
             "{}: q must be [N, Hq, D] and k, v [N, Hkv, D], got {}, {} and {}", op, q.shape().to_string(),
             k.shape().to_string(), v.shape().to_string());
  using Named = std::pair<const char*, const Tensor*>;
  for (const auto& [name, t] : {Named{"q", &q}, Named{"k", &k}, Named{"v", &v}}) {
    check_f32(op, name, *t);
    RBEE_CHECK(t->stride(2) == 1 || t->dim(2) <= 1, "{}: '{}' needs a contiguous last axis", op, name);
  }
  RBEE_CHECK(k_cache.rank() == 4 && v_cache.shape() == k_cache.shape() && v_cache.dtype() == k_cache.dtype() &&
                 k_cache.is_contiguous() && v_cache.is_contiguous(),
             "{}: caches must be two contiguous [num_blocks, block_size, Hkv, D] tensors of one dtype, got {} and {}",
             op, k_cache.to_string(), v_cache.to_string());
  RBEE_CHECK(k.dim(1) == k_cache.dim(2) && k.dim(2) == k_cache.dim(3), "{}: rows {} do not fit cache {}", op,
             k.shape().to_string(), k_cache.shape().to_string());
  const int64_t n = q.dim(0), dim = q.dim(2);
  const int64_t rotary_dim = params.rotary_dim == 0 ? dim : params.rotary_dim;
  RBEE_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= dim,
             "{}: rotary_dim must be even, > 0 and <= head dim {}, got {}", op, dim, rotary_dim);
  RBEE_CHECK(std::isfinite(params.mscale), "{}: mscale must be finite, got {}", op, params.mscale);
  RBEE_CHECK(std::isfinite(params.freq_ratio) && params.freq_ratio >= 0.f && params.freq_ratio <= 1.f,
             "{}: freq_ratio must be in [0, 1] (0: use inv_freq), got {}", op, params.freq_ratio);
  RBEE_CHECK(positions.dtype() == DType::I32 && positions.rank() == 1 && positions.dim(0) == n,
             "{}: positions must be i32 [{}], got {}", op, n, positions.to_string());
  RBEE_CHECK(inv_freq.dtype() == DType::F32 && inv_freq.rank() == 1 && inv_freq.dim(0) == rotary_dim / 2,
             "{}: inv_freq must be f32 [{}] (rotary_dim / 2), got {}", op, rotary_dim / 2, inv_freq.to_string());
  RBEE_CHECK(slots.dtype() == DType::I32 && slots.rank() == 1 && slots.dim(0) == n && slots.is_contiguous(),
             "{}: slots must be contiguous i32 [{}], got {}", op, n, slots.to_string());
  check_supported(op, device, OpKind::RopeKvCacheWrite, {q.dtype(), k_cache.dtype()});
  if (device.host_accessible()) {
    const int64_t capacity = k_cache.dim(0) * k_cache.dim(1);
    const int32_t* s = static_cast<const int32_t*>(slots.data());
    for (int64_t i = 0; i < n; ++i) {
      RBEE_CHECK(s[i] >= 0 && s[i] < capacity, "{}: slot {} at position {} is outside the cache's {} slots", op, s[i],
                 i, capacity);
    }
  }
  Tensor q_out = Tensor::empty(q.shape(), DType::F32, device);
  if (q.numel() == 0 && k.numel() == 0) return q_out;
  RopeParams resolved = params;
  resolved.rotary_dim = (int)rotary_dim;
  Tensor kc = k_cache, vc = v_cache;
  device.kernels().rope_kv_cache_write(q, k, v, positions.contiguous(), inv_freq.contiguous(), resolved, slots, kc,
                                       vc, q_out);
  return q_out;
}

}  // namespace rbee::ops
