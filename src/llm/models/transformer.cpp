#include "llm/models/transformer.h"

#include <cmath>
#include <cstdlib>
#include <string_view>

#include "rbee/backend/device.h"
#include "rbee/core/log.h"
#include "rbee/core/profile.h"
#include "rbee/ops.h"

namespace rbee::llm {

namespace {

// RBEE_DECODE_FUSION=0: the unfused ops one by one and no gate/up stacking (comparisons with the fused step).
bool fused_ops_from_env() {
  const char* v = std::getenv("RBEE_DECODE_FUSION");
  return v == nullptr || std::string_view(v) != "0";
}

std::vector<float> inv_freq_table(const ModelConfig& c, float theta, bool apply_scaling, const Tensor& rope_freqs) {
  std::vector<float> f =
      ops::rope_inv_freq(c.rotary_dim, theta, apply_scaling ? c.rope_scaling : ops::RopeScaling{});
  if (apply_scaling && rope_freqs.defined()) {
    const auto divisors = rope_freqs.to(DType::F32).to_vector<float>();
    RBEE_CHECK_CODE(divisors.size() == f.size(), ErrorCode::Io, "rope_freqs has {} entries, expected {}",
                    divisors.size(), f.size());
    for (size_t i = 0; i < f.size(); ++i) f[i] /= divisors[i];
  }
  return f;
}

}  // namespace

Transformer::Transformer(ModelConfig config, std::unique_ptr<Tokenizer> tokenizer, Device& device,
                         const TensorLookup& lookup, const std::function<void(float)>& progress,
                         std::shared_ptr<const void> file_keepalive)
    : config_(std::move(config)),
      tokenizer_(std::move(tokenizer)),
      device_(device),
      arch_(architecture(config_.arch)),
      fused_ops_(fused_ops_from_env()),
      file_keepalive_(std::move(file_keepalive)) {
  const ModelConfig& c = config_;
  const int total = 3 + c.n_layers;
  int done = 0;
  auto report = [&] {
    if (progress) progress((float)++done / (float)total);
  };
  // Moves a weight to the device; 1-D tensors (norms, biases) become F32, norms optionally 1 + w.
  auto place = [&](Tensor t, const std::string& name, bool is_norm) -> Tensor {
    if (!t.defined()) return t;
    if (t.rank() == 1) {
      RBEE_CHECK_CODE(!is_quantized(t.dtype()), ErrorCode::Io, "tensor {} is 1-D but quantized ({})", name,
                      dtype_name(t.dtype()));
      t = t.to(DType::F32);
      if (is_norm && c.norm_weight_plus_one) t = ops::affine(t, 1.0, 1.0);
    }
    Tensor placed = t.to(device_);
    weight_bytes_ += placed.nbytes();
    return placed;
  };
  auto need = [&](const std::string& name, bool is_norm = false) {
    Tensor t = lookup(name);
    RBEE_CHECK_CODE(t.defined(), ErrorCode::Io, "model file has no tensor '{}' (architecture {})", name, c.arch);
    return place(t, name, is_norm);
  };
  auto maybe = [&](const std::string& name, bool is_norm = false) { return place(lookup(name), name, is_norm); };

  weights_.token_embd = need("token_embd.weight");
  RBEE_CHECK_CODE(weights_.token_embd.rank() == 2 && weights_.token_embd.dim(1) == c.hidden_size, ErrorCode::Io,
                  "token_embd.weight has shape {}, expected [vocab, {}]", weights_.token_embd.shape().to_string(),
                  c.hidden_size);
  report();
  weights_.output_norm = need("output_norm.weight", true);
  weights_.output = c.tie_embeddings ? weights_.token_embd : maybe("output.weight");
  if (!weights_.output.defined()) weights_.output = weights_.token_embd;
  weights_.rope_freqs = lookup("rope_freqs.weight");
  report();
  weights_.layers.resize((size_t)c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    LayerWeights& w = weights_.layers[(size_t)l];
    RBEE_WITH_CONTEXT(fmt::format("loading layer {}", l), {
      w.attn_norm = need(p + "attn_norm.weight", true);
      if (c.fused_qkv) {
        w.attn_qkv = need(p + "attn_qkv.weight");
      } else {
        w.attn_q = need(p + "attn_q.weight");
        w.attn_k = need(p + "attn_k.weight");
        w.attn_v = need(p + "attn_v.weight");
      }
      w.attn_q_bias = maybe(p + "attn_q.bias");
      w.attn_k_bias = maybe(p + "attn_k.bias");
      w.attn_v_bias = maybe(p + "attn_v.bias");
      w.attn_output = need(p + "attn_output.weight");
      if (c.qk_norm) {
        w.attn_q_norm = need(p + "attn_q_norm.weight", true);
        w.attn_k_norm = need(p + "attn_k_norm.weight", true);
      }
      w.ffn_norm = need(p + "ffn_norm.weight", true);
      if (c.post_norms) {
        w.post_attention_norm = need(p + "post_attention_norm.weight", true);
        w.post_ffw_norm = need(p + "post_ffw_norm.weight", true);
      }
      if (!c.fused_gate_up) w.ffn_gate = need(p + "ffn_gate.weight");
      w.ffn_up = need(p + "ffn_up.weight");
      w.ffn_down = need(p + "ffn_down.weight");
      fuse_qkv(w);
      fuse_gate_up(w);
    });
    report();
  }
  const float local_theta = c.rope_theta_local > 0 ? c.rope_theta_local : c.rope_theta;
  // Gemma 3 scales only its global layers' frequencies; everyone else scales every layer.
  const bool scale_local = c.rope_theta_local <= 0;
  const auto global = inv_freq_table(c, c.rope_theta, true, weights_.rope_freqs);
  const auto local = inv_freq_table(c, local_theta, scale_local, weights_.rope_freqs);
  // llama.cpp's angles (RopeParams::freq_ratio) where a table carries no scaling: its ratio powf(base, -2 / dim).
  const bool unscaled = c.rope_scaling.kind == ops::RopeScaling::Kind::None && !weights_.rope_freqs.defined();
  auto ratio = [&](float base) { return std::pow(base, -2.0f / (float)c.rotary_dim); };
  if (c.rope_llamacpp_angles && unscaled) rope_ratio_global_ = ratio(c.rope_theta);
  if (c.rope_llamacpp_angles && (unscaled || !scale_local)) rope_ratio_local_ = ratio(local_theta);
  inv_freq_global_ = Tensor::from_vector(global, {(int64_t)global.size()}, device_);
  inv_freq_local_ = Tensor::from_vector(local, {(int64_t)local.size()}, device_);
  report();
}

void Transformer::fuse_qkv(LayerWeights& w) const {
  // GPUs only: the CPU keeps its tested per-projection path (and gains nothing from fewer launches).
  if (device_.host_accessible() || w.attn_qkv.defined() || !w.attn_q.defined()) return;
  if (w.attn_q_bias.defined() || w.attn_k_bias.defined() || w.attn_v_bias.defined()) return;
  const Tensor* parts[] = {&w.attn_q, &w.attn_k, &w.attn_v};
  const DType type = w.attn_q.dtype();
  const int64_t k = w.attn_q.dim(1);
  int64_t rows = 0;
  for (const Tensor* t : parts) {
    if (t->rank() != 2 || t->dtype() != type || t->dim(1) != k || !t->is_contiguous()) return;
    rows += t->dim(0);
  }
  // Rows of one weight matrix are independent (blocks never straddle rows), so stacking them byte-wise gives
  // the [(Hq + 2 Hkv) * D, hidden] matrix of a fused-qkv model.
  Tensor qkv = Tensor::empty({rows, k}, type, device_);
  int64_t offset = 0;
  for (const Tensor* t : parts) {
    device_.copy_on_device(static_cast<uint8_t*>(qkv.data()) + offset, t->data(), (size_t)t->nbytes());
    offset += t->nbytes();
  }
  w.attn_qkv = qkv;
  w.attn_q = w.attn_k = w.attn_v = Tensor();
}

void Transformer::fuse_gate_up(LayerWeights& w) const {
  // GPUs only, like fuse_qkv: one projection for both halves of the gated MLP.
  if (!fused_ops_ || device_.host_accessible() || !w.ffn_gate.defined() || !w.ffn_up.defined()) return;
  const Tensor& gate = w.ffn_gate;
  const Tensor& up = w.ffn_up;
  if (gate.rank() != 2 || up.rank() != 2 || gate.dtype() != up.dtype() || gate.dim(1) != up.dim(1) ||
      gate.dim(0) != up.dim(0) || !gate.is_contiguous() || !up.is_contiguous()) {
    return;
  }
  // [gate; up]: the layout of a fused-gate/up file (mlp_block splits it at I).
  Tensor stacked = Tensor::empty({gate.dim(0) + up.dim(0), gate.dim(1)}, gate.dtype(), device_);
  device_.copy_on_device(stacked.data(), gate.data(), (size_t)gate.nbytes());
  device_.copy_on_device(static_cast<uint8_t*>(stacked.data()) + gate.nbytes(), up.data(), (size_t)up.nbytes());
  w.ffn_up = stacked;
  w.ffn_gate = Tensor();
}

Tensor Transformer::embed(const Tensor& ids, std::span<const int32_t> host_ids) const {
  const Tensor& table = weights_.token_embd;
  const int64_t n = ids.dim(0), vocab = table.dim(0), hidden = config_.hidden_size;
  auto row = [&](int32_t id) {  // embedding row `id` as F32 [1, hidden]
    const Tensor r = table.narrow(0, id, 1);
    return is_quantized(table.dtype()) ? ops::dequantize(r) : r.dtype() == DType::F32 ? r : ops::cast(r, DType::F32);
  };
  Tensor x;
  if ((int64_t)host_ids.size() == n && n <= kRowwiseEmbedTokens) {
    // Decode: each row addressed from the host's ids (already checked), so nothing waits for the device (the
    // index ops below check device ids with a read-back, which would stall the host until the previous step ends).
    if (n == 1) {
      x = row(host_ids[0]);
    } else {
      x = Tensor::empty({n, hidden}, DType::F32, device_);
      for (int64_t i = 0; i < n; ++i) ops::copy(x.narrow(0, i, 1), row(host_ids[(size_t)i]));
    }
  } else if (is_quantized(table.dtype()) && table.is_contiguous()) {
    // Gather the packed rows as bytes, then dequantize them: two launches for any number of tokens.
    const int64_t row_bytes = dtype_row_bytes(table.dtype(), hidden);
    const Tensor bytes = Tensor::wrap(table.data(), {vocab, row_bytes}, DType::U8, device_, table.buffer());
    const Tensor rows = ops::index_select(bytes, ids, 0);  // [n, row_bytes]
    x = ops::dequantize(Tensor::wrap(rows.data(), {n, hidden}, table.dtype(), device_, rows.buffer()));
  } else if (is_quantized(table.dtype())) {
    const auto host_ids = ids.to_vector<int32_t>();
    x = Tensor::empty({n, hidden}, DType::F32, device_);
    for (int64_t i = 0; i < n; ++i) ops::copy(x.narrow(0, i, 1), ops::dequantize(table.narrow(0, host_ids[(size_t)i], 1)));
  } else {
    x = ops::index_select(table, ids, 0);
    if (x.dtype() != DType::F32) x = ops::cast(x, DType::F32);
  }
  if (config_.embedding_scale != 1.0f) x = ops::affine(x, config_.embedding_scale, 0.0);
  return x;
}

void Transformer::set_decode_graphs(bool enabled) {
  const char* env = std::getenv("RBEE_NO_GRAPH");
  const bool env_off = env != nullptr && std::string_view(env) != "" && std::string_view(env) != "0";
  // The op profile (RBEE_OP_PROFILE=1) synchronizes around every op, which a graph capture refuses.
  if (enabled && !env_off && !profile::enabled() && device_.supports_graphs()) {
    if (!graphs_) graphs_ = std::make_unique<DecodeGraphs>(device_, config_.hidden_size);
  } else {
    graphs_.reset();
  }
}

Tensor Transformer::run_layers(KvCache& cache, const Tensor& ints, int64_t n, int64_t b, int64_t width,
                               const Tensor& x0, const std::vector<int64_t>& logit_rows, bool hidden) const {
  const ModelConfig& c = config_;
  StepContext step{c,
                   cache,
                   ints.narrow(0, n, n),
                   ints.narrow(0, 2 * n, n),
                   ints.narrow(0, 3 * n, 3 * b).view({b, 3}),
                   ints.narrow(0, 3 * n + 3 * b, b * width).view({b, width}),
                   inv_freq_global_,
                   inv_freq_local_,
                   rope_ratio_global_,
                   rope_ratio_local_,
                   fused_ops_};
  Tensor x = x0;
  for (int l = 0; l < c.n_layers; ++l) x = arch_.layer(step, weights_.layers[(size_t)l], l, x);
  if (!logit_rows.empty()) {
    x = ops::index_select(x, Tensor::from_vector(logit_rows, {(int64_t)logit_rows.size()}, device_), 0);
  }
  if (hidden) return ops::rms_norm(x, weights_.output_norm, c.norm_eps);
  Tensor logits;
  {
    profile::Scope scope("output_norm+head", x, weights_.output.shape());
    logits = fused_ops_ ? ops::rms_norm_qmatmul(x, weights_.output_norm, c.norm_eps, weights_.output)
                        : ops::qmatmul(ops::rms_norm(x, weights_.output_norm, c.norm_eps), weights_.output);
  }
  if (c.final_softcap > 0) {
    logits = ops::affine(ops::unary(UnaryOp::Tanh, ops::affine(logits, 1.0 / c.final_softcap, 0.0)), c.final_softcap, 0.0);
  }
  return logits;
}

Tensor Transformer::forward(const ForwardBatch& batch, KvCache& cache) {
  const int64_t n = (int64_t)batch.tokens.size();
  RBEE_CHECK(n > 0 && !batch.seqs.empty(), "forward: empty batch");
  const int bs = cache.block_size();
  int max_blocks = 1;
  int64_t total_q = 0;
  bool decode = true;  // every sequence adds one token and wants only its logits
  for (const auto& s : batch.seqs) {
    RBEE_CHECK(s.kv != nullptr && s.q_len >= 0 && s.q_len <= s.ctx_len, "forward: bad sequence chunk (q_len {}, ctx {})",
               s.q_len, s.ctx_len);
    RBEE_CHECK((int64_t)s.kv->blocks().size() * bs >= s.ctx_len,
               "forward: a sequence has {} cache blocks for {} positions", s.kv->blocks().size(), s.ctx_len);
    max_blocks = std::max(max_blocks, (s.ctx_len + bs - 1) / bs);
    total_q += s.q_len;
    decode = decode && s.q_len == 1;
  }
  RBEE_CHECK(total_q == n, "forward: sequences claim {} tokens, batch has {}", total_q, n);
  const int64_t vocab = weights_.token_embd.dim(0);
  for (size_t i = 0; i < batch.tokens.size(); ++i) {
    RBEE_CHECK(batch.tokens[i] >= 0 && batch.tokens[i] < vocab,
               "token id {} at position {} is outside the vocabulary [0, {})", batch.tokens[i], i, vocab);
  }
  const int64_t b = (int64_t)batch.seqs.size();
  // Decode steps get a bucketed table width whether or not they are replayed from a graph, so that the eager
  // and the replayed step launch the same shapes (DecodeGraphs).
  const int64_t width = decode ? DecodeGraphs::table_width(max_blocks) : max_blocks;
  // Packed index inputs: tokens [n] | positions [n] | slots [n] | seq_info [b, 3] | tables [b, width].
  std::vector<int32_t> ints((size_t)(3 * n + 3 * b + b * width), 0);
  int32_t* tokens = ints.data();
  int32_t* positions = tokens + n;
  int32_t* slots = positions + n;
  int32_t* info = slots + n;
  int32_t* tables = info + 3 * b;
  std::vector<int64_t> logit_rows;
  int64_t t = 0;
  for (int64_t s = 0; s < b; ++s) {
    const SequenceChunk& chunk = batch.seqs[(size_t)s];
    const auto& blocks = chunk.kv->blocks();
    info[s * 3] = (int32_t)t;
    info[s * 3 + 1] = chunk.q_len;
    info[s * 3 + 2] = chunk.ctx_len;
    for (int j = 0; j < (chunk.ctx_len + bs - 1) / bs; ++j) tables[s * width + j] = blocks[(size_t)j];
    for (int i = 0; i < chunk.q_len; ++i, ++t) {
      const int pos = chunk.ctx_len - chunk.q_len + i;
      tokens[t] = batch.tokens[(size_t)t];
      positions[t] = pos;
      slots[t] = blocks[(size_t)(pos / bs)] * bs + pos % bs;
      if (chunk.all_logits || i == chunk.q_len - 1) logit_rows.push_back(t);
    }
  }
  if ((int64_t)logit_rows.size() == n) logit_rows.clear();  // every row: no selection
  const bool all_rows = logit_rows.empty();
  if (decode && all_rows && graphs_ && !batch.hidden_states) {
    std::vector<const void*> bound;  // the cache tensors the step writes and reads in place
    for (int l = 0; l < config_.n_layers; ++l) {
      bound.push_back(cache.k(l).data());
      bound.push_back(cache.v(l).data());
    }
    return graphs_->run(
        b, width, ints, bound, [&](const Tensor& ids) { return embed(ids, std::span(ints).subspan(0, (size_t)n)); },
        [&](const Tensor& dev_ints, const Tensor& x) {
          return run_layers(cache, dev_ints, n, b, width, x, logit_rows, false);
        });
  }
  const Tensor dev_ints = Tensor::from_vector(ints, {(int64_t)ints.size()}, device_);
  return run_layers(cache, dev_ints, n, b, width,
                    embed(dev_ints.narrow(0, 0, n), std::span(ints).subspan(0, (size_t)n)), logit_rows,
                    batch.hidden_states);
}

}  // namespace rbee::llm
