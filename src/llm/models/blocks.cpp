#include "llm/models/blocks.h"

#include <tuple>

#include "llm/models/overlapped_reduce.h"

#include "rbee/core/profile.h"
#include "rbee/ops.h"
#include "rbee/backend/paged_rows.h"
#include "rbee/backend/reduce_norm.h"

namespace rbee::llm {

namespace {
// A [N, heads * D] tensor (any row stride, contiguous inside a row) as [N, heads, D] without copying.
Tensor split_heads(const Tensor& t, int heads, int d) {
  return t.as_strided({t.dim(0), heads, d}, {t.stride(0), d, 1}, t.offset());
}

struct Qkv {
  Tensor q, k, v;  // [N, H, D] views
};

// The q / k / v heads of a stacked projection's output [N, (Hq + 2 Hkv) * D].
Qkv split_qkv(const ModelConfig& c, const Tensor& qkv) {
  const int hq = c.n_heads, hkv = c.n_kv_heads, d = c.head_dim;
  return {split_heads(qkv.narrow(1, 0, (int64_t)hq * d), hq, d),
          split_heads(qkv.narrow(1, (int64_t)hq * d, (int64_t)hkv * d), hkv, d),
          split_heads(qkv.narrow(1, (int64_t)(hq + hkv) * d, (int64_t)hkv * d), hkv, d)};
}

Qkv project_qkv(const StepContext& step, const LayerWeights& w, const Tensor& h) {
  const ModelConfig& c = step.config;
  if (w.attn_qkv.defined()) {
    profile::Scope scope("qkv", h, w.attn_qkv.shape());
    return split_qkv(c, linear(h, w.attn_qkv));
  }
  profile::Scope scope("q,k,v", h, w.attn_q.shape());
  return {split_heads(linear(h, w.attn_q, w.attn_q_bias), c.n_heads, c.head_dim),
          split_heads(linear(h, w.attn_k, w.attn_k_bias), c.n_kv_heads, c.head_dim),
          split_heads(linear(h, w.attn_v, w.attn_v_bias), c.n_kv_heads, c.head_dim)};
}

// Attention of the step's new q / k / v heads over the paged cache (rope, cache write, attention, output
// projection): -> [N, H] (summed over the ranks of a tensor split; with reduce false, this rank's partial sum).
Tensor attend(const StepContext& step, const LayerWeights& w, int layer, Qkv p, bool reduce = true) {
  const ModelConfig& c = step.config;
  const int64_t n = p.q.dim(0);
  if (w.attn_q_norm.defined()) {
    profile::Scope scope("qk_norm", p.q);
    p.q = norm(step, p.q.contiguous(), w.attn_q_norm);
    p.k = norm(step, p.k.contiguous(), w.attn_k_norm);
  }
  const bool local = c.layer_is_local[(size_t)layer];
  RopeParams rope;
  rope.mode = c.rope_mode;
  rope.rotary_dim = c.rotary_dim;
  rope.mscale = c.rope_attn_factor;
  rope.freq_ratio = local ? step.rope_ratio_local : step.rope_ratio_global;
  const Tensor& inv_freq = local ? step.inv_freq_local : step.inv_freq_global;
  Tensor q;
  if (step.fused_ops) {
    profile::Scope scope("rope+kv_write", p.k);
    q = ops::rope_kv_cache_write(p.q, p.k, p.v, step.positions, inv_freq, rope, step.slots,
                                 step.cache.k(layer, step.part), step.cache.v(layer, step.part));
  } else {
    profile::Scope scope("rope,rope,kv_write", p.k);
    q = ops::rope(p.q, step.positions, inv_freq, rope);
    ops::kv_cache_write(ops::rope(p.k, step.positions, inv_freq, rope), p.v, step.slots,
                        step.cache.k(layer, step.part), step.cache.v(layer, step.part));
  }
  AttentionParams params;
  params.scale = c.attn_scale;
  params.causal = true;
  params.window = local ? c.sliding_window : 0;
  params.softcap = c.attn_softcap;
  Tensor o;
  {
    profile::Scope scope("attention", q, step.block_tables.shape());
    // [N, Hq, D]; every row is a token of one of the step's sequences (Transformer::forward), so no zero fill.
    o = ops::paged_attention(q, step.cache.k(layer, step.part), step.cache.v(layer, step.part), step.seq_info,
                             step.block_tables, params, ops::PagedRows::kAllInSequences);
  }
  profile::Scope scope("attn_output", o, w.attn_output.shape());
  // The MLP's first projection comes next (gate, or the stacked gate/up).
  const Tensor& mlp_first = w.ffn_gate.defined() ? w.ffn_gate : w.ffn_up;
  const Tensor heads = o.view({n, (int64_t)c.n_heads * c.head_dim});
  if (!reduce) return linear(heads, w.attn_output);
  if (step.comm && step.tp_overlap) {
    return reduce_in_halves(step, w.attn_output, Tensor(), ReduceExtras{Tensor(), mlp_first},
                            [&](const Tensor& w_part, const Tensor&) { return linear(heads, w_part); });
  }
  return reduce_partial(step, linear(heads, w.attn_output), ReduceExtras{Tensor(), mlp_first});
}

// Whether the MLP can run as one stacked gate/up projection followed by swiglu_qmatmul.
bool fused_swiglu(const StepContext& step, const LayerWeights& w) {
  return step.fused_ops && !w.ffn_gate.defined() && step.config.activation == Activation::Silu;
}
// Whether the attention norm can run inside the q/k/v projection (stacked q/k/v weights).
bool fused_norm_qkv(const StepContext& step, const LayerWeights& w) {
  return step.fused_ops && w.attn_qkv.defined();
}
}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  Tensor y = ops::qmatmul(x, w);
  return bias.defined() ? ops::add(y, bias) : y;
}

Tensor reduce_partial(const StepContext& step, const Tensor& partial, const ReduceExtras& extras) {
  if (!step.comm) return partial;
  if (extras.addend.defined() || extras.next_read.defined()) {
    all_reduce_sum_with(*step.comm, step.rank, partial, extras);
  } else {
    step.comm->all_reduce_sum(step.rank, partial);
  }
  return partial;
}

Tensor next_layer_first_read(const StepContext& step) {
  if (!step.next_layer) return Tensor();
  return step.next_layer->attn_qkv.defined() ? step.next_layer->attn_qkv : step.next_layer->attn_q;
}

Tensor norm(const StepContext& step, const Tensor& x, const Tensor& w) {
  return ops::rms_norm(x, w, step.config.norm_eps);
}

Tensor attention_block(const StepContext& step, const LayerWeights& w, int layer, const Tensor& h) {
  return attend(step, w, layer, project_qkv(step, w, h));
}

Tensor mlp_block(const StepContext& step, const LayerWeights& w, const Tensor& h) {
  const ModelConfig& c = step.config;
  if (fused_swiglu(step, w)) {
    Tensor gu;
    {
      profile::Scope scope("gate_up", h, w.ffn_up.shape());
      gu = linear(h, w.ffn_up);
    }
    profile::Scope scope("swiglu+down", gu, w.ffn_down.shape());
    if (step.comm && step.tp_overlap) {
      return reduce_in_halves(step, w.ffn_down, Tensor(), ReduceExtras{Tensor(), next_layer_first_read(step)},
                              [&](const Tensor& w_part, const Tensor&) { return ops::swiglu_qmatmul(gu, w_part); });
    }
    return reduce_partial(step, ops::swiglu_qmatmul(gu, w.ffn_down),
                          ReduceExtras{Tensor(), next_layer_first_read(step)});
  }
  profile::Scope scope("mlp", h, w.ffn_down.shape());
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
  if (step.comm && step.tp_overlap) {
    return reduce_in_halves(step, w.ffn_down, Tensor(), ReduceExtras{Tensor(), next_layer_first_read(step)},
                            [&](const Tensor& w_part, const Tensor&) { return linear(act, w_part); });
  }
  return reduce_partial(step, linear(act, w.ffn_down), ReduceExtras{Tensor(), next_layer_first_read(step)});
}

namespace {

// attention(attn_norm(x)) of a layer, x [tokens, hidden] -> [tokens, hidden] (no residual added; reduce false: this
// rank's partial sum under a tensor split, stacked q/k/v only). With stacked q/k/v weights (GPUs, fused-qkv files)
// the norm runs inside the projection.
Tensor normed_attention(const StepContext& step, const LayerWeights& w, int layer, const Tensor& x,
                        bool reduce = true) {
  if (fused_norm_qkv(step, w)) {
    Tensor qkv;
    if (step.carried_qkv.defined()) {  // made by the layer before, with its down projection's all-reduce
      qkv = step.carried_qkv;
      step.carried_qkv = Tensor();
    } else {
      profile::Scope scope("attn_norm+qkv", x, w.attn_qkv.shape());
      qkv = ops::rms_norm_qmatmul(x, w.attn_norm, step.config.norm_eps, w.attn_qkv);
    }
    return attend(step, w, layer, split_qkv(step.config, qkv), reduce);
  }
  Tensor h;
  {
    profile::Scope scope("attn_norm", x);
    h = norm(step, x, w.attn_norm);
  }
  return attention_block(step, w, layer, h);
}

}  // namespace

Tensor pre_norm_layer(const StepContext& step, const LayerWeights& w, int layer, const Tensor& x) {
  const ModelConfig& c = step.config;
  const float eps = c.norm_eps;
  // Tensor split with the fused MLP below: the attention output's all-reduce goes with the add, the norm and the
  // gate/up projection (StepContext::reduce_norm: one communicator call where it has a fused pass).
  const bool reduce_norm =
      step.comm && step.reduce_norm && !step.tp_overlap && fused_swiglu(step, w) && fused_norm_qkv(step, w);
  const Tensor a = normed_attention(step, w, layer, x, !reduce_norm);
  // MLP: with stacked gate/up weights and SiLU, the residual add and norm run inside the gate/up projection and
  // the activation and the second residual add inside the down projection. Under a tensor split x1 is the same
  // on every rank (made from all-reduced values), so rank 0 alone adds it to its partial sum and the all-reduce
  // gives x1 + the sum of every rank's down projection: no separate add after the reduction.
  if (fused_swiglu(step, w)) {
    Tensor x1, gu;
    {
      profile::Scope scope("add+ffn_norm+gate_up", x, w.ffn_up.shape());
      if (reduce_norm) {
        std::tie(x1, gu) = all_reduce_add_rms_norm_qmatmul(*step.comm, step.rank, a, x, w.ffn_norm, eps, w.ffn_up,
                                                           ReduceExtras{Tensor(), w.ffn_up});
      } else {
        std::tie(x1, gu) = ops::add_rms_norm_qmatmul(x, a, w.ffn_norm, eps, w.ffn_up);
      }
    }
    profile::Scope scope("swiglu+down+add", gu, w.ffn_down.shape());
    const Tensor next = next_layer_first_read(step);
    // Cut in two by output columns, half A's all-reduce beside half B's product (tp_overlap): rank 0's residual is
    // added by its products (the same f32 add as the all-reduce's push or the gemv's epilogue: the same bits).
    if (step.comm && step.tp_overlap) {
      const auto down = [&](const Tensor& w_part, const Tensor& residual_part) {
        return ops::swiglu_qmatmul(gu, w_part, residual_part);
      };
      if (!step.fold_residual) {
        return ops::add(x1, reduce_in_halves(step, w.ffn_down, Tensor(), {Tensor(), next}, down));
      }
      return reduce_in_halves(step, w.ffn_down, step.rank == 0 ? x1 : Tensor(), {Tensor(), next}, down);
    }
    if (step.comm && !step.fold_residual) {
      return ops::add(x1, reduce_partial(step, ops::swiglu_qmatmul(gu, w.ffn_down), ReduceExtras{Tensor(), next}));
    }
    // Rank 0's residual: added by the all-reduce as it pushes (residual_in_reduce), else by the projection.
    const Tensor residual = step.comm && step.rank != 0 ? Tensor() : x1;
    // With reduce_norm, the next layer's attention norm and q/k/v product go with this all-reduce (carried_qkv).
    if (reduce_norm && step.residual_in_reduce && step.next_layer && fused_norm_qkv(step, *step.next_layer)) {
      const LayerWeights& next_w = *step.next_layer;
      auto [x_next, qkv] = all_reduce_add_rms_norm_qmatmul(*step.comm, step.rank, ops::swiglu_qmatmul(gu, w.ffn_down),
                                                           Tensor(), next_w.attn_norm, eps, next_w.attn_qkv,
                                                           ReduceExtras{residual, next});
      step.carried_qkv = qkv;
      return x_next;
    }
    if (step.comm && step.residual_in_reduce) {
      return reduce_partial(step, ops::swiglu_qmatmul(gu, w.ffn_down), ReduceExtras{residual, next});
    }
    return reduce_partial(step, ops::swiglu_qmatmul(gu, w.ffn_down, residual), ReduceExtras{Tensor(), next});
  }
  Tensor x1, h2;
  {
    profile::Scope scope("add+ffn_norm", x);
    std::tie(x1, h2) = ops::add_rms_norm(x, a, w.ffn_norm, eps);
  }
  const Tensor m = mlp_block(step, w, h2);
  profile::Scope scope("add", x1);
  return ops::add(x1, m);
}

Tensor sandwich_norm_layer(const StepContext& step, const LayerWeights& w, int layer, const Tensor& x) {
  const ModelConfig& c = step.config;
  const Tensor a = normed_attention(step, w, layer, x);
  Tensor x1, h2;
  {
    profile::Scope scope("post_norm+add+ffn_norm", x);
    std::tie(x1, h2) = ops::add_rms_norm(x, norm(step, a, w.post_attention_norm), w.ffn_norm, c.norm_eps);
  }
  const Tensor m = mlp_block(step, w, h2);
  profile::Scope scope("post_norm+add", x);
  return ops::add(x1, norm(step, m, w.post_ffw_norm));
}

}  // namespace rbee::llm
