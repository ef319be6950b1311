// Placement: which devices hold which parts of a model (docs/DESIGN.md section 7).
//
//   layer split   stage s runs layers [layer_begin[s], layer_begin[s + 1]) on devices[s], one stage after the
//                 other; the hidden states cross to the next stage's device once per step. The token embedding
//                 lives on the first stage's device, the output norm and head on the last one's. One device is
//                 the one-stage case; partial offload (--gpu-layers) is a split whose first stage is the host CPU.
//   tensor split  every device (rank) runs every layer on its shard: q_heads[r] query heads with the kv heads
//                 they read, and ffn[r] MLP columns. q/k/v and gate/up are cut by rows (column-parallel),
//                 attention output and down by columns (row-parallel); one all-reduce after each of the two. A
//                 rank's query heads are whole groups of kv heads, or part of one group: then that kv head is
//                 kept by every rank that reads it (models with fewer kv heads than devices). Rank 0 also holds
//                 the embedding, and ends with the logits. The head (output norm and projection) is cut by
//                 vocabulary rows: rank r projects rows head_rows(r) and the ranks gather the logits with one
//                 all-reduce (each rank's rows, zeros elsewhere: every logit is one rank's value plus zeros, so
//                 the same bits as a whole head); RBEE_TP_SPLIT_HEAD=0 keeps the whole head on rank 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

namespace rbee {
class Device;
}

namespace rbee::llm {

struct ModelConfig;

enum class SplitMode { Layer, Tensor };
std::string_view split_mode_name(SplitMode mode);  // "layer", "tensor"

struct Placement {
  SplitMode split = SplitMode::Layer;
  std::vector<Device*> devices;
  std::vector<int> layer_begin;  // layer split: devices.size() + 1 bounds from 0 to n_layers
  std::vector<int> q_heads;      // tensor split: query heads per rank, in head order (sum: n_heads)
  std::vector<int> ffn;          // tensor split: MLP columns per rank, in order (sum: intermediate_size)

  int ranks() const { return (int)devices.size(); }
  bool single() const { return devices.size() == 1; }
  // Layers that stage / rank r runs.
  int first_layer(int r) const { return split == SplitMode::Layer ? layer_begin[(size_t)r] : 0; }
  int end_layer(int r, int n_layers) const { return split == SplitMode::Layer ? layer_begin[(size_t)r + 1] : n_layers; }
  bool holds_embedding(int r) const { return r == 0; }
  // The stage / rank that ends with the logits (the model's device).
  bool holds_head(int r) const { return split == SplitMode::Tensor ? r == 0 : r + 1 == ranks(); }
  // Whether a tensor split cuts the head by vocabulary rows over its ranks (above; RBEE_TP_SPLIT_HEAD, read once).
  bool splits_head() const;
  // Rank r's rows [first, first + count) of the head when splits_head(); else the whole vocabulary on the rank
  // that holds the head and none elsewhere. Even shares, the remainder on the first ranks.
  std::pair<int64_t, int64_t> head_rows(int r, int64_t vocab) const;

  // Throws InvalidArgument naming what is inconsistent with the config (bounds, sums, duplicate devices).
  void validate(const ModelConfig& config) const;
  // "layers 0-11 on cpu:0, 12-31 on cuda:0" / "tensor split over cuda:0 (16 q heads, 5632 MLP columns), ..."
  std::string describe() const;
};

// Every layer on one device.
Placement single_device(Device& device, const ModelConfig& config);

// "cuda:0,cuda:1", "cpu,rocm:0", "cuda" (= cuda:0): the devices of a --devices list, through the global registry
// (GPU plug-ins loaded). Throws NotFound naming the entry that names no device, InvalidArgument for a device
// named twice or a malformed entry.
std::vector<Device*> parse_device_list(std::string_view list);

// Weights from a --split-ratio value ("3,1"): non-negative numbers, at least one positive. Throws InvalidArgument.
std::vector<double> parse_split_ratio(std::string_view text);

// Cuts `total` units into parts proportional to `weights`, each a multiple of `granule` units (total must be
// one too), distributing remainders by largest fraction. A weight of 0 gets nothing.
std::vector<int> proportional_split(int total, const std::vector<double>& weights, int granule = 1);

}  // namespace rbee::llm
