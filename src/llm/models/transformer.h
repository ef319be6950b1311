// Transformer: the Model implementation shared by every architecture. It owns the weights, the tokenizer and
// the rotary tables, and runs ForwardBatch through the architecture's layers.
//
// The weights are spread over the placement's devices (rbee/llm/placement.h) as "ranks", one per device:
//  - layer split (one device is the one-stage case): rank s holds layers [first, end) and runs them after
//    rank s - 1; the hidden states [N, hidden] cross to the next device once per step. Each rank has its own
//    decode graphs, so a GPU stage's layers are replayed as a graph even when a CPU stage runs before it.
//  - tensor split: every rank holds a cut of every layer (llm/models/weight_layout.h) and runs on its own
//    thread (RankThreads); the two row-parallel projections of a layer end in the Communicator's all-reduce.
//    Rank 0 embeds the tokens (the other ranks start from zeros, and one all-reduce hands every rank the
//    embeddings) and computes the logits.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>

#include "llm/models/architecture.h"
#include "llm/models/decode_graph.h"
#include "llm/models/rank_threads.h"
#include "llm/models/weight_layout.h"
#include "rbee/llm/model.h"

namespace rbee::llm {

class Transformer final : public Model {
 public:
  Transformer(ModelConfig config, std::unique_ptr<Tokenizer> tokenizer, const Placement& placement,
              const TensorLookup& lookup, const std::function<void(float)>& progress,
              std::shared_ptr<const void> file_keepalive);
  ~Transformer() override;

  const ModelConfig& config() const override { return config_; }
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  Device& device() const override;
  const Placement& placement() const override { return placement_; }
  int64_t weight_bytes() const override;
  int64_t weight_bytes_on(const Device& device) const override;
  KvLayout kv_layout() const override;
  Tensor forward(const ForwardBatch& batch, KvCache& cache) override;
  void set_decode_graphs(bool enabled) override;
  bool decode_graphs() const override;
  uint64_t decode_graph_replays() const override;

 private:
  // One device's part of the model.
  struct Rank {
    Device* device = nullptr;
    int index = 0;
    int first_layer = 0, end_layer = 0;  // layers [first_layer, end_layer)
    RankShard shard;
    ModelConfig config;                  // this rank's heads
    bool embeds = false, heads = false;  // holds the token embedding / the output norm and (its rows of) the head
    // The head's vocabulary rows [head_first, head_first + output.dim(0)) of head_vocab; fewer than head_vocab
    // where a tensor split cuts the head (Placement::splits_head: the ranks gather the logits by an all-reduce).
    int64_t head_first = 0, head_vocab = 0;
    Tensor token_embd, output_norm, output;
    std::vector<LayerWeights> layers;    // layers[l - first_layer]
    Tensor inv_freq_global, inv_freq_local;
    std::unique_ptr<DecodeGraphs> graphs;
    int64_t weight_bytes = 0;
  };

  // Places one host weight (already cut for the rank) on the rank's device: 1-D as F32 (1 + w for Gemma norms),
  // copied into exact-size device memory, or kept as the mapped view when the device is the host CPU itself.
  Tensor place(Rank& rank, const Tensor& host, const std::string& name, bool is_norm);
  void load_rank(Rank& rank, const TensorLookup& lookup, const std::function<void()>& report);
  // On GPUs: q, k and v projections (same type, no biases) stacked into one attn_qkv matrix, so a step runs one
  // matvec / GEMM and one activation quantization for the three (fewer launches, longer weight streams). Works on
  // the host tensors, before they are placed.
  static bool fusable_qkv(const Tensor& q, const Tensor& k, const Tensor& v);
  // On GPUs (and unless RBEE_DECODE_FUSION=0): gate and up projections (same type and shape) stacked into one
  // [2I, hidden] ffn_up matrix, gate rows first (the fused-gate/up layout), so a step runs one matvec for both and
  // swiglu_qmatmul after it. Host tensors, after the rank's cut.
  static bool fusable_gate_up(const Tensor& gate, const Tensor& up);
  // ids I32 [N] on the rank's device and the same ids on the host (checked against the vocabulary by the caller)
  // -> embeddings F32 [N, hidden]. Up to kRowwiseEmbedTokens tokens: one row copy each, addressed from the host
  // ids (no read-back of device ids).
  static constexpr int64_t kRowwiseEmbedTokens = 4;
  Tensor embed(const Rank& rank, const Tensor& ids, std::span<const int32_t> host_ids) const;
  // The rank's layers (and its head, when it holds it) over the packed index inputs `ints` (DecodeGraphs' layout:
  // tokens [N] | positions [N] | slots [N] | seq_info [B, 3] | block tables [B, width]) and hidden states x
  // [N, hidden]. Returns logits (the head's rank; only `logit_rows` when given, which uploads them) or the hidden
  // states for the next stage. Only launches kernels when `logit_rows` is empty. `hidden`: the head's rank stops
  // after the output norm (hidden states [rows, hidden] instead of logits).
  Tensor run_rank(const Rank& rank, KvCache& cache, const Tensor& ints, int64_t n, int64_t b, int64_t width,
                  const Tensor& x, const std::vector<int64_t>& logit_rows, bool hidden) const;
  Tensor forward_layer_split(KvCache& cache, const std::vector<int32_t>& ints, int64_t n, int64_t b, int64_t width,
                             bool graphed, const std::vector<int64_t>& logit_rows, bool hidden);
  Tensor forward_tensor_split(KvCache& cache, const std::vector<int32_t>& ints, int64_t n, int64_t b, int64_t width,
                              bool graphed, const std::vector<int64_t>& logit_rows, bool hidden);
  // The cache tensors rank r's decode step writes and reads in place (its graphs' bound addresses).
  std::vector<const void*> bound_cache(const Rank& rank, const KvCache& cache) const;

  ModelConfig config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  Placement placement_;
  const Architecture& arch_;
  bool fused_ops_ = true;  // StepContext::fused_ops (by weight type; RBEE_DECODE_FUSION=0 / 1 force it)
  std::vector<Rank> ranks_;
  Tensor rope_freqs_;  // host view (Llama 3.1 GGUF), or undefined
  float rope_ratio_global_ = 0.f, rope_ratio_local_ = 0.f;  // RopeParams::freq_ratio, 0 for scaled tables
  std::shared_ptr<const void> file_keepalive_;  // the mapped model file
  std::unique_ptr<Communicator> comm_;           // tensor split
  std::unique_ptr<RankThreads> threads_;         // tensor split
  std::vector<int64_t> head_bounds_;             // a cut head: rank r's vocabulary rows [head_bounds_[r], [r + 1])
};

}  // namespace rbee::llm
