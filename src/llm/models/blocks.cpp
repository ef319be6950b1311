#include "llm/models/blocks.h"

#include "rbee/ops.h"

namespace rbee::llm {

namespace {
// A [N, heads * D] tensor (any row stride, contiguous inside a row) as [N, heads, D] without copying.
Tensor split_heads(const Tensor& t, int heads, int d) {
  return t.as_strided({t.dim(0), heads, d}, {t.stride(0), d, 1}, t.offset());
}
}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  Tensor y = ops::qmatmul(x, w);
  return bias.defined() ? ops::add(y, bias) : y;
}

Tensor reduce_partial(const StepContext& step, const Tensor& partial) {
  if (step.comm) step.comm->all_reduce_sum(step.rank, partial);
  return partial;
}

Tensor norm(const StepContext& step, const Tensor& x, const Tensor& w) {
  return ops::rms_norm(x, w, step.config.norm_eps);
}

Tensor attention_block(const StepContext& step, const LayerWeights& w, int layer, const Tensor& h) {
  const ModelConfig& c = step.config;
  const int64_t n = h.dim(0);
  const int hq = c.n_heads, hkv = c.n_kv_heads, d = c.head_dim;
  Tensor q, k, v;
  if (w.attn_qkv.defined()) {
    const Tensor qkv = linear(h, w.attn_qkv);  // [N, (Hq + 2 Hkv) * D]
    q = split_heads(qkv.narrow(1, 0, (int64_t)hq * d), hq, d);
    k = split_heads(qkv.narrow(1, (int64_t)hq * d, (int64_t)hkv * d), hkv, d);
    v = split_heads(qkv.narrow(1, (int64_t)(hq + hkv) * d, (int64_t)hkv * d), hkv, d);
  } else {
    q = split_heads(linear(h, w.attn_q, w.attn_q_bias), hq, d);
    k = split_heads(linear(h, w.attn_k, w.attn_k_bias), hkv, d);
    v = split_heads(linear(h, w.attn_v, w.attn_v_bias), hkv, d);
  }
  if (w.attn_q_norm.defined()) {
    q = norm(step, q.contiguous(), w.attn_q_norm);
    k = norm(step, k.contiguous(), w.attn_k_norm);
  }
  const bool local = c.layer_is_local[(size_t)layer];
  const Tensor& inv_freq = local ? step.inv_freq_local : step.inv_freq_global;
  RopeParams rope;
  rope.mode = c.rope_mode;
  rope.rotary_dim = c.rotary_dim;
  rope.mscale = c.rope_attn_factor;
  rope.freq_ratio = local ? step.rope_ratio_local : step.rope_ratio_global;
  q = ops::rope(q, step.positions, inv_freq, rope);
  k = ops::rope(k, step.positions, inv_freq, rope);
  ops::kv_cache_write(k, v, step.slots, step.cache.k(layer, step.part), step.cache.v(layer, step.part));
  AttentionParams params;
  params.scale = c.attn_scale;
  params.causal = true;
  params.window = local ? c.sliding_window : 0;
  params.softcap = c.attn_softcap;
  const Tensor o = ops::paged_attention(q, step.cache.k(layer, step.part), step.cache.v(layer, step.part),
                                        step.seq_info, step.block_tables, params);  // [N, Hq, D]
  return reduce_partial(step, linear(o.view({n, (int64_t)hq * d}), w.attn_output));
}

Tensor mlp_block(const StepContext& step, const LayerWeights& w, const Tensor& h) {
  const ModelConfig& c = step.config;
  Tensor gate, up;
  if (w.ffn_gate.defined()) {
    gate = linear(h, w.ffn_gate);
    up = linear(h, w.ffn_up);
  } else {  // fused [N, 2I]: gate first, then up
    const Tensor gu = linear(h, w.ffn_up);
    const int64_t i = gu.dim(1) / 2;
    gate = gu.narrow(1, 0, i).contiguous();
    up = gu.narrow(1, i, i).contiguous();
  }
  const Tensor act = c.activation == Activation::Silu ? ops::swiglu(gate, up) : ops::mul(ops::gelu(gate, true), up);
  return reduce_partial(step, linear(act, w.ffn_down));
}

Tensor pre_norm_layer(const StepContext& step, const LayerWeights& w, int layer, const Tensor& x) {
  const Tensor h = norm(step, x, w.attn_norm);
  auto [x1, h2] = ops::add_rms_norm(x, attention_block(step, w, layer, h), w.ffn_norm, step.config.norm_eps);
  return ops::add(x1, mlp_block(step, w, h2));
}

Tensor sandwich_norm_layer(const StepContext& step, const LayerWeights& w, int layer, const Tensor& x) {
  const Tensor h = norm(step, x, w.attn_norm);
  const Tensor a = norm(step, attention_block(step, w, layer, h), w.post_attention_norm);
  auto [x1, h2] = ops::add_rms_norm(x, a, w.ffn_norm, step.config.norm_eps);
  return ops::add(x1, norm(step, mlp_block(step, w, h2), w.post_ffw_norm));
}

}  // namespace rbee::llm
