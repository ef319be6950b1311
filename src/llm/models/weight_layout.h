// Which canonical weights a model has and how each is placed on a device: the one description both the loader
// (Transformer) and the memory plan (memory_plan.cpp) follow, so that the plan's bytes are the loader's bytes.
//
// A tensor-parallel rank keeps a cut of each layer (RankShard): rows [q, q + n) of attn_q (its query heads),
// rows of attn_k / attn_v (the kv heads they read, kept by several ranks when a group of query heads is shared),
// the matching columns of attn_output; rows [f, f + n) of ffn_gate /
// ffn_up and those columns of ffn_down. Fused weights (Phi-3's attn_qkv and ffn_up = gate|up) are cut per part
// and the parts stacked again. Norms are whole on every rank. Without a tensor split the cut is everything.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "rbee/core/tensor.h"
#include "rbee/llm/model_config.h"
#include "rbee/llm/placement.h"

namespace rbee::llm {

// Looks a tensor up by canonical (GGUF) name in the model file; undefined Tensor when absent. The tensor views
// the mapped file on the host CPU (reading its shape and dtype reads no weight).
using TensorLookup = std::function<Tensor(const std::string& canonical_name)>;

// One per-layer weight: its canonical suffix ("attn_q.weight"), whether the model must have it, and whether it
// is a norm (kept F32, 1 + w for Gemma's HF weights).
struct LayerTensorSpec {
  const char* suffix;
  bool required;
  bool is_norm;
};
std::vector<LayerTensorSpec> layer_tensor_specs(const ModelConfig& config);

// The part of every layer one rank keeps.
struct RankShard {
  int q_head_begin = 0, q_heads = 0;
  int kv_head_begin = 0, kv_heads = 0;
  int64_t ffn_begin = 0, ffn = 0;
  bool whole = true;  // no cut (layer split or one device)
};
RankShard rank_shard(const Placement& placement, const ModelConfig& config, int rank);
// The config a rank's layers run with: its query and kv heads (everything else as the model's).
ModelConfig shard_config(const ModelConfig& config, const RankShard& shard);

// Shape and dtype of a weight as placed: cut for the rank, 1-D tensors as F32.
Shape placed_shape(std::string_view suffix, const Shape& full, const RankShard& shard, const ModelConfig& config);
DType placed_dtype(const Shape& full, DType dtype);

// The rank's cut of a host tensor (a view when the cut is one row range, else a host copy). `full` is on the CPU.
Tensor cut_tensor(std::string_view suffix, const Tensor& full, const RankShard& shard, const ModelConfig& config);

// Column granule of a tensor split: MLP column and head cuts must fall on whole blocks of the block-quantized
// weights they cut (attn_output, ffn_down); 1 for plain dtypes.
int64_t column_granule(DType dtype);

}  // namespace rbee::llm
