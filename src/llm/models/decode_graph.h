// DecodeGraphs: the decode step of a Transformer recorded once as a device graph (CUDA / HIP graph) and
// replayed, so that a step costs one graph launch instead of ~20 kernel launches per layer.
//
// A graph replays fixed device addresses and launch shapes, so every input that changes from step to step lives
// in persistent device tensors of the graph's entry, refreshed in place before each replay:
//   ints  I32 [6 B + B * W]: tokens [B] | positions [B] | slots [B] | seq_info [B, 3] | block tables [B, W]
//   x     F32 [B, hidden]:   the step's embeddings (computed eagerly, a few launches: the rows are addressed
//                            from the host's token ids, which a graph cannot record)
// One entry (graph) per shape bucket (B sequences, block-table width W) and set of `bound` addresses: the device
// memory outside the entry that the step reads or writes in place (the KV cache's per-layer tensors), since a
// replay uses the addresses of its capture (another KvCache gets its own graphs). W is the number of cache blocks the
// longest sequence needs rounded up to a multiple of kTableStep: paged_attention sizes its grid from W alone and
// reads every sequence's real context length from seq_info on the device, so one graph serves all context
// lengths of its bucket; crossing into the next bucket records a new graph.
// Life of an entry, eager fall-backs, eviction: rbee::GraphCache (rbee/backend/graph_cache.h). The eager and
// replayed steps run the same kernels with the same launch shapes on the same data, so their logits are
// bit-identical.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "rbee/backend/device.h"
#include "rbee/backend/graph_cache.h"
#include "rbee/core/tensor.h"

namespace rbee::llm {

class DecodeGraphs {
 public:
  // Block-table widths are rounded up to a multiple of this many blocks.
  static constexpr int64_t kTableStep = 16;
  // Graphs kept at most; the least recently used one is released beyond this.
  static constexpr size_t kMaxEntries = 8;

  // embed: ids I32 [B] (a view of the entry's ints) -> embeddings F32 [B, hidden], copied into x; or an undefined
  //        tensor when the body writes x itself (a tensor split's rank without the embedding zeroes it in the graph)
  // body:  (ints as laid out above, x) -> logits F32 [B, vocab]; must only launch kernels (no host copies).
  using Embed = std::function<Tensor(const Tensor& ids)>;
  using Body = std::function<Tensor(const Tensor& ints, const Tensor& x)>;

  DecodeGraphs(Device& device, int64_t hidden)
      : device_(device), hidden_(hidden), graphs_(device, kMaxEntries, "decode step") {}
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  // The width a block table of `max_blocks` blocks gets in decode steps (eager or replayed alike).
  static int64_t table_width(int64_t max_blocks) { return (max_blocks + kTableStep - 1) / kTableStep * kTableStep; }

  // One decode step of `batch` sequences with host inputs `ints` (layout above, width `width`). Returns a fresh
  // logits tensor (a copy of the graph's output, so the caller may keep it past the next step); with
  // `output_read` false, the graph's output itself where it was replayed, overwritten by the next step (a caller
  // that never reads it is spared the copy).
  Tensor run(int64_t batch, int64_t width, std::span<const int32_t> ints, std::span<const void* const> bound,
             const Embed& embed, const Body& body, bool output_read = true);

  // Steps replayed from a graph and graphs recorded so far (for tests and logs).
  uint64_t replays() const { return graphs_.replays(); }
  uint64_t captures() const { return graphs_.captures(); }
  bool disabled() const { return !graphs_.enabled(); }

 private:
  // A graph's validity: the shape bucket and the bound addresses.
  struct Key {
    int64_t batch = 0, width = 0;
    std::vector<const void*> bound;
    bool operator==(const Key&) const = default;
    std::string to_string() const;
  };
  // The step's inputs in place: ints I32 [6 B + B * W] (layout above), x F32 [B, hidden].
  struct Slots {
    Tensor ints, x;
  };

  Device& device_;
  int64_t hidden_;
  GraphCache<Key, Slots> graphs_;
};

}  // namespace rbee::llm
