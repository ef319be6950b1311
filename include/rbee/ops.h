// The op set (docs/DESIGN.md section 3) as functions on tensors.
//
// Each op checks its arguments (shapes, dtypes, devices, indices) and throws rbee::Error(InvalidArgument or
// Unsupported) naming the op and the offending argument, allocates its output on the inputs' device, and runs
// that device's kernel. Inputs may be views with any strides unless a comment says otherwise; outputs are new
// contiguous tensors. All inputs of one op must live on the same device.
#pragma once

#include <optional>

#include "rbee/backend/op_kinds.h"
#include "rbee/core/tensor.h"

namespace rbee {
class Device;
}

namespace rbee::ops {

// ---- creation ----
Tensor full(const Shape& shape, double value, DType dtype, Device& device);
Tensor zeros(const Shape& shape, DType dtype, Device& device);
Tensor ones(const Shape& shape, DType dtype, Device& device);
// [start, start + step, ...) with n elements.
Tensor arange(double start, double step, int64_t n, DType dtype, Device& device);
// Sets every element of t (any strides) to value, in place.
void const_set(const Tensor& t, double value);
// dst = src elementwise, in place; same shape and dtype (src may live on another device).
void copy(const Tensor& dst, const Tensor& src);

// ---- elementwise ----
Tensor unary(UnaryOp op, const Tensor& x, double param = 0.0);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor silu(const Tensor& x);
Tensor gelu(const Tensor& x, bool tanh_approximation = true);
Tensor powf(const Tensor& x, double exponent);
Tensor elu(const Tensor& x, double alpha);
// Broadcasting (NumPy rules). Comparisons return U8.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor affine(const Tensor& x, double mul, double add);
Tensor cast(const Tensor& x, DType dtype);
// cond U8; cond, a, b broadcast together.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// ---- reductions and sorting ----
Tensor reduce(ReduceOp op, const Tensor& x, int axis, bool keepdim = false);
Tensor sum(const Tensor& x, int axis, bool keepdim = false);
Tensor max(const Tensor& x, int axis, bool keepdim = false);
Tensor min(const Tensor& x, int axis, bool keepdim = false);
Tensor argmax(const Tensor& x, int axis, bool keepdim = false);  // I64
Tensor argmin(const Tensor& x, int axis, bool keepdim = false);  // I64
Tensor softmax(const Tensor& x, int axis = -1);
Tensor argsort(const Tensor& x, int axis = -1, bool ascending = true);  // I64

// ---- neural-network blocks ----
// Normalize over the last axis; weight/bias [n] or undefined Tensor().
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps);
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps);
// x [N, C, ...]; weight/bias [C] or undefined.
Tensor group_norm(const Tensor& x, int groups, const Tensor& weight, const Tensor& bias, float eps);
// silu(group_norm(x)) in one pass, rounded once (op_table.def GroupNormSilu).
Tensor group_norm_silu(const Tensor& x, int groups, const Tensor& weight, const Tensor& bias, float eps);
// Channels last: x [N, ..., C] (an NHWC map, or [N, S, C]), groups of C/groups consecutive channels normalized over
// all positions of an image; silu(...) when `silu` (op_table.def GroupNormNhwc). The result of group_norm(_silu) on
// the channels-first transpose, in x's layout. shift [N, C] (or undefined): x + shift is normalized, the sum never
// stored.
Tensor group_norm_nhwc(const Tensor& x, int groups, const Tensor& weight, const Tensor& bias, float eps,
                       bool silu = false, const Tensor& shift = {});

// Rotary position embedding frequencies, with the scaling schemes models declare.
struct RopeScaling {
  enum class Kind { None, Linear, Llama3, Yarn } kind = Kind::None;
  float factor = 1.0f;                       // Linear / Llama3 / Yarn
  float low_freq_factor = 1.0f;              // Llama3
  float high_freq_factor = 4.0f;             // Llama3
  int original_max_position = 8192;          // Llama3 / Yarn
  float beta_fast = 32.0f, beta_slow = 1.0f;  // Yarn
};
// inv_freq[i] for i < rotary_dim / 2 (F32 on host), theta_base^(-2i/rotary_dim) with scaling applied.
// Yarn also scales attention: pass RopeParams.mscale = the model's attention_factor, or when it declares none
// 0.1 * ln(factor) + 1 for factor > 1 (1 otherwise), as Hugging Face's YaRN does.
std::vector<float> rope_inv_freq(int rotary_dim, float theta_base, const RopeScaling& scaling);
// x [N, H, D] (or [..., N, H, D] flattened to N), positions [N] I32 (or the leading dims' shape).
// params.rotary_dim = 0 rotates the whole head.
Tensor rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, const RopeParams& params);
// q [B, Hq, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv] -> [B, Hq, Tq, Dv]
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& params);
// The same into `out`, a caller's [B, Hq, Tq, Dv] view with a contiguous last axis (e.g. [B, Tq, Hq * Dv] storage
// seen as [B, Hq, Tq, Dv], the layout the next projection reads, so no transpose copy follows); out shares no
// buffer with q, k or v, and no two of its elements overlap.
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& params, Tensor& out);
Tensor swiglu(const Tensor& gate, const Tensor& up);
// hidden * gelu(gate) (erf form) for x [..., 2F] = [hidden | gate]: [..., F], computed in f32, rounded once
// (diffusers' GEGLU).
Tensor geglu(const Tensor& x);
// Returns {x + residual, rms_norm(x + residual) * weight}.
std::pair<Tensor, Tensor> add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps);

// ---- matrix products and quantization ----
// a [..., M, K] @ b [..., K, N] with broadcast batch dims; 1-D operands are promoted like NumPy.
Tensor matmul(const Tensor& a, const Tensor& b);
// x [..., K] F32 -> [..., K] in a block dtype (K a multiple of the block size).
Tensor quantize(const Tensor& x, DType dtype);
Tensor dequantize(const Tensor& q);
// x [..., K] F32 times w [N, K]^T (w quantized or F16/BF16/F32) -> [..., N] F32: a linear layer. x meets w in
// w's format: quantized to 8-bit blocks for block types, rounded to f16 / bf16 for 16-bit weights (kernels.h).
Tensor qmatmul(const Tensor& x, const Tensor& w);
// x [..., K] . w [N, K]^T + bias [N] + residual [..., N] -> [..., N] in one op, rounded once (op_table.def
// LinearFused); bias and residual may be undefined; x, w, bias and residual share one dtype (F32, F16 or BF16).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias = {}, const Tensor& residual = {});

// ---- convolution family ----
Tensor conv1d(const Tensor& x, const Tensor& w, const Conv1dParams& p = {});
Tensor conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p = {});
// act(conv2d(x, w) + bias + residual) in one op, rounded once (op_table.def Conv2dFused): bias [Cout] or [N, Cout]
// or undefined, residual [N, Cout, Ho, Wo] or undefined, act silu when `silu`.
Tensor conv2d_fused(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                    const Conv2dParams& p = {}, bool silu = false);
// conv2d_fused channels last (op_table.def Conv2dFusedNhwc): x [N, H, W, Cin], w [Cout, KH, KW, Cin], bias [Cout]
// or [N, Cout] or undefined, residual [N, Ho, Wo, Cout] or undefined -> [N, Ho, Wo, Cout]; groups 1.
Tensor conv2d_fused_nhwc(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                         const Conv2dParams& p = {}, bool silu = false);
Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Conv1dParams& p = {});
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Conv2dParams& p = {});
Tensor im2col(const Tensor& x, int kernel_h, int kernel_w, const Conv2dParams& p = {});
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor max_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor upsample_nearest2d(const Tensor& x, int64_t out_h, int64_t out_w);

// ---- indexing ----
Tensor index_select(const Tensor& x, const Tensor& ids, int axis);
Tensor gather(const Tensor& x, const Tensor& ids, int axis);
Tensor index_add(const Tensor& x, const Tensor& ids, const Tensor& src, int axis);
Tensor scatter(const Tensor& x, const Tensor& ids, const Tensor& src, int axis);
Tensor scatter_add(const Tensor& x, const Tensor& ids, const Tensor& src, int axis);

// ---- paged KV cache (LLM serving; contracts in rbee/backend/kernels.h) ----
// Writes k, v [N, Hkv, D] into the caches [num_blocks, block_size, Hkv, D] at slots [N] (I32).
void kv_cache_write(const Tensor& k, const Tensor& v, const Tensor& slots, const Tensor& k_cache,
                    const Tensor& v_cache);
// q [Nq, Hq, D] F32; seq_info I32 [B, 3] (q_start, q_len, ctx_len); block_tables I32 [B, max_blocks].
// Returns [Nq, Hq, D] F32 (rows outside every sequence are zero).
Tensor paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& seq_info,
                       const Tensor& block_tables, const AttentionParams& params);

// ---- fused decoder ops: each equals the composition beside it (same activation quantization for block-type
// weights, f32 intermediates); GPUs run it without the intermediate launches and round trips ----
// qmatmul(rms_norm(x, norm_weight, eps), w): x [..., K] F32, norm_weight [K] F32, w as for qmatmul.
Tensor rms_norm_qmatmul(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w);
// {s, qmatmul(rms_norm(s, norm_weight, eps), w)} with s = x + residual (add_rms_norm, then qmatmul).
std::pair<Tensor, Tensor> add_rms_norm_qmatmul(const Tensor& x, const Tensor& residual, const Tensor& norm_weight,
                                               float eps, const Tensor& w);
// qmatmul(swiglu(gate, up), w) [+ residual]: gate_up [..., 2I] F32 holds gate in its first I features and up in
// its last I (a stacked gate/up projection's output), w [N, I]; residual [..., N] F32 or undefined.
Tensor swiglu_qmatmul(const Tensor& gate_up, const Tensor& w, const Tensor& residual = Tensor());
// rope(q), and kv_cache_write(rope(k), v, slots, k_cache, v_cache); returns rope(q) [N, Hq, D].
// q [N, Hq, D], k and v [N, Hkv, D] F32 (contiguous last axis; views of a stacked qkv row are fine);
// positions [N] I32; inv_freq and params as for rope; slots and caches as for kv_cache_write.
Tensor rope_kv_cache_write(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                           const Tensor& inv_freq, const RopeParams& params, const Tensor& slots,
                           const Tensor& k_cache, const Tensor& v_cache);

// ---- token sampling (LLM decoding; contract in rbee/backend/op_table.def) ----
// logits [B, V] F32; params F32 [B, kSampleParams], control I64 [B, kSampleControls] (op_kinds.h, sample_col);
// tokens I32 [B, H, 2] (id, count) and bias F32 [B, H] for the tokens with a bias or penalty (H may be 0).
// Returns the chosen ids, I32 [B] (-1 for a row without any candidate).
Tensor sample(const Tensor& logits, const Tensor& params, const Tensor& control, const Tensor& tokens,
              const Tensor& bias);

}  // namespace rbee::ops
