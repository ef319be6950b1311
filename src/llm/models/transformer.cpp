#include "llm/models/transformer.h"

#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <string_view>

#include "rbee/backend/device.h"
#include "rbee/core/env.h"
#include "rbee/core/log.h"
#include "rbee/core/profile.h"
#include "rbee/core/step_times.h"
#include "rbee/ops.h"
#include "rbee/backend/column_gather.h"
#include "rbee/backend/communicator.h"

namespace rbee::llm {

namespace {

// The type of the layers' matmul weights (blk.0.ffn_down.weight), or nothing for a file without that tensor.
std::optional<DType> layer_weight_type(const TensorLookup& lookup) {
  const Tensor t = lookup("blk.0.ffn_down.weight");
  if (!t.defined()) return std::nullopt;
  return t.dtype();
}

// The fused decode step where it was measured to win (docs/perf-notes/gpu-llm.md, "Decode step"): every type.
bool fused_ops_by_default(std::optional<DType> weight_type) {
  (void)weight_type;
  return true;
}

// Whether a step runs the fused decoder ops (StepContext::fused_ops) and stacks gate/up, from the type of the
// layers' matmul weights. RBEE_DECODE_FUSION=0: the unfused ops one by one and no gate/up stacking; =1: fused for
// every weight type (both for comparisons); unset: fused_ops_by_default(type).
bool fused_ops_for(std::optional<DType> weight_type) {
  if (const std::optional<bool> forced = env::flag("RBEE_DECODE_FUSION")) return *forced;
  return fused_ops_by_default(weight_type);
}

// StepContext::fold_residual: on unless RBEE_TP_FOLD_RESIDUAL=0 (the add after the all-reduce, for comparisons).
bool tp_fold_residual() {
  static const bool on = env::flag_or("RBEE_TP_FOLD_RESIDUAL", true);
  return on;
}

// StepContext::residual_in_reduce: on unless RBEE_TP_RESIDUAL_IN_REDUCE=0 (rank 0's projection adds the residual, as
// before, for comparisons).
bool tp_residual_in_reduce() {
  static const bool on = env::flag_or("RBEE_TP_RESIDUAL_IN_REDUCE", true);
  return on;
}

// StepContext::tp_overlap: RBEE_TP_OVERLAP=1 (off by default): a tensor split's decode steps overlap the first half of
// each row-parallel product's all-reduce with the second half's product. Read at every step (one getenv), so that a
// test compares both schedules in one process; a recorded decode graph keeps the schedule it was captured with.
bool tp_overlap() { return env::flag_or("RBEE_TP_OVERLAP", false); }
// StepContext::tp_overlap_first_percent: RBEE_TP_OVERLAP_SPLIT (10 to 90; default 50), read like tp_overlap.
int tp_overlap_first_percent() { return (int)env::integer_or("RBEE_TP_OVERLAP_SPLIT", 50, 10, 90); }

// StepContext::reduce_norm: RBEE_TP_REDUCE_NORM=1 (off by default: no gain measured at 64 streams on two H200s,
// docs/perf-notes/multi-device.md). Read at every step, like tp_overlap.
bool tp_reduce_norm() { return env::flag_or("RBEE_TP_REDUCE_NORM", false); }

// A tensor split's lean decode step (on unless RBEE_TP_LEAN_STEP=0, the fifth session's step, for comparisons): a rank
// without the embedding zeroes its input slot inside its decode graph (no zeros and copy launched from the host
// each step), and the graphs of ranks > 0 hand back their output without the copy (only rank 0's is read).
bool tp_lean_step() {
  static const bool on = env::flag_or("RBEE_TP_LEAN_STEP", true);
  return on;
}

// How long a tensor split's rank threads spin before they sleep (RankThreads): RBEE_TP_SPIN_US when set (0: always
// sleep on a condition variable, as before), else 20 ms where every rank is a GPU (a step only launches there, and
// 20 ms covers the gap between two decode steps) and 0 where a rank is the host CPU (its cores compute).
int64_t tp_spin_us(const std::vector<Device*>& devices) {
  if (const std::optional<int64_t> us = env::integer("RBEE_TP_SPIN_US", 0)) return *us;
  for (const Device* d : devices) {
    if (d->host_accessible()) return 0;
  }
  return 20000;
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

Transformer::Transformer(ModelConfig config, std::unique_ptr<Tokenizer> tokenizer, const Placement& placement,
                         const TensorLookup& lookup, const std::function<void(float)>& progress,
                         std::shared_ptr<const void> file_keepalive)
    : config_(std::move(config)),
      tokenizer_(std::move(tokenizer)),
      placement_(placement),
      arch_(architecture(config_.arch)),
      fused_ops_(fused_ops_for(layer_weight_type(lookup))),
      file_keepalive_(std::move(file_keepalive)) {
  const ModelConfig& c = config_;
  placement_.validate(c);
  const int n_ranks = placement_.ranks();
  int total = 0;
  for (int r = 0; r < n_ranks; ++r) total += 3 + placement_.end_layer(r, c.n_layers) - placement_.first_layer(r);
  int done = 0;
  auto report = [&] {
    if (progress) progress((float)++done / (float)total);
  };
  rope_freqs_ = lookup("rope_freqs.weight");
  ranks_.resize((size_t)n_ranks);
  for (int r = 0; r < n_ranks; ++r) {
    Rank& k = ranks_[(size_t)r];
    k.device = placement_.devices[(size_t)r];
    k.index = r;
    k.first_layer = placement_.first_layer(r);
    k.end_layer = placement_.end_layer(r, c.n_layers);
    k.shard = rank_shard(placement_, c, r);
    k.config = shard_config(c, k.shard);
    k.embeds = placement_.holds_embedding(r);
    k.heads = placement_.holds_head(r) || placement_.splits_head();
    RBEE_WITH_CONTEXT(fmt::format("placing weights on {}", k.device->id()), { load_rank(k, lookup, report); });
    // Freed staging blocks (norm conversions, host-side cuts) would otherwise stay in the device's cache.
    k.device->empty_cache();
  }
  const float local_theta = c.rope_theta_local > 0 ? c.rope_theta_local : c.rope_theta;
  // llama.cpp's angles (RopeParams::freq_ratio) where a table carries no scaling: its ratio powf(base, -2 / dim).
  const bool scale_local = c.rope_theta_local <= 0;
  const bool unscaled = c.rope_scaling.kind == ops::RopeScaling::Kind::None && !rope_freqs_.defined();
  auto ratio = [&](float base) { return std::pow(base, -2.0f / (float)c.rotary_dim); };
  if (c.rope_llamacpp_angles && unscaled) rope_ratio_global_ = ratio(c.rope_theta);
  if (c.rope_llamacpp_angles && (unscaled || !scale_local)) rope_ratio_local_ = ratio(local_theta);
  if (placement_.split == SplitMode::Tensor && n_ranks > 1) {
    std::vector<Device*> devices = placement_.devices;
    std::string why;
    Backend* backend = Registry::global().find(devices[0]->info().backend);
    bool same_backend = true;
    for (Device* d : devices) same_backend = same_backend && d->info().backend == devices[0]->info().backend;
    if (same_backend && backend) comm_ = backend->make_communicator(devices, &why);
    else why = "the devices belong to different backends";
    if (!comm_) {
      comm_ = make_host_communicator(devices);
      log::info("tensor split: collectives through the host ({})", why);
    } else {
      log::info("tensor split: collectives through {}", comm_->name());
    }
    threads_ = std::make_unique<RankThreads>(n_ranks, tp_spin_us(devices));
    if (placement_.splits_head()) {
      for (int r = 0; r < n_ranks; ++r) head_bounds_.push_back(ranks_[(size_t)r].head_first);
      head_bounds_.push_back(ranks_.back().head_first + ranks_.back().output.dim(0));
    }
  }
}

Transformer::~Transformer() {
  // Graphs first (they hold device memory and may record collectives), then the ranks' threads, then the group.
  for (Rank& k : ranks_) k.graphs.reset();
  threads_.reset();
  comm_.reset();
}

Device& Transformer::device() const {
  for (const Rank& k : ranks_) {
    if (k.heads) return *k.device;
  }
  return *ranks_.back().device;
}

int64_t Transformer::weight_bytes() const {
  int64_t total = 0;
  for (const Rank& k : ranks_) total += k.weight_bytes;
  return total;
}

int64_t Transformer::weight_bytes_on(const Device& device) const {
  int64_t total = 0;
  for (const Rank& k : ranks_) {
    if (k.device == &device) total += k.weight_bytes;
  }
  return total;
}

KvLayout Transformer::kv_layout() const {
  KvLayout layout;
  layout.head_dim = config_.head_dim;
  layout.layers.resize((size_t)config_.n_layers);
  for (const Rank& k : ranks_) {
    for (int l = k.first_layer; l < k.end_layer; ++l) {
      layout.layers[(size_t)l].push_back({k.device, k.shard.kv_heads});
    }
  }
  return layout;
}

Tensor Transformer::place(Rank& rank, const Tensor& host, const std::string& name, bool is_norm) {
  if (!host.defined()) return host;
  const ModelConfig& c = config_;
  Tensor t = host;
  if (t.rank() == 1) {
    RBEE_CHECK_CODE(!is_quantized(t.dtype()), ErrorCode::Io, "tensor {} is 1-D but quantized ({})", name,
                    dtype_name(t.dtype()));
    t = t.to(DType::F32);
    if (is_norm && c.norm_weight_plus_one) t = ops::affine(t, 1.0, 1.0);
  }
  Tensor placed;
  if (&t.device() == rank.device) {
    placed = t;  // the host CPU itself: read in place from the mapped file (or the converted host copy)
  } else {
    const Tensor src = t.contiguous();
    placed = Tensor::empty_exact(src.shape(), src.dtype(), *rank.device);
    if (src.nbytes() > 0) rank.device->copy_from_host(placed.data(), src.data(), (size_t)src.nbytes());
  }
  rank.weight_bytes += placed.nbytes();
  return placed;
}

bool Transformer::fusable_qkv(const Tensor& q, const Tensor& k, const Tensor& v) {
  for (const Tensor* t : {&q, &k, &v}) {
    if (!t->defined() || t->rank() != 2 || t->dtype() != q.dtype() || t->dim(1) != q.dim(1)) return false;
  }
  return true;
}

void Transformer::load_rank(Rank& k, const TensorLookup& lookup, const std::function<void()>& report) {
  const ModelConfig& c = config_;
  auto need_host = [&](const std::string& name) {
    Tensor t = lookup(name);
    RBEE_CHECK_CODE(t.defined(), ErrorCode::Io, "model file has no tensor '{}' (architecture {})", name, c.arch);
    return t;
  };
  if (k.embeds || k.heads) {
    const Tensor embd = need_host("token_embd.weight");
    RBEE_CHECK_CODE(embd.rank() == 2 && embd.dim(1) == c.hidden_size, ErrorCode::Io,
                    "token_embd.weight has shape {}, expected [vocab, {}]", embd.shape().to_string(), c.hidden_size);
    const Tensor out = c.tie_embeddings ? Tensor() : lookup("output.weight");
    const Tensor head = out.defined() ? out : embd;
    const auto [first, rows] = placement_.head_rows(k.index, head.dim(0));
    const bool whole_head = k.heads && rows == head.dim(0);
    if (k.embeds || (whole_head && !out.defined())) k.token_embd = place(k, embd, "token_embd.weight", false);
    if (k.heads) {
      RBEE_CHECK_CODE(head.rank() == 2 && head.dim(1) == c.hidden_size && rows > 0, ErrorCode::Io,
                      "{} has shape {}, expected [vocab, {}] with rows for {} devices",
                      out.defined() ? "output.weight" : "token_embd.weight", head.shape().to_string(), c.hidden_size,
                      placement_.ranks());
      k.head_first = first;
      k.head_vocab = head.dim(0);
      k.output_norm = place(k, need_host("output_norm.weight"), "output_norm.weight", true);
      if (whole_head) {
        k.output = out.defined() ? place(k, out, "output.weight", false) : k.token_embd;
      } else if (!out.defined() && k.token_embd.defined()) {
        k.output = k.token_embd.narrow(0, first, rows);  // tied: rows of the table this rank already holds
      } else {
        // Whole rows of any block type (blocks never straddle rows).
        k.output = place(k, head.narrow(0, first, rows), out.defined() ? "output.weight" : "token_embd.weight", false);
      }
    }
  }
  report();
  k.layers.resize((size_t)(k.end_layer - k.first_layer));
  const bool gpu = !k.device->host_accessible();
  for (int l = k.first_layer; l < k.end_layer; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    LayerWeights& w = k.layers[(size_t)(l - k.first_layer)];
    try {
      std::map<std::string, Tensor> host;
      for (const LayerTensorSpec& spec : layer_tensor_specs(c)) {
        Tensor t = spec.required ? need_host(p + spec.suffix) : lookup(p + spec.suffix);
        if (t.defined()) host[spec.suffix] = cut_tensor(spec.suffix, t, k.shard, c);
      }
      // GPUs only: the CPU keeps its tested per-projection path (and gains nothing from fewer launches).
      const bool fuse = gpu && !c.fused_qkv && !host.count("attn_q.bias") && !host.count("attn_k.bias") &&
                        !host.count("attn_v.bias") &&
                        fusable_qkv(host["attn_q.weight"], host["attn_k.weight"], host["attn_v.weight"]);
      if (fuse) {
        // Rows of one weight matrix are independent (blocks never straddle rows), so stacking them byte-wise gives
        // the [(Hq + 2 Hkv) * D, hidden] matrix of a fused-qkv model.
        const Tensor* parts[] = {&host["attn_q.weight"], &host["attn_k.weight"], &host["attn_v.weight"]};
        int64_t rows = 0;
        for (const Tensor* t : parts) rows += t->dim(0);
        w.attn_qkv = Tensor::empty_exact({rows, parts[0]->dim(1)}, parts[0]->dtype(), *k.device);
        int64_t offset = 0;
        for (const Tensor* t : parts) {
          const Tensor src = t->contiguous();
          k.device->copy_from_host(static_cast<uint8_t*>(w.attn_qkv.data()) + offset, src.data(), (size_t)src.nbytes());
          offset += src.nbytes();
        }
        k.weight_bytes += w.attn_qkv.nbytes();
        for (const char* s : {"attn_q.weight", "attn_k.weight", "attn_v.weight"}) host.erase(s);
      }
      // GPUs: gate and up (same type and shape) stacked into one [2I, hidden] ffn_up, gate rows first (the
      // fused-gate/up layout: mlp_block splits it at I), so a step runs one matvec for both and swiglu_qmatmul
      // after it. Per rank after the tensor-split cut, so each rank's halves stay its own gate / up rows.
      const bool stack_gate_up = gpu && fused_ops_ && !c.fused_gate_up && host.count("ffn_gate.weight") &&
                                 host.count("ffn_up.weight") &&
                                 fusable_gate_up(host["ffn_gate.weight"], host["ffn_up.weight"]);
      if (stack_gate_up) {
        const Tensor gate = host["ffn_gate.weight"].contiguous();
        const Tensor up = host["ffn_up.weight"].contiguous();
        w.ffn_up = Tensor::empty_exact({gate.dim(0) + up.dim(0), gate.dim(1)}, gate.dtype(), *k.device);
        k.device->copy_from_host(w.ffn_up.data(), gate.data(), (size_t)gate.nbytes());
        k.device->copy_from_host(static_cast<uint8_t*>(w.ffn_up.data()) + gate.nbytes(), up.data(),
                                 (size_t)up.nbytes());
        k.weight_bytes += w.ffn_up.nbytes();
        for (const char* s : {"ffn_gate.weight", "ffn_up.weight"}) host.erase(s);
      }
      auto put = [&](const char* suffix, Tensor& dst, bool is_norm) {
        const auto it = host.find(suffix);
        if (it != host.end()) dst = place(k, it->second, p + suffix, is_norm);
      };
      put("attn_norm.weight", w.attn_norm, true);
      put("attn_qkv.weight", w.attn_qkv, false);
      put("attn_q.weight", w.attn_q, false);
      put("attn_k.weight", w.attn_k, false);
      put("attn_v.weight", w.attn_v, false);
      put("attn_q.bias", w.attn_q_bias, false);
      put("attn_k.bias", w.attn_k_bias, false);
      put("attn_v.bias", w.attn_v_bias, false);
      put("attn_output.weight", w.attn_output, false);
      put("attn_q_norm.weight", w.attn_q_norm, true);
      put("attn_k_norm.weight", w.attn_k_norm, true);
      put("ffn_norm.weight", w.ffn_norm, true);
      put("post_attention_norm.weight", w.post_attention_norm, true);
      put("post_ffw_norm.weight", w.post_ffw_norm, true);
      put("ffn_gate.weight", w.ffn_gate, false);
      put("ffn_up.weight", w.ffn_up, false);
      put("ffn_down.weight", w.ffn_down, false);
    } catch (Error& e) {
      e.add_context(fmt::format("loading layer {}", l));
      throw;
    }
    report();
  }
  const float local_theta = c.rope_theta_local > 0 ? c.rope_theta_local : c.rope_theta;
  // Gemma 3 scales only its global layers' frequencies; everyone else scales every layer.
  const bool scale_local = c.rope_theta_local <= 0;
  const auto global = inv_freq_table(c, c.rope_theta, true, rope_freqs_);
  const auto local = inv_freq_table(c, local_theta, scale_local, rope_freqs_);
  k.inv_freq_global = Tensor::from_vector(global, {(int64_t)global.size()}, *k.device);
  k.inv_freq_local = Tensor::from_vector(local, {(int64_t)local.size()}, *k.device);
  report();
  report();
}

bool Transformer::fusable_gate_up(const Tensor& gate, const Tensor& up) {
  return gate.rank() == 2 && up.rank() == 2 && gate.dtype() == up.dtype() && gate.dim(0) == up.dim(0) &&
         gate.dim(1) == up.dim(1);
}

Tensor Transformer::embed(const Rank& rank, const Tensor& ids, std::span<const int32_t> host_ids) const {
  const Tensor& table = rank.token_embd;
  Device& device = *rank.device;
  const int64_t n = ids.dim(0), vocab = table.dim(0), hidden = config_.hidden_size;
  // Embedding row `id` as a new F32 [1, hidden] tensor: never a view of the table (the step writes into the residual
  // stream in place, e.g. a tensor split's all-reduce, and an F32 table may be a read-only mapping of the file).
  auto row = [&](int32_t id) {
    const Tensor r = table.narrow(0, id, 1);
    return is_quantized(table.dtype()) ? ops::dequantize(r) : r.dtype() == DType::F32 ? r.clone() : ops::cast(r, DType::F32);
  };
  Tensor x;
  if ((int64_t)host_ids.size() == n && n <= kRowwiseEmbedTokens) {
    // Decode: each row addressed from the host's ids (already checked), so nothing waits for the device (the
    // index ops below check device ids with a read-back, which would stall the host until the previous step ends).
    if (n == 1) {
      x = row(host_ids[0]);
    } else {
      x = Tensor::empty({n, hidden}, DType::F32, device);
      for (int64_t i = 0; i < n; ++i) ops::copy(x.narrow(0, i, 1), row(host_ids[(size_t)i]));
    }
  } else if (is_quantized(table.dtype()) && table.is_contiguous()) {
    // Gather the packed rows as bytes, then dequantize them: two launches for any number of tokens.
    const int64_t row_bytes = dtype_row_bytes(table.dtype(), hidden);
    const Tensor bytes = Tensor::wrap(table.data(), {vocab, row_bytes}, DType::U8, device, table.buffer());
    const Tensor rows = ops::index_select(bytes, ids, 0);  // [n, row_bytes]
    x = ops::dequantize(Tensor::wrap(rows.data(), {n, hidden}, table.dtype(), device, rows.buffer()));
  } else if (is_quantized(table.dtype())) {
    const auto ids_host = ids.to_vector<int32_t>();
    x = Tensor::empty({n, hidden}, DType::F32, device);
    for (int64_t i = 0; i < n; ++i) ops::copy(x.narrow(0, i, 1), ops::dequantize(table.narrow(0, ids_host[(size_t)i], 1)));
  } else {
    x = ops::index_select(table, ids, 0);
    if (x.dtype() != DType::F32) x = ops::cast(x, DType::F32);
  }
  if (config_.embedding_scale != 1.0f) x = ops::affine(x, config_.embedding_scale, 0.0);
  return x;
}

void Transformer::set_decode_graphs(bool enabled) {
  const bool env_off = env::flag_or("RBEE_NO_GRAPH", false);
  // Collectives that cannot be recorded (the host communicator) keep a tensor split eager. The op profile
  // (RBEE_OP_PROFILE=1) synchronizes around every op, which a graph capture refuses.
  const bool comm_ok = !comm_ || comm_->capturable();
  for (Rank& k : ranks_) {
    if (enabled && !env_off && comm_ok && !profile::enabled() && k.device->supports_graphs()) {
      if (!k.graphs) k.graphs = std::make_unique<DecodeGraphs>(*k.device, config_.hidden_size);
    } else {
      k.graphs.reset();
    }
  }
}

bool Transformer::decode_graphs() const {
  for (const Rank& k : ranks_) {
    if (k.graphs) return true;
  }
  return false;
}

uint64_t Transformer::decode_graph_replays() const {
  // A step replays one graph per graphed rank: count steps, not graphs.
  uint64_t most = 0;
  for (const Rank& k : ranks_) most = std::max<uint64_t>(most, k.graphs ? k.graphs->replays() : 0);
  return most;
}

Tensor Transformer::run_rank(const Rank& k, KvCache& cache, const Tensor& ints, int64_t n, int64_t b, int64_t width,
                             const Tensor& x0, const std::vector<int64_t>& logit_rows, bool hidden) const {
  const ModelConfig& c = k.config;
  StepContext step{c,
                   cache,
                   ints.narrow(0, n, n),
                   ints.narrow(0, 2 * n, n),
                   ints.narrow(0, 3 * n, 3 * b).view({b, 3}),
                   ints.narrow(0, 3 * n + 3 * b, b * width).view({b, width}),
                   k.inv_freq_global,
                   k.inv_freq_local,
                   rope_ratio_global_,
                   rope_ratio_local_,
                   fused_ops_};
  if (comm_) {
    step.part = k.index;
    step.comm = comm_.get();
    step.rank = k.index;
    step.fold_residual = tp_fold_residual();
    step.residual_in_reduce = tp_residual_in_reduce();
    step.tp_overlap = tp_overlap() && n == b;  // one row per sequence: a decode step
    if (step.tp_overlap) step.tp_overlap_first_percent = tp_overlap_first_percent();
    step.reduce_norm = tp_reduce_norm();
  }
  Tensor x = x0;
  for (int l = k.first_layer; l < k.end_layer; ++l) {
    if (comm_) step.next_layer = l + 1 < k.end_layer ? &k.layers[(size_t)(l + 1 - k.first_layer)] : nullptr;
    x = arch_.layer(step, k.layers[(size_t)(l - k.first_layer)], l, x);
  }
  if (!k.heads) return x;
  if (!logit_rows.empty()) {
    x = ops::index_select(x, Tensor::from_vector(logit_rows, {(int64_t)logit_rows.size()}, *k.device), 0);
  }
  if (hidden) return ops::rms_norm(x, k.output_norm, c.norm_eps);
  Tensor logits;
  {
    profile::Scope scope("output_norm+head", x, k.output.shape());
    logits = fused_ops_ ? ops::rms_norm_qmatmul(x, k.output_norm, c.norm_eps, k.output)
                        : ops::qmatmul(ops::rms_norm(x, k.output_norm, c.norm_eps), k.output);
  }
  if (k.output.dim(0) != k.head_vocab) {
    // A head cut by vocabulary rows (Placement::splits_head): this rank's logits into its columns of zeros, summed
    // over the ranks, so every rank (rank 0's is returned) holds every logit as computed by its rank, exactly.
    // all_gather_columns sends each rank's own columns (GPUs, large messages) or zeroes the others and sums.
    profile::Scope scope("gather logits", logits);
    Tensor all = Tensor::empty({logits.dim(0), k.head_vocab}, DType::F32, *k.device);
    ops::copy(all.narrow(1, k.head_first, k.output.dim(0)), logits);
    all_gather_columns(*comm_, k.index, all, head_bounds_);
    logits = all;
  }
  if (c.final_softcap > 0) {
    logits = ops::affine(ops::unary(UnaryOp::Tanh, ops::affine(logits, 1.0 / c.final_softcap, 0.0)), c.final_softcap, 0.0);
  }
  return logits;
}

std::vector<const void*> Transformer::bound_cache(const Rank& k, const KvCache& cache) const {
  std::vector<const void*> bound;
  const int part = comm_ ? k.index : 0;
  for (int l = k.first_layer; l < k.end_layer; ++l) {
    bound.push_back(cache.k(l, part).data());
    bound.push_back(cache.v(l, part).data());
  }
  return bound;
}

Tensor Transformer::forward_layer_split(KvCache& cache, const std::vector<int32_t>& ints, int64_t n, int64_t b,
                                        int64_t width, bool graphed, const std::vector<int64_t>& logit_rows, bool hidden) {
  Tensor x;  // the previous stage's hidden states (or, after the last stage, the logits)
  const std::span<const int32_t> host_ids = std::span(ints).subspan(0, (size_t)n);  // the step's token ids
  for (Rank& k : ranks_) {
    if (graphed && k.graphs) {
      x = k.graphs->run(
          b, width, ints, bound_cache(k, cache),
          [&](const Tensor& ids) { return k.embeds ? embed(k, ids, host_ids) : x.to(*k.device); },
          [&](const Tensor& dev_ints, const Tensor& xin) {
            return run_rank(k, cache, dev_ints, n, b, width, xin, logit_rows, hidden);
          });
      continue;
    }
    const Tensor dev_ints = Tensor::from_vector(ints, {(int64_t)ints.size()}, *k.device);
    const Tensor xin = k.embeds ? embed(k, dev_ints.narrow(0, 0, n), host_ids) : x.to(*k.device);
    x = run_rank(k, cache, dev_ints, n, b, width, xin, logit_rows, hidden);
  }
  return x;
}

Tensor Transformer::forward_tensor_split(KvCache& cache, const std::vector<int32_t>& ints, int64_t n, int64_t b,
                                         int64_t width, bool graphed, const std::vector<int64_t>& logit_rows, bool hidden) {
  std::vector<Tensor> out(ranks_.size());
  const int64_t hidden_size = config_.hidden_size;
  const std::span<const int32_t> host_ids = std::span(ints).subspan(0, (size_t)n);  // the step's token ids
  // Rank 0 embeds; the others start from zeros, and the first all-reduce gives every rank the embeddings (x + 0
  // is x exactly).
  // The lean step (tp_lean_step), where a rank replays decode graphs: a rank without the embedding zeroes its
  // input slot inside its graph.
  auto lean = [&](const Rank& k) { return graphed && k.graphs && tp_lean_step(); };
  auto start = [&](const Rank& k, const Tensor& ids) {
    if (!k.embeds && lean(k)) return Tensor();  // zeroed by body()
    return k.embeds ? embed(k, ids, host_ids) : ops::zeros({ids.dim(0), hidden_size}, DType::F32, *k.device);
  };
  auto body = [&](const Rank& k, const Tensor& dev_ints, const Tensor& xin) {
    if (!k.embeds && lean(k)) ops::const_set(xin, 0.0);
    comm_->all_reduce_sum(k.index, xin);
    return run_rank(k, cache, dev_ints, n, b, width, xin, logit_rows, hidden);
  };
  step_times::Phase whole(graphed ? "forward: tensor split (decode step)" : "forward: tensor split (other step)");
  threads_->run(
      [&](int r) {
        Rank& k = ranks_[(size_t)r];
        // Each rank's host part: its index inputs' upload, its embeddings (or zeros), the graph launch.
        step_times::Phase phase(!graphed ? "rank part (other step)"
                                : r == 0 ? "rank 0 part (decode step)"
                                         : "rank 1+ part (decode step)");
        if (graphed && k.graphs) {
          // Only rank 0's output is returned: the others' need no copy in the lean step.
          out[(size_t)r] = k.graphs->run(
              b, width, ints, bound_cache(k, cache), [&](const Tensor& ids) { return start(k, ids); },
              [&](const Tensor& dev_ints, const Tensor& xin) { return body(k, dev_ints, xin); }, r == 0 || !lean(k));
          return;
        }
        const Tensor dev_ints = Tensor::from_vector(ints, {(int64_t)ints.size()}, *k.device);
        out[(size_t)r] = body(k, dev_ints, start(k, dev_ints.narrow(0, 0, n)).contiguous());
      },
      [this](const std::string& why) { comm_->abort(why); });
  return out[0];
}

Tensor Transformer::forward(const ForwardBatch& batch, KvCache& cache) {
  const double t0 = step_times::enabled() ? step_times::now() : 0.0;
  const int64_t n = (int64_t)batch.tokens.size();
  RBEE_CHECK(n > 0 && !batch.seqs.empty(), "forward: empty batch");
  RBEE_CHECK(cache.layout() == kv_layout(),
             "forward: the KV cache was made for another placement than this model's ({}); make it with "
             "KvCache(model.kv_layout(), ...)",
             placement_.describe());
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
  const int64_t vocab = config_.vocab_size;
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
  const bool graphed = decode && logit_rows.empty() && !batch.hidden_states;
  if (step_times::enabled()) {
    step_times::add(graphed ? "forward: checks, index inputs (decode step)" : "forward: checks, index inputs (other step)",
                    step_times::now() - t0);
  }
  if (comm_) return forward_tensor_split(cache, ints, n, b, width, graphed, logit_rows, batch.hidden_states);
  step_times::Phase phase(graphed ? "forward: one device / layer split (decode step)"
                                  : "forward: one device / layer split (other step)");
  return forward_layer_split(cache, ints, n, b, width, graphed, logit_rows, batch.hidden_states);
}

}  // namespace rbee::llm
