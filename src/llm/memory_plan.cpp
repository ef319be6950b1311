#include "rbee/llm/memory_plan.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>

#include "llm/models/decode_graph.h"
#include "llm/models/model_source.h"
#include "llm/models/weight_layout.h"
#include "rbee/backend/caching_allocator.h"
#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/llm/kv_cache.h"
#include "rbee/llm/model.h"

namespace rbee::llm {

namespace {

// Run-time libraries' device memory outside rbee's allocator on a GPU: vendor BLAS workspaces and loaded kernel
// images (the context itself is already out of the free figure), and a collective library's buffers. Estimates,
// not yet measured on a GPU (rbee plan --check there prints the device's real use beside the plan); the plan
// keeps them apart so that the check against the allocator stays exact.
constexpr int64_t kGpuRuntimeReserve = 256ll << 20;
constexpr int64_t kCollectiveReserve = 256ll << 20;

int64_t rounded(int64_t bytes) { return bytes <= 0 ? 0 : (int64_t)CachingAllocator::round_size((size_t)bytes); }
int64_t exact(int64_t bytes) { return (int64_t)CachingAllocator::exact_size((size_t)std::max<int64_t>(bytes, 1)); }
int64_t tensor_bytes(const Shape& shape, DType dtype) {
  const int64_t cols = shape.rank() > 0 ? shape[shape.rank() - 1] : 1;
  return shape.numel() == 0 ? 0 : dtype_row_bytes(dtype, cols) * (shape.numel() / cols);
}

// What a device can take: its free memory, or what the injected allocator limit leaves, whichever is less.
int64_t device_budget(Device& device) {
  int64_t free = device.info().memory_free;
  const AllocatorStats s = device.memory_stats();
  if (s.limit_bytes >= 0) free = std::min(free, std::max<int64_t>(0, s.limit_bytes - s.in_use_bytes - s.cached_bytes));
  return free;
}

// The caching allocator keeps freed blocks per size class, so the memory a step leaves held is, per class, the
// most blocks of that class alive at one time. Each phase lists the tensors alive at one moment of the step.
class SizeClasses {
 public:
  void phase(const std::vector<int64_t>& sizes) {
    std::map<int64_t, int> count;
    for (int64_t b : sizes) {
      if (b > 0) ++count[rounded(b)];
    }
    for (const auto& [size, n] : count) peak_[size] = std::max(peak_[size], n);
  }
  int64_t total() const {
    int64_t t = 0;
    for (const auto& [size, n] : peak_) t += size * n;
    return t;
  }

 private:
  std::map<int64_t, int> peak_;
};

struct StepShape {
  int64_t n = 1, rows = 1, seqs = 1, width = 1;  // tokens, logit rows, sequences, block-table width
};

// The temporaries one forward step leaves held on a rank's device (eager; a graph holds the same set).
// head_rows: the rank's rows of the head (Placement::head_rows; 0: no head; fewer than the vocabulary: a cut head,
// whose logits are gathered into a whole [rows, vocab] tensor).
int64_t step_activations(const ModelConfig& c, const RankShard& shard, const StepShape& s, bool embeds,
                         int64_t head_rows, bool layers, DType embd_dtype, DType weight_dtype, bool gpu,
                         int compute_units) {
  const int64_t n = s.n, h = c.hidden_size, d = c.head_dim, hq = shard.q_heads, hkv = shard.kv_heads;
  const int64_t ffn = shard.ffn;
  const int64_t nh = n * h * 4, nq = n * hq * d * 4, nkv = n * hkv * d * 4, ni = n * ffn * 4;
  const int64_t ints = (3 * n + 3 * s.seqs + s.seqs * s.width) * 4;
  // GPU matrix products stage their input: quantized weights quantize it (int8 values, block scales and sums),
  // F16/BF16 weights cast it to the weight type; CPU kernels keep their scratch outside the allocator.
  auto staged = [&](int64_t rows, int64_t k, DType w) -> int64_t {
    if (!gpu) return 0;
    if (is_quantized(w)) {
      const auto a = [](int64_t b) { return (b + 255) / 256 * 256; };
      return a(rows * k) + a(rows * k / 32 * 4) + a(rows * k / 16 * 4);
    }
    return w == DType::F32 ? 0 : rows * k * 2;
  };
  SizeClasses classes;
  if (embeds) {
    // Gathered rows (packed bytes of a quantized table, or F16 / BF16 rows cast afterwards), the embeddings, and
    // their scaled copy (Gemma).
    const int64_t gathered = is_quantized(embd_dtype) ? n * dtype_row_bytes(embd_dtype, h)
                             : embd_dtype != DType::F32 ? n * h * dtype_type_size(embd_dtype)
                                                        : 0;
    classes.phase({ints, gathered, nh});
    if (c.embedding_scale != 1.0f) classes.phase({ints, nh, nh});
  } else {
    classes.phase({ints, nh});  // the previous stage's hidden states (or a tensor-split rank's zeros)
  }
  if (layers) {
    // Attention (blocks.cpp): x and h = norm(x) live through the block. While q rotates: the projections (one
    // fused qkv on GPUs) and the rotated q; at the output projection: v, rotated q and k, the attention output
    // and its projection, plus that projection's staged input and (GPU) the split-KV partial results.
    const bool fused = gpu && !c.fused_qkv && !c.qkv_bias;
    const int64_t qkv = n * (hq + 2 * hkv) * d * 4;
    std::vector<int64_t> rotate = {ints, nh, nh, nq, staged(n, h, weight_dtype)};
    std::vector<int64_t> project = {ints, nh, nh, nq, nkv, nq, nh, staged(n, hq * d, weight_dtype)};
    if (fused || c.fused_qkv) {
      rotate.push_back(qkv);
      project.push_back(qkv);
    } else {
      rotate.insert(rotate.end(), {nq, nkv, nkv});
      project.push_back(nkv);  // v
    }
    if (c.qk_norm) rotate.insert(rotate.end(), {nq, nkv});
    int64_t splits = 1;
    if (gpu && n < 64) splits = std::clamp<int64_t>(4 * std::max(compute_units, 1) / std::max<int64_t>(n * hkv, 1), 1, 64);
    if (splits > 1) project.insert(project.end(), {splits * nq, splits * n * hq * 2 * 4});
    classes.phase(rotate);
    classes.phase(project);
    // The residual add and norm: x, h, the attention output (normed too with sandwich norms), x1 and h2.
    classes.phase({ints, nh, nh, nh, nh, nh, c.post_norms ? nh : 0});
    // The MLP: gate, up and the activation while down runs (Phi-3: the fused gate|up and its two halves; GELU:
    // its own temporary), then down's output and the sum (and the post-norm's output).
    std::vector<int64_t> mlp = {ints, nh, nh, nh, nh, ni, ni, ni, nh, staged(n, ffn, weight_dtype)};
    if (c.fused_gate_up) mlp.push_back(2 * ni);
    if (c.activation != Activation::Silu) mlp.push_back(ni);
    classes.phase(mlp);
    classes.phase({ints, nh, nh, nh, nh, nh, nh, c.post_norms ? nh : 0, staged(n, h, weight_dtype)});
  }
  if (head_rows > 0) {
    const int64_t r = s.rows, rv = r * c.vocab_size * 4, rp = r * head_rows * 4;
    classes.phase({ints, nh, r < n ? r * h * 4 : 0, r * h * 4, rp, staged(r, h, weight_dtype),
                   head_rows < c.vocab_size ? rv : 0, c.final_softcap > 0 ? rv : 0, c.final_softcap > 0 ? rv : 0});
  }
  return classes.total();
}

const ModelDescription::Weight* find_weight(const ModelDescription& d, const std::string& name) {
  const auto it = d.weights.find(name);
  return it == d.weights.end() ? nullptr : &it->second;
}

// The plan of one placement at one context size.
struct Evaluation {
  std::vector<DevicePlan> devices;
  std::vector<int64_t> layer_bytes;
  int64_t other_bytes = 0;
  bool fits = true;
};

class Planner {
 public:
  Planner(const ModelDescription& desc, const PlanRequest& req) : d_(desc), c_(desc.config), req_(req) {
    host_ = &Registry::global().cpu();
    for (Device* dev : req.devices) {
      RBEE_CHECK(dev != nullptr, "plan: null device");
      budget_[dev] = device_budget(*dev);
    }
    budget_[host_] = device_budget(*host_);
    const auto* down = find_weight(d_, "blk.0.ffn_down.weight");
    weight_dtype_ = down ? down->dtype : DType::F32;
    const auto* embd = find_weight(d_, "token_embd.weight");
    RBEE_CHECK_CODE(embd != nullptr, ErrorCode::Io, "{}: the model has no token_embd.weight", d_.path);
    embd_dtype_ = embd->dtype;
  }

  int64_t budget(Device* d) const { return budget_.at(d); }
  Device* host() const { return host_; }

  Evaluation evaluate(const Placement& p, int ctx) const {
    Evaluation e;
    e.layer_bytes.assign((size_t)c_.n_layers, 0);
    const int blocks = ctx / req_.block_size;
    const KvLayout kv = kv_layout(p);
    const bool tensor = p.split == SplitMode::Tensor && !p.single();
    for (int r = 0; r < p.ranks(); ++r) {
      Device* dev = p.devices[(size_t)r];
      const RankShard shard = rank_shard(p, c_, r);
      const bool gpu = !dev->host_accessible();
      const bool host = dev == host_;
      DevicePlan dp;
      dp.device = dev;
      dp.id = dev->id();
      dp.first_layer = p.first_layer(r);
      dp.end_layer = p.end_layer(r, c_.n_layers);
      auto add = [&](const Shape& full, DType dtype, std::string_view suffix, bool is_norm, int layer, int64_t* slot) {
        const Shape shape = placed_shape(suffix, full, shard, c_);
        const DType t = placed_dtype(full, dtype);
        const bool converted = full.rank() == 1 && (dtype != DType::F32 || (is_norm && c_.norm_weight_plus_one));
        const bool cut = !(shape == full);
        const int64_t bytes = tensor_bytes(shape, t);
        if (host && !converted && !cut) {
          dp.mapped += bytes;
        } else {
          // Conversions made on the host stay in the host's allocator (rounded); uploads are exact-size.
          *slot += host ? rounded(bytes) : exact(bytes);
        }
        if (layer >= 0) e.layer_bytes[(size_t)layer] += bytes;
        else e.other_bytes += bytes;
      };
      const auto* embd = find_weight(d_, "token_embd.weight");
      const auto* out = c_.tie_embeddings ? nullptr : find_weight(d_, "output.weight");
      // The head: whole on the rank that holds it, or rows of it on every rank of a tensor split
      // (Placement::head_rows; a tied head's rows are a view of the table on the rank that embeds).
      const auto* head = out ? out : embd;
      const int64_t head_rows = head ? p.head_rows(r, head->shape[0]).second : 0;
      const bool whole_head = head && head_rows == head->shape[0];
      if (p.holds_embedding(r) || (whole_head && !out)) add(embd->shape, embd->dtype, "", false, -1, &dp.weights);
      if (head_rows > 0) {
        if (const auto* norm = find_weight(d_, "output_norm.weight")) add(norm->shape, norm->dtype, "", true, -1, &dp.weights);
        if (whole_head && out) {
          add(out->shape, out->dtype, "", false, -1, &dp.weights);
        } else if (!whole_head && (out || !p.holds_embedding(r))) {
          Shape rows = head->shape;
          rows[0] = head_rows;
          add(rows, head->dtype, "", false, -1, &dp.weights);
        }
      }
      for (int l = dp.first_layer; l < dp.end_layer; ++l) {
        std::map<std::string, const ModelDescription::Weight*> present;
        for (const LayerTensorSpec& spec : layer_tensor_specs(c_)) {
          const std::string name = fmt::format("blk.{}.{}", l, spec.suffix);
          const auto* w = find_weight(d_, name);
          RBEE_CHECK_CODE(w || !spec.required, ErrorCode::Io, "{}: the model has no tensor '{}' (architecture {})",
                          d_.path, name, c_.arch);
          if (w) present[spec.suffix] = w;
        }
        // GPUs stack q, k and v into one exact-size matrix (Transformer::load_rank).
        const bool fuse = gpu && !c_.fused_qkv && !present.count("attn_q.bias") && !present.count("attn_k.bias") &&
                          !present.count("attn_v.bias") && present.count("attn_q.weight") &&
                          present["attn_q.weight"]->dtype == present["attn_k.weight"]->dtype &&
                          present["attn_q.weight"]->dtype == present["attn_v.weight"]->dtype;
        int64_t fused = 0;
        for (const LayerTensorSpec& spec : layer_tensor_specs(c_)) {
          const auto it = present.find(spec.suffix);
          if (it == present.end()) continue;
          const std::string_view suffix = spec.suffix;
          if (fuse && (suffix == "attn_q.weight" || suffix == "attn_k.weight" || suffix == "attn_v.weight")) {
            const Shape shape = placed_shape(suffix, it->second->shape, shard, c_);
            fused += tensor_bytes(shape, it->second->dtype);
            e.layer_bytes[(size_t)l] += tensor_bytes(shape, it->second->dtype);
            continue;
          }
          add(it->second->shape, it->second->dtype, suffix, spec.is_norm, l, &dp.weights);
        }
        if (fused > 0) dp.weights += exact(fused);
      }
      dp.weights += 2 * rounded((int64_t)c_.rotary_dim / 2 * 4);  // the rotary tables
      dp.kv = KvCache::bytes_for(kv, *dev, blocks, req_.block_size, req_.kv_dtype);
      const ModelConfig sc = shard_config(c_, shard);
      const int cus = gpu ? dev->info().compute_units : 1;
      const bool has_layers = dp.end_layer > dp.first_layer;
      StepShape big;
      big.n = std::min(req_.batch_tokens, ctx);
      big.rows = std::min<int64_t>(req_.logit_rows, big.n);
      big.seqs = std::min<int64_t>(req_.parallel, big.n);
      big.width = (ctx + req_.block_size - 1) / req_.block_size;
      dp.activations = step_activations(sc, shard, big, p.holds_embedding(r) || tensor, head_rows, has_layers,
                                        embd_dtype_, weight_dtype_, gpu, cus);
      if (gpu && req_.decode_graphs && dev->supports_graphs()) {
        StepShape dec;
        dec.n = dec.rows = dec.seqs = std::max(1, req_.parallel);
        dec.width = DecodeGraphs::table_width((ctx + req_.block_size - 1) / req_.block_size);
        const int64_t buckets = (ctx + DecodeGraphs::kTableStep * req_.block_size - 1) /
                                (DecodeGraphs::kTableStep * req_.block_size);
        const int64_t entries = std::min<int64_t>((int64_t)DecodeGraphs::kMaxEntries, req_.parallel * buckets);
        const int64_t per_graph =
            step_activations(sc, shard, dec, p.holds_embedding(r) || tensor, head_rows, has_layers, embd_dtype_,
                             weight_dtype_, gpu, cus) +
            rounded(dec.n * c_.hidden_size * 4);  // the entry's input
        dp.graphs = entries * per_graph;
      }
      if (gpu) dp.reserve = kGpuRuntimeReserve + (tensor ? kCollectiveReserve : 0);
      if (req_.draft && p.holds_head(r)) {
        // The draft model, whole on this device (Model::device()), planned like a model of its own at this
        // context; the device's run-time reserve is already counted.
        PlanRequest dreq = req_;
        dreq.devices = {dev};
        dreq.draft = nullptr;
        dreq.decode_graphs = false;
        const Planner draft(*req_.draft, dreq);
        const Evaluation de = draft.evaluate(draft.layer_placement({dev}, {1.0}, req_.draft->config.n_layers), ctx);
        const DevicePlan& dd = de.devices.at(0);
        dp.draft = dd.allocated();
        dp.draft_mapped = dd.mapped;
      }
      dp.free = budget_.at(dev);
      e.fits = e.fits && dp.fits();
      e.devices.push_back(dp);
    }
    return e;
  }

  KvLayout kv_layout(const Placement& p) const {
    KvLayout layout;
    layout.head_dim = c_.head_dim;
    layout.layers.resize((size_t)c_.n_layers);
    for (int r = 0; r < p.ranks(); ++r) {
      const RankShard shard = rank_shard(p, c_, r);
      for (int l = p.first_layer(r); l < p.end_layer(r, c_.n_layers); ++l) {
        layout.layers[(size_t)l].push_back({p.devices[(size_t)r], shard.kv_heads});
      }
    }
    return layout;
  }

  // Layer split: `gpu_layers` of the last layers over `accel` in proportion to `shares`; the first ones on the
  // host. Devices that get no layer are left out.
  Placement layer_placement(const std::vector<Device*>& accel, const std::vector<double>& shares, int gpu_layers) const {
    Placement p;
    p.split = SplitMode::Layer;
    p.layer_begin = {0};
    if (gpu_layers < c_.n_layers) {
      p.devices.push_back(host_);
      p.layer_begin.push_back(c_.n_layers - gpu_layers);
    }
    if (gpu_layers > 0) {
      const std::vector<int> counts = proportional_split(gpu_layers, shares);
      for (size_t i = 0; i < accel.size(); ++i) {
        if (counts[i] == 0) continue;
        p.devices.push_back(accel[i]);
        p.layer_begin.push_back(p.layer_begin.back() + counts[i]);
      }
    }
    return p;
  }

  Placement tensor_placement(const std::vector<Device*>& devices, const std::vector<double>& shares) const {
    const int ranks = (int)devices.size();
    const int group = c_.n_heads / c_.n_kv_heads;
    const auto* out = find_weight(d_, "blk.0.attn_output.weight");
    const auto* down = find_weight(d_, "blk.0.ffn_down.weight");
    const int64_t head_granule = out ? column_granule(out->dtype) : 1;
    const int64_t ffn_granule = down ? column_granule(down->dtype) : 1;
    Placement p;
    p.split = SplitMode::Tensor;
    p.devices = devices;
    if (c_.n_kv_heads >= ranks) {
      // Whole kv-head groups per rank, in units whose query heads cover whole blocks of attn_output's columns.
      int kv_unit = 1;
      while (((int64_t)kv_unit * group * c_.head_dim) % head_granule != 0 && kv_unit < c_.n_kv_heads) ++kv_unit;
      RBEE_CHECK(c_.n_kv_heads % kv_unit == 0 && ((int64_t)kv_unit * group * c_.head_dim) % head_granule == 0 &&
                     c_.n_kv_heads / kv_unit >= ranks,
                 "tensor split: the {} kv heads of this model cannot be shared by {} devices on whole {}-element "
                 "blocks of attn_output ({}); use --split layer",
                 c_.n_kv_heads, ranks, head_granule, out ? dtype_name(out->dtype) : "");
      for (int kv : proportional_split(c_.n_kv_heads, shares, kv_unit)) p.q_heads.push_back(kv * group);
    } else {
      // Fewer kv heads than devices: each kv head's group of query heads is cut evenly over ranks / kv heads
      // ranks, which all keep that kv head.
      const int per_kv = ranks / c_.n_kv_heads;
      RBEE_CHECK(ranks % c_.n_kv_heads == 0 && group % per_kv == 0 &&
                     ((int64_t)(group / per_kv) * c_.head_dim) % head_granule == 0,
                 "tensor split: {} devices cannot share the {} kv heads ({} query heads each) of this model; use "
                 "--split layer", ranks, c_.n_kv_heads, group);
      p.q_heads.assign((size_t)ranks, group / per_kv);
    }
    RBEE_CHECK(c_.intermediate_size % ffn_granule == 0 && c_.intermediate_size / ffn_granule >= ranks,
               "tensor split: MLP width {} cannot be cut on whole {}-element blocks of ffn_down over {} devices",
               c_.intermediate_size, ffn_granule, ranks);
    p.ffn = proportional_split(c_.intermediate_size, shares, (int)ffn_granule);
    for (int r = 0; r < ranks; ++r) {
      RBEE_CHECK(p.q_heads[(size_t)r] > 0 && p.ffn[(size_t)r] > 0, "tensor split: --split-ratio leaves {} without work",
                 devices[(size_t)r]->id());
    }
    p.validate(c_);
    return p;
  }


 private:
  const ModelDescription& d_;
  const ModelConfig& c_;
  const PlanRequest& req_;
  Device* host_ = nullptr;
  std::map<Device*, int64_t> budget_;
  DType weight_dtype_ = DType::F32, embd_dtype_ = DType::F32;
};

std::string human(int64_t bytes) {
  const double b = (double)bytes;
  if (std::abs(b) >= 10.0 * (1ll << 30)) return fmt::format("{:.1f} GiB", b / (1ll << 30));
  if (std::abs(b) >= 1ll << 30) return fmt::format("{:.2f} GiB", b / (1ll << 30));
  return fmt::format("{:.1f} MiB", b / (1 << 20));
}

}  // namespace

ModelDescription describe_model(const std::string& path) {
  ModelSource source = open_model_source(path);
  ModelDescription d;
  d.path = path;
  d.config = source.config;
  auto note = [&](const std::string& name) {
    const Tensor t = source.lookup(name);
    if (t.defined()) d.weights[name] = {t.shape(), t.dtype()};
  };
  for (const char* name : {"token_embd.weight", "output_norm.weight", "output.weight", "rope_freqs.weight"}) note(name);
  for (int l = 0; l < d.config.n_layers; ++l) {
    for (const LayerTensorSpec& spec : layer_tensor_specs(d.config)) note(fmt::format("blk.{}.{}", l, spec.suffix));
  }
  return d;
}

int parse_gpu_layers(std::string_view text) {
  if (text == "auto") return -1;
  int v = -1;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  RBEE_CHECK(!text.empty() && ec == std::errc() && ptr == text.data() + text.size() && v >= 0,
             "--gpu-layers '{}': give a number of layers or auto", text);
  return v;
}

MemoryPlan plan_memory(const ModelDescription& desc, const PlanRequest& req) {
  const ModelConfig& c = desc.config;
  RBEE_CHECK(!req.devices.empty(), "plan: no devices");
  RBEE_CHECK(req.block_size > 0 && req.ctx_size > 0 && req.parallel > 0 && req.batch_tokens > 0,
             "plan: ctx_size {}, parallel {} and batch_tokens {} must be positive", req.ctx_size, req.parallel,
             req.batch_tokens);
  RBEE_CHECK(req.gpu_layers >= -1 && req.gpu_layers <= c.n_layers, "--gpu-layers {}: the model has {} layers",
             req.gpu_layers, c.n_layers);
  Planner planner(desc, req);
  Device* host = planner.host();
  MemoryPlan plan;
  plan.model = desc.path;
  if (req.draft) plan.draft = req.draft->path;
  plan.config = c;
  plan.block_size = req.block_size;
  plan.parallel = req.parallel;
  plan.kv_dtype = req.kv_dtype;
  const auto round_ctx = [&](int ctx) { return std::max(req.block_size, ctx / req.block_size * req.block_size); };
  int ctx = req.ctx_size;
  if (c.max_positions > 0 && ctx > c.max_positions) {
    ctx = c.max_positions;
    plan.notes.push_back(fmt::format("context capped at the model's {} positions", c.max_positions));
  }
  ctx = (ctx + req.block_size - 1) / req.block_size * req.block_size;  // whole blocks, at least the positions asked
  plan.batch_tokens = std::min(req.batch_tokens, ctx);

  // Which devices take layers, and in which shares.
  const bool host_listed = std::find(req.devices.begin(), req.devices.end(), host) != req.devices.end();
  const bool tensor = req.split == SplitMode::Tensor && req.devices.size() > 1;
  std::vector<Device*> accel = req.devices;
  std::vector<double> shares = req.split_ratio;
  if (!shares.empty()) {
    RBEE_CHECK(shares.size() == req.devices.size(), "--split-ratio has {} shares for {} devices", shares.size(),
               req.devices.size());
  } else {
    for (Device* d : accel) shares.push_back(tensor ? 1.0 : (double)std::max<int64_t>(planner.budget(d), 1));
  }
  // The host CPU can take the first layers when it is not one of the devices asked for (partial offload).
  const bool can_offload = !host_listed && !tensor;
  RBEE_CHECK(!tensor || req.gpu_layers < 0 || req.gpu_layers == c.n_layers,
             "--gpu-layers {}: a tensor split runs every layer on every device", req.gpu_layers);
  RBEE_CHECK(can_offload || req.gpu_layers < 0 || req.gpu_layers == c.n_layers,
             "--gpu-layers {}: the host CPU is already one of the devices; give --split-ratio instead",
             req.gpu_layers);
  RBEE_CHECK((int)accel.size() <= c.n_layers || tensor, "{} devices for {} layers", accel.size(), c.n_layers);
  auto placement_for = [&](int gpu_layers) {
    return tensor ? planner.tensor_placement(accel, shares) : planner.layer_placement(accel, shares, gpu_layers);
  };
  const bool auto_layers = req.gpu_layers < 0;
  int gpu_layers = auto_layers || !can_offload ? c.n_layers : req.gpu_layers;

  Placement placement = placement_for(gpu_layers);
  Evaluation e = planner.evaluate(placement, ctx);
  const int requested_ctx = ctx;
  if (!e.fits && req.fit) {
    const int floor_ctx = round_ctx(std::min(ctx, req.min_ctx));
    // The largest context in [lo, hi] that fits with `g` layers on the accelerators, or 0.
    auto best_ctx = [&](int g, int lo, int hi) {
      const Placement pl = placement_for(g);
      if (!planner.evaluate(pl, lo).fits) return 0;
      while (hi - lo > req.block_size) {
        const int mid = round_ctx(lo + (hi - lo) / 2);
        if (mid <= lo) break;
        if (planner.evaluate(pl, mid).fits) lo = mid;
        else hi = mid;
      }
      return planner.evaluate(pl, hi).fits ? hi : lo;
    };
    int chosen_ctx = 0, chosen_g = gpu_layers;
    if (!req.ctx_given) chosen_ctx = best_ctx(gpu_layers, floor_ctx, ctx);
    if (chosen_ctx == 0 && auto_layers && can_offload) {
      const int at = req.ctx_given ? ctx : floor_ctx;
      for (int g = gpu_layers - 1; g >= 0; --g) {
        if (planner.evaluate(placement_for(g), at).fits) {
          chosen_g = g;
          chosen_ctx = req.ctx_given ? ctx : best_ctx(g, floor_ctx, ctx);
          break;
        }
      }
    }
    if (chosen_ctx > 0) {
      if (chosen_ctx != ctx) {
        plan.notes.push_back(fmt::format("context lowered from {} to {} positions to fit", ctx, chosen_ctx));
      }
      if (chosen_g != gpu_layers) {
        plan.notes.push_back(fmt::format("{} of {} layers on the host CPU to fit ({} on {})", c.n_layers - chosen_g,
                                         c.n_layers, chosen_g, accel.size() == 1 ? accel[0]->id() : "the devices"));
      }
      ctx = chosen_ctx;
      gpu_layers = chosen_g;
      placement = placement_for(gpu_layers);
      e = planner.evaluate(placement, ctx);
    }
  }
  (void)requested_ctx;
  plan.placement = placement;
  plan.ctx_size = ctx;
  plan.devices = std::move(e.devices);
  plan.layer_bytes = std::move(e.layer_bytes);
  plan.other_bytes = e.other_bytes;
  plan.fits = e.fits;
  return plan;
}

void require_fit(const MemoryPlan& plan) {
  RBEE_CHECK_CODE(plan.fits, ErrorCode::OutOfMemory, "{}", plan.refusal());
}

std::string MemoryPlan::table() const {
  std::string out = fmt::format(
      "memory plan for {} ({} '{}', {} layers): {} KV positions ({}) shared by {} sequence(s), steps of up to {} "
      "tokens; {}\n",
      model, config.arch, config.name, config.n_layers, ctx_size, dtype_name(kv_dtype), parallel, batch_tokens,
      placement.describe());
  out += fmt::format("| {:<7} | {:<7} | {:>10} | {:>10} | {:>10} | {:>11} | {:>9} | {:>9} | {:>10} | {:>10} | {:<4} |\n",
                     "device", "layers", "weights", "mapped", "KV cache", "activations", "graphs", "reserve", "total",
                     "free", "fits");
  out += "|---------|---------|------------|------------|------------|-------------|-----------|-----------|------------|------------|------|\n";
  for (const DevicePlan& d : devices) {
    out += fmt::format("| {:<7} | {:<7} | {:>10} | {:>10} | {:>10} | {:>11} | {:>9} | {:>9} | {:>10} | {:>10} | {:<4} |\n",
                       d.id, fmt::format("{}-{}", d.first_layer, d.end_layer - 1), human(d.weights), human(d.mapped),
                       human(d.kv), human(d.activations), human(d.graphs), human(d.reserve), human(d.total()),
                       human(d.free), d.fits() ? "yes" : "NO");
  }
  for (const DevicePlan& d : devices) {
    if (d.draft + d.draft_mapped == 0) continue;
    out += fmt::format("draft model {} on {}: {} (weights, its KV cache and activations){}, included in the total\n",
                       draft, d.id, human(d.draft),
                       d.draft_mapped ? fmt::format(" + {} mapped", human(d.draft_mapped)) : "");
  }
  for (const auto& n : notes) out += "note: " + n + "\n";
  return out;
}

std::string MemoryPlan::refusal() const {
  std::string shorts;
  for (const DevicePlan& d : devices) {
    if (d.fits()) continue;
    if (!shorts.empty()) shorts += "; ";
    const std::string with_draft =
        d.draft + d.draft_mapped == 0
            ? std::string()
            : fmt::format(", draft model {}{} with its KV cache and activations", human(d.draft),
                          d.draft_mapped ? fmt::format(" + {} mapped", human(d.draft_mapped)) : "");
    shorts += fmt::format(
        "{} needs {} (weights {}{}, KV cache {} for {} positions, activations {}, graphs {}, reserve {}{}) but has {} "
        "free",
        d.id, human(d.total()), human(d.weights), d.mapped ? fmt::format(" + {} mapped", human(d.mapped)) : "",
        human(d.kv), ctx_size, human(d.activations), human(d.graphs), human(d.reserve), with_draft, human(d.free));
  }
  return fmt::format("{}{} does not fit: {}. Try a smaller --ctx-size, fewer --parallel sequences, --gpu-layers N "
                     "(the first layers on the CPU), more devices (--devices), {}or a smaller quantization",
                     model, draft.empty() ? "" : " with the draft model " + draft, shorts,
                     draft.empty() ? "" : "a smaller draft model, ");
}

nlohmann::json MemoryPlan::to_json() const {
  nlohmann::json devs = nlohmann::json::array();
  for (const DevicePlan& d : devices) {
    devs.push_back({{"id", d.id},
                    {"first_layer", d.first_layer},
                    {"end_layer", d.end_layer},
                    {"weights", d.weights},
                    {"mapped", d.mapped},
                    {"kv", d.kv},
                    {"activations", d.activations},
                    {"graphs", d.graphs},
                    {"reserve", d.reserve},
                    {"draft", d.draft},
                    {"draft_mapped", d.draft_mapped},
                    {"total", d.total()},
                    {"free", d.free},
                    {"fits", d.fits()}});
  }
  return {{"model", model},
          {"draft", draft.empty() ? nlohmann::json() : nlohmann::json(draft)},
          {"split", std::string(split_mode_name(placement.split))},
          {"placement", placement.describe()},
          {"ctx_size", ctx_size},
          {"parallel", parallel},
          {"batch_tokens", batch_tokens},
          {"kv_dtype", std::string(dtype_name(kv_dtype))},
          {"devices", devs},
          {"layer_bytes", layer_bytes},
          {"other_bytes", other_bytes},
          {"fits", fits},
          {"notes", notes}};
}

std::map<const Device*, int64_t> held_bytes(const std::vector<Device*>& devices) {
  std::map<const Device*, int64_t> out;
  for (Device* d : devices) {
    const AllocatorStats s = d->memory_stats();
    out[d] = s.in_use_bytes + s.cached_bytes;
  }
  return out;
}

std::vector<PlanCheck> measure_plan(const MemoryPlan& plan, const Model& model, const KvCache& cache,
                                    const std::map<const Device*, int64_t>& baseline) {
  std::vector<PlanCheck> out;
  for (const DevicePlan& d : plan.devices) {
    PlanCheck c;
    c.id = d.id;
    const AllocatorStats s = d.device->memory_stats();
    const auto it = baseline.find(d.device);
    c.measured_allocated = s.in_use_bytes + s.cached_bytes - (it == baseline.end() ? 0 : it->second);
    c.planned_allocated = d.allocated();
    c.planned_weights = d.weights + d.mapped;
    c.measured_weights = model.weight_bytes_on(*d.device);
    c.planned_kv = d.kv;
    c.measured_kv = cache.bytes_on(*d.device);
    out.push_back(c);
  }
  return out;
}

std::string plan_check_table(const std::vector<PlanCheck>& checks) {
  std::string out = "| device  | planned alloc | measured alloc | ratio | planned weights | model weights | planned KV | cache KV |\n"
                    "|---------|---------------|----------------|-------|-----------------|---------------|------------|----------|\n";
  for (const PlanCheck& c : checks) {
    out += fmt::format("| {:<7} | {:>13} | {:>14} | {:>5.3f} | {:>15} | {:>13} | {:>10} | {:>8} |\n", c.id,
                       human(c.planned_allocated), human(c.measured_allocated), c.ratio(), human(c.planned_weights),
                       human(c.measured_weights), human(c.planned_kv), human(c.measured_kv));
  }
  return out;
}

}  // namespace rbee::llm
