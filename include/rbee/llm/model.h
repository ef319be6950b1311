// Model: a loaded decoder-only transformer (weights on one device or spread over several, its tokenizer and chat
// template) that runs batches of sequences of different lengths through a paged KV cache.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rbee/core/tensor.h"
#include "rbee/llm/kv_cache.h"
#include "rbee/llm/model_config.h"
#include "rbee/llm/placement.h"
#include "rbee/llm/tokenizer.h"

namespace rbee {
class Device;
}

namespace rbee::llm {

struct LoadOptions {
  Device* device = nullptr;                     // where weights live and kernels run (nullptr: the CPU)
  // Several devices (llm/placement.h; e.g. from plan_memory): used instead of `device` when it names any.
  Placement placement;
  std::function<void(float)> progress;          // called with 0..1 while tensors load
  // Replay decode steps as device graphs where the device supports them (also off with RBEE_NO_GRAPH=1).
  bool decode_graphs = true;
};

// One sequence's part of a forward batch.
struct SequenceChunk {
  const SequenceKv* kv = nullptr;  // its cache blocks; they must cover ctx_len positions
  int q_len = 0;                   // new tokens of this sequence in the batch
  int ctx_len = 0;                 // positions in the cache once this batch is done (old + new)
  bool all_logits = false;         // logits for every new token (scoring, tests), not just the last
};

struct ForwardBatch {
  std::vector<TokenId> tokens;        // the new tokens of every sequence, sequence after sequence
  std::vector<SequenceChunk> seqs;
  bool hidden_states = false;         // return the final hidden states (after the output norm), not logits
};

class Model {
 public:
  virtual ~Model() = default;

  // A .gguf file, or a directory with config.json, *.safetensors (or an index) and tokenizer.json.
  static std::unique_ptr<Model> load(const std::string& path, const LoadOptions& options = {});

  virtual const ModelConfig& config() const = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  // The device the logits come out on (the last stage's of a layer split, rank 0's of a tensor split).
  virtual Device& device() const = 0;
  // Where the parts of the model live (one device: a one-stage layer placement).
  virtual const Placement& placement() const = 0;
  // Bytes of weights the model holds, in all and on one device (mapped file pages included).
  virtual int64_t weight_bytes() const = 0;
  virtual int64_t weight_bytes_on(const Device& device) const = 0;
  // Where a KV cache for this model must put each layer: make caches with KvCache(model.kv_layout(), ...).
  virtual KvLayout kv_layout() const = 0;

  // Runs the batch: writes the new tokens' keys and values into `cache` (whose layout must be kv_layout()) and
  // returns logits F32 [rows, vocab] on device(), rows in sequence order: each sequence's last new token, or all of
  // its new tokens when all_logits is set. With hidden_states: F32 [rows, hidden_size] instead (embeddings).
  virtual Tensor forward(const ForwardBatch& batch, KvCache& cache) = 0;

  // Decode steps (every sequence adds one token and wants its logits) recorded once per shape as a device
  // graph and replayed (CUDA / HIP graphs; llm/models/decode_graph.h). Results equal the eager steps'. Asking
  // for it on a device without graphs, or with RBEE_NO_GRAPH=1 in the environment, leaves it off.
  virtual void set_decode_graphs(bool enabled) = 0;
  virtual bool decode_graphs() const = 0;
  // Decode steps replayed from a graph so far.
  virtual uint64_t decode_graph_replays() const = 0;
};

}  // namespace rbee::llm
