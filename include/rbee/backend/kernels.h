// Kernels: what a backend implements, one method per op of DESIGN.md section 3.
//
// The front-end (rbee/ops.h) validates every argument, allocates outputs and establishes the preconditions
// written above each method; kernels only compute. A backend overrides what it implements and answers
// supports() truthfully; the defaults throw Unsupported naming the op and the backend.
//
// Layout conventions: "any strides" means the kernel reads through the tensor's strides (views, transposes,
// broadcasts with stride 0). "contiguous" means row-major with no gaps. Outputs are contiguous unless a method
// says otherwise. Tensors passed to a device's kernels always live on that device.
#pragma once

#include <span>
#include <string>

#include "rbee/backend/op_kinds.h"
#include "rbee/core/dtype.h"

namespace rbee {

class Tensor;

class Kernels {
 public:
  explicit Kernels(std::string backend_name) : backend_name_(std::move(backend_name)) {}
  virtual ~Kernels() = default;

  // Whether `op` runs on this backend for these dtypes (inputs first, then output, as each method lists them).
  virtual bool supports(OpKind op, std::span<const DType> dtypes) const = 0;

  // ---- elementwise ----
  // x: any strides, shape = out's; out: same dtype. Floating dtypes; Neg/Abs/Sqr/Sign/Relu also I64/I32.
  virtual void unary(UnaryOp op, double param, const Tensor& x, Tensor& out);
  // a, b: out's shape (broadcast views), any strides, same dtype (any plain dtype);
  // out: a's dtype, or U8 for comparisons. Integer division truncates; division by zero gives 0 for integers.
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
  // out = x * mul + add; x any strides, floating dtype.
  virtual void affine(const Tensor& x, double mul, double add, Tensor& out);
  // Conversion between plain dtypes; x any strides. Float->int truncates toward zero (saturating).
  virtual void cast(const Tensor& x, Tensor& out);
  // dst = src, same shape and dtype; both any strides (dst may be a view into a larger tensor).
  // Quantized dtypes: whole rows, last dimension contiguous.
  virtual void copy(const Tensor& src, Tensor& dst);
  // Sets every element of dst (any strides, plain dtype) to value.
  virtual void fill(Tensor& dst, double value);
  // out[i] = start + i * step; out 1-D contiguous, plain dtype.
  virtual void arange(Tensor& out, double start, double step);
  // out = cond ? a : b; cond U8 (non-zero is true), all three broadcast views of out's shape, any strides.
  virtual void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out);

  // ---- reductions and sorting (x contiguous; the reduced axis is given) ----
  // out: x's shape with dim `axis` = 1. Sum/Min/Max keep x's dtype, ArgMin/ArgMax write I64.
  virtual void reduce(ReduceOp op, const Tensor& x, int axis, Tensor& out);
  // Softmax over the last axis, max-subtracted. Floating dtypes.
  virtual void softmax(const Tensor& x, Tensor& out);
  // Indices (I64) that sort each row of the last axis; stable.
  virtual void argsort(const Tensor& x, bool ascending, Tensor& out);

  // ---- neural-network blocks (x contiguous, normalized over the last axis unless stated) ----
  // out = x / sqrt(mean(x^2) + eps) * weight; weight [n] or null.
  virtual void rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out);
  // out = (x - mean) / sqrt(var + eps) * weight + bias; weight, bias [n] or null.
  virtual void layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps, Tensor& out);
  // x [N, C, S]: normalize each of `groups` groups of C/groups channels over (C/groups) * S values;
  // weight, bias [C] or null.
  virtual void group_norm(const Tensor& x, int groups, const Tensor* weight, const Tensor* bias, float eps,
                          Tensor& out);
  // x [N, H, D]: last axis contiguous, other strides any. positions [N] I32. inv_freq [rotary_dim / 2] F32
  // (all scaling already applied). angle = positions[n] * inv_freq[i]; out [N, H, D] contiguous.
  virtual void rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, const RopeParams& params,
                    Tensor& out);
  // q [B, Hq, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv]: last axis contiguous, other strides any;
  // Hq % Hkv == 0 (query head h uses kv head h / (Hq / Hkv)); same floating dtype. out [B, Hq, Tq, Dv].
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& params,
                         Tensor& out);
  // out = silu(gate) * up; all contiguous, same shape.
  virtual void swiglu(const Tensor& gate, const Tensor& up, Tensor& out);
  // sum_out = x + residual; norm_out = rms_norm(sum_out) * weight. All [rows, n] contiguous.
  virtual void add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps,
                            Tensor& sum_out, Tensor& norm_out);

  // ---- matrix products and quantization ----
  // a [..., M, K], b [..., K, N] broadcast to out's batch dims; the last two axes of a and b have any strides
  // (row-major or transposed). Same dtype F32/F16/BF16, accumulated in f32. out [..., M, N].
  virtual void matmul(const Tensor& a, const Tensor& b, Tensor& out);
  // x [rows, K] F32 contiguous -> out [rows, K] of a block dtype.
  virtual void quantize(const Tensor& x, Tensor& out);
  // q [rows, K] block dtype -> out [rows, K] F32.
  virtual void dequantize(const Tensor& q, Tensor& out);
  // out [M, N] F32 = x [M, K] F32 (contiguous) . w^T, w [N, K] block dtype (or F16/BF16/F32), computed on the
  // packed blocks. What is multiplied, whatever M and path:
  //  - block types: w's values times x quantized to the activation format the type pairs with (8-bit blocks);
  //  - F16 / BF16: w's values times round16(x), x rounded to w's type (nearest even; beyond the f16 range it
  //    becomes +-inf), every product exact in f32 and summed in f32 (llama.cpp, vLLM and PyTorch compute this:
  //    one 16-bit GEMM with f32 accumulation);
  //  - F32: w times x in f32 (no TF32).
  virtual void qmatmul(const Tensor& x, const Tensor& w, Tensor& out);

  // ---- convolution family (NCHW / NCL, all contiguous, floating dtypes) ----
  // x [N, Cin, L], w [Cout, Cin/groups, K] -> out [N, Cout, Lout]
  virtual void conv1d(const Tensor& x, const Tensor& w, const Conv1dParams& p, Tensor& out);
  // x [N, Cin, H, W], w [Cout, Cin/groups, KH, KW] -> out [N, Cout, Ho, Wo]
  virtual void conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p, Tensor& out);
  // x [N, Cin, L], w [Cin, Cout/groups, K] -> out [N, Cout, Lout]
  virtual void conv_transpose1d(const Tensor& x, const Tensor& w, const Conv1dParams& p, Tensor& out);
  // x [N, Cin, H, W], w [Cin, Cout/groups, KH, KW] -> out [N, Cout, Ho, Wo]
  virtual void conv_transpose2d(const Tensor& x, const Tensor& w, const Conv2dParams& p, Tensor& out);
  // x [N, C, H, W] -> out [N, Ho*Wo, C*KH*KW] (column order: c, kh, kw); padding reads as zero.
  virtual void im2col(const Tensor& x, int kernel_h, int kernel_w, const Conv2dParams& p, Tensor& out);
  // x [N, C, H, W] -> out [N, C, Ho, Wo]
  virtual void pool2d(PoolOp op, const Tensor& x, const Pool2dParams& p, Tensor& out);
  // x [N, C, H, W] -> out [N, C, Ho, Wo]; source index = floor(dst * in / out).
  virtual void upsample_nearest2d(const Tensor& x, Tensor& out);

  // ---- indexing (ids I64, I32 or U32; any id out of range throws InvalidArgument) ----
  // x contiguous, ids [n] -> out: x's shape with dim axis = n
  virtual void index_select(const Tensor& x, const Tensor& ids, int axis, Tensor& out);
  // x contiguous, ids contiguous with x's rank -> out[...i...] = x[...ids[...i...]...] along axis
  virtual void gather(const Tensor& x, const Tensor& ids, int axis, Tensor& out);
  // out already holds x. ids [n], src: x's shape with dim axis = n: out[.., ids[i], ..] += src[.., i, ..]
  virtual void index_add(const Tensor& ids, const Tensor& src, int axis, Tensor& out);
  // out already holds x. ids and src have the same shape: out[.., ids[..i..], ..] = src[..i..] (last write wins)
  virtual void scatter(const Tensor& ids, const Tensor& src, int axis, Tensor& out);
  // like scatter but adds
  virtual void scatter_add(const Tensor& ids, const Tensor& src, int axis, Tensor& out);

  // ---- paged KV cache (LLM serving) ----
  // Caches are [num_blocks, block_size, Hkv, D] contiguous (F16, BF16 or F32); a slot is
  // block * block_size + offset. Writes row n of k [N, Hkv, D] and v (last axis contiguous, any other strides)
  // to slot slots[n] (I32 [N], each in range, checked by the front-end), converting to the cache dtype.
  virtual void kv_cache_write(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_cache,
                              Tensor& v_cache);
  // Attention of a batch of sequences over their paged caches (prefill and decode alike).
  // q [Nq, Hq, D] F32 (last axis contiguous): the new tokens of all sequences, concatenated.
  // seq_info I32 [B, 3] = (q_start, q_len, ctx_len) per sequence: queries q_start .. q_start+q_len-1 belong to
  // it and its cache holds ctx_len positions (the new ones included); query i sits at position
  // ctx_len - q_len + i and is causal (plus params.window / params.softcap). block_tables I32 [B, max_blocks]:
  // the cache block holding positions [j*block_size, (j+1)*block_size) of the sequence. GQA as in attention().
  // out [Nq, Hq, D] F32; rows of q that belong to no sequence are left untouched.
  virtual void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                               const Tensor& seq_info, const Tensor& block_tables, const AttentionParams& params,
                               Tensor& out);

  // ---- token sampling (LLM decoding) ----
  // One token id per row of logits [B, V] F32 (contiguous) -> out I32 [B], by the per-row settings:
  //   params F32 [B, kSampleParams] and control I64 [B, kSampleControls] (columns: op_kinds.h, sample_col),
  //   tokens I32 [B, H, 2]: (id, count) pairs of the tokens that have a bias or a penalty, id -1 for an unused
  //   entry, each id at most once per row; count = occurrences in the generated output, 0 for a token of the
  //   prompt only, -1 for a token with a bias only; bias F32 [B, H]: added to that token's logit.
  // The token, with the arithmetic of backends/common/sampling.h (every backend gives the same ids):
  //  1. l = adjust(logit, bias, count, penalties) for listed tokens, the logit itself for the others;
  //  2. temperature 0: the largest l, the smallest id among equal ones (NaN never wins); -1 if all are NaN;
  //  3. otherwise candidates are the tokens with l neither NaN nor -inf (none: -1), c = l / temperature,
  //     ordered by c descending, id ascending (order_key); top_k > 0 keeps the first top_k;
  //  4. weights w = weight(c, c_max), integers (the top one 2^40); top_p < 1 keeps the shortest prefix of the
  //     survivors (in that order) whose weight reaches top_p times their total; min_p > 0 keeps those with
  //     w >= min_p * 2^40;
  //  5. r = scale_to(random_word(seed, draw), total weight of the survivors); the result is the survivor, in
  //     ascending id order, at which the running weight first exceeds r.
  virtual void sample(const Tensor& logits, const Tensor& params, const Tensor& control, const Tensor& tokens,
                      const Tensor& bias, Tensor& out);

  const std::string& backend_name() const { return backend_name_; }

 protected:
  [[noreturn]] void unsupported(OpKind op) const;

 private:
  std::string backend_name_;
};

}  // namespace rbee
