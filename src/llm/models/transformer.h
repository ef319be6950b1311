// Transformer: the Model implementation shared by every architecture. It owns the weights (on the model's
// device), the tokenizer and the rotary tables, and runs ForwardBatch through the architecture's layers.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>

#include "llm/models/architecture.h"
#include "llm/models/decode_graph.h"
#include "rbee/llm/model.h"

namespace rbee::llm {

// Looks a tensor up by canonical (GGUF) name in the model file; undefined Tensor when absent.
using TensorLookup = std::function<Tensor(const std::string& canonical_name)>;

class Transformer final : public Model {
 public:
  Transformer(ModelConfig config, std::unique_ptr<Tokenizer> tokenizer, Device& device, const TensorLookup& lookup,
              const std::function<void(float)>& progress, std::shared_ptr<const void> file_keepalive);

  const ModelConfig& config() const override { return config_; }
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  Device& device() const override { return device_; }
  int64_t weight_bytes() const override { return weight_bytes_; }
  Tensor forward(const ForwardBatch& batch, KvCache& cache) override;
  void set_decode_graphs(bool enabled) override;
  bool decode_graphs() const override { return graphs_ != nullptr; }
  uint64_t decode_graph_replays() const override { return graphs_ ? graphs_->replays() : 0; }

 private:
  // On GPUs: q, k and v projections (same type, no biases) stacked into one attn_qkv matrix, so a step runs one
  // matvec / GEMM and one activation quantization for the three (fewer launches, longer weight streams).
  void fuse_qkv(LayerWeights& w) const;
  // On GPUs: gate and up projections (same type and shape) stacked into one [2I, hidden] ffn_up matrix, gate
  // rows first (the fused-gate/up layout), so a step runs one matvec for both and swiglu_qmatmul after it.
  void fuse_gate_up(LayerWeights& w) const;
  // ids I32 [N] on the device and the same ids on the host (checked against the vocabulary by the caller) ->
  // embeddings F32 [N, hidden]. Up to kRowwiseEmbedTokens tokens: one row copy each, addressed from the host ids.
  static constexpr int64_t kRowwiseEmbedTokens = 4;
  Tensor embed(const Tensor& ids, std::span<const int32_t> host_ids) const;
  // The layers and the head over the packed index inputs `ints` (DecodeGraphs' layout: tokens [N] |
  // positions [N] | slots [N] | seq_info [B, 3] | block tables [B, width]) and embeddings x [N, hidden]. Only
  // launches kernels when `logit_rows` is empty (every token's logits); otherwise it uploads those rows.
  // `hidden`: stop after the output norm (hidden states [rows, hidden] instead of logits).
  Tensor run_layers(KvCache& cache, const Tensor& ints, int64_t n, int64_t b, int64_t width, const Tensor& x,
                    const std::vector<int64_t>& logit_rows, bool hidden) const;

  ModelConfig config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  Device& device_;
  const Architecture& arch_;
  bool fused_ops_ = true;  // StepContext::fused_ops (RBEE_DECODE_FUSION=0 turns it off)
  ModelWeights weights_;
  Tensor inv_freq_global_, inv_freq_local_;
  float rope_ratio_global_ = 0.f, rope_ratio_local_ = 0.f;  // RopeParams::freq_ratio, 0 for scaled tables
  int64_t weight_bytes_ = 0;
  std::shared_ptr<const void> file_keepalive_;  // the mapped model file
  std::unique_ptr<DecodeGraphs> graphs_;         // decode steps as device graphs (null: eager)
};

// Loads a Hugging Face directory (config.json, safetensors shards, tokenizer.json).
std::unique_ptr<Model> load_safetensors_dir(const std::string& dir, const LoadOptions& options, Device& device);

}  // namespace rbee::llm
