#include "llm/models/weight_layout.h"

#include <cstring>
#include <memory>

#include "rbee/backend/device.h"
#include "rbee/core/error.h"

namespace rbee::llm {

std::vector<LayerTensorSpec> layer_tensor_specs(const ModelConfig& c) {
  std::vector<LayerTensorSpec> s = {{"attn_norm.weight", true, true}};
  if (c.fused_qkv) {
    s.push_back({"attn_qkv.weight", true, false});
  } else {
    s.push_back({"attn_q.weight", true, false});
    s.push_back({"attn_k.weight", true, false});
    s.push_back({"attn_v.weight", true, false});
  }
  s.push_back({"attn_q.bias", false, false});
  s.push_back({"attn_k.bias", false, false});
  s.push_back({"attn_v.bias", false, false});
  s.push_back({"attn_output.weight", true, false});
  if (c.qk_norm) {
    s.push_back({"attn_q_norm.weight", true, true});
    s.push_back({"attn_k_norm.weight", true, true});
  }
  s.push_back({"ffn_norm.weight", true, true});
  if (c.post_norms) {
    s.push_back({"post_attention_norm.weight", true, true});
    s.push_back({"post_ffw_norm.weight", true, true});
  }
  if (!c.fused_gate_up) s.push_back({"ffn_gate.weight", true, false});
  s.push_back({"ffn_up.weight", true, false});
  s.push_back({"ffn_down.weight", true, false});
  return s;
}

RankShard rank_shard(const Placement& p, const ModelConfig& c, int rank) {
  RankShard s;
  if (p.split != SplitMode::Tensor || p.single()) {
    s.q_heads = c.n_heads;
    s.kv_heads = c.n_kv_heads;
    s.ffn = c.intermediate_size;
    return s;
  }
  const int group = c.n_heads / c.n_kv_heads;
  for (int r = 0; r < rank; ++r) {
    s.q_head_begin += p.q_heads[(size_t)r];
    s.ffn_begin += p.ffn[(size_t)r];
  }
  s.q_heads = p.q_heads[(size_t)rank];
  // The kv heads those query heads read (Placement::validate: whole groups, or within one group).
  s.kv_head_begin = s.q_head_begin / group;
  s.kv_heads = (s.q_head_begin + s.q_heads - 1) / group + 1 - s.kv_head_begin;
  s.ffn = p.ffn[(size_t)rank];
  s.whole = false;
  return s;
}

ModelConfig shard_config(const ModelConfig& config, const RankShard& shard) {
  ModelConfig c = config;
  c.n_heads = shard.q_heads;
  c.n_kv_heads = shard.kv_heads;
  c.intermediate_size = (int)shard.ffn;
  return c;
}

namespace {

// Row ranges [begin, begin + len) of the full tensor that the rank keeps, in the order they are stacked.
struct Cut {
  int axis = -1;  // -1: whole, 0: rows, 1: columns
  std::vector<std::pair<int64_t, int64_t>> ranges;
};

Cut cut_of(std::string_view suffix, const RankShard& s, const ModelConfig& c) {
  Cut cut;
  if (s.whole) return cut;
  const int64_t d = c.head_dim;
  const int64_t q0 = (int64_t)s.q_head_begin * d, qn = (int64_t)s.q_heads * d;
  const int64_t k0 = (int64_t)s.kv_head_begin * d, kn = (int64_t)s.kv_heads * d;
  const int64_t q_total = (int64_t)c.n_heads * d, kv_total = (int64_t)c.n_kv_heads * d;
  auto starts_with = [&](std::string_view p) { return suffix.substr(0, p.size()) == p; };
  if (starts_with("attn_q.")) cut = {0, {{q0, qn}}};
  else if (starts_with("attn_k.") || starts_with("attn_v.")) cut = {0, {{k0, kn}}};
  else if (suffix == "attn_qkv.weight") cut = {0, {{q0, qn}, {q_total + k0, kn}, {q_total + kv_total + k0, kn}}};
  else if (suffix == "attn_output.weight") cut = {1, {{q0, qn}}};
  else if (suffix == "ffn_gate.weight") cut = {0, {{s.ffn_begin, s.ffn}}};
  else if (suffix == "ffn_up.weight" && c.fused_gate_up) {
    cut = {0, {{s.ffn_begin, s.ffn}, {c.intermediate_size + s.ffn_begin, s.ffn}}};
  } else if (suffix == "ffn_up.weight") cut = {0, {{s.ffn_begin, s.ffn}}};
  else if (suffix == "ffn_down.weight") cut = {1, {{s.ffn_begin, s.ffn}}};
  return cut;
}

}  // namespace

Shape placed_shape(std::string_view suffix, const Shape& full, const RankShard& shard, const ModelConfig& config) {
  const Cut cut = cut_of(suffix, shard, config);
  if (cut.axis < 0) return full;
  int64_t n = 0;
  for (const auto& r : cut.ranges) n += r.second;
  Shape out = full;
  out[cut.axis] = n;
  return out;
}

DType placed_dtype(const Shape& full, DType dtype) { return full.rank() == 1 ? DType::F32 : dtype; }

int64_t column_granule(DType dtype) { return is_quantized(dtype) ? dtype_block_size(dtype) : 1; }

Tensor cut_tensor(std::string_view suffix, const Tensor& full, const RankShard& shard, const ModelConfig& config) {
  const Cut cut = cut_of(suffix, shard, config);
  if (cut.axis < 0) return full;
  RBEE_CHECK(full.device().host_accessible() && full.is_contiguous(), "cut_tensor: {} must be a contiguous host tensor",
             suffix);
  const int axis = cut.axis;
  RBEE_CHECK(axis < full.rank(), "tensor {} of shape {} cannot be cut along axis {}", suffix, full.shape().to_string(),
             axis);
  for (const auto& [begin, len] : cut.ranges) {
    RBEE_CHECK(begin >= 0 && len > 0 && begin + len <= full.dim(axis), "tensor {} of shape {}: cut [{}, {}) is outside it",
               suffix, full.shape().to_string(), begin, begin + len);
  }
  if (axis == 0 && cut.ranges.size() == 1) return full.narrow(0, cut.ranges[0].first, cut.ranges[0].second);
  const Shape out_shape = placed_shape(suffix, full.shape(), shard, config);
  const DType t = full.dtype();
  const int64_t cols = full.dim(full.rank() - 1);
  const int64_t row_bytes = dtype_row_bytes(t, cols);
  const int64_t rows = full.numel() / cols;
  auto bytes = std::make_shared<std::vector<uint8_t>>();
  const auto* src = static_cast<const uint8_t*>(full.data());
  if (axis == 0) {
    for (const auto& [begin, len] : cut.ranges) {
      bytes->insert(bytes->end(), src + begin * row_bytes, src + (begin + len) * row_bytes);
    }
  } else {
    // Column cut of a 2-D [rows, cols] weight: whole blocks of each row.
    const int64_t granule = column_granule(t);
    const auto [c0, cn] = cut.ranges[0];
    RBEE_CHECK(c0 % granule == 0 && cn % granule == 0,
               "tensor {} ({}): columns [{}, {}) do not fall on its {}-element blocks", suffix, dtype_name(t), c0,
               c0 + cn, granule);
    const int64_t off = dtype_row_bytes(t, c0), nb = dtype_row_bytes(t, cn);
    bytes->resize((size_t)(rows * nb));
    for (int64_t r = 0; r < rows; ++r) std::memcpy(bytes->data() + r * nb, src + r * row_bytes + off, (size_t)nb);
  }
  void* data = bytes->data();
  return Tensor::wrap(data, out_shape, t, full.device(), std::move(bytes));
}

}  // namespace rbee::llm
