// Transformer: the Model implementation shared by every architecture. It owns the weights (on the model's
// device), the tokenizer and the rotary tables, and runs ForwardBatch through the architecture's layers.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "llm/models/architecture.h"
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

 private:
  Tensor embed(const std::vector<TokenId>& tokens) const;

  ModelConfig config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  Device& device_;
  const Architecture& arch_;
  ModelWeights weights_;
  Tensor inv_freq_global_, inv_freq_local_;
  float rope_ratio_global_ = 0.f, rope_ratio_local_ = 0.f;  // RopeParams::freq_ratio, 0 for scaled tables
  int64_t weight_bytes_ = 0;
  std::shared_ptr<const void> file_keepalive_;  // the mapped model file
};

// Loads a Hugging Face directory (config.json, safetensors shards, tokenizer.json).
std::unique_ptr<Model> load_safetensors_dir(const std::string& dir, const LoadOptions& options, Device& device);

}  // namespace rbee::llm
