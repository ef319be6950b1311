// The memory plan: what a model will need on each device, computed from its metadata alone (no weight is read)
// before it is loaded, so that a model that cannot fit is refused with the numbers instead of failing halfway
// through an upload, and so that the context and the GPU share of the layers can be chosen to fit
// (docs/DESIGN.md section 7).
//
// Per device it counts
//   weights      bytes placed on the device (exact-size allocations; Transformer and the plan follow one
//                description of the tensors, llm/models/weight_layout.h)
//   mapped       weights the host CPU reads in place from the mapped file (host only; not allocated)
//   kv           the KV cache of that device's layers (or kv heads) for ctx_size positions
//   activations  the temporaries of the largest forward step (batch_tokens tokens), as the caching allocator
//                holds them: per size class, the most blocks alive at once
//   graphs       decode graphs' private memory (up to DecodeGraphs::kMaxEntries graphs of a parallel-row step)
//   reserve      run-time libraries' workspaces (vendor BLAS, collectives) on GPUs
//   draft        speculative decoding's draft model (PlanRequest::draft), on the device the logits come out on:
//                its weights, its own KV cache of ctx_size positions and the activations of its largest step
// and compares the sum with the device's free memory (the allocator's fault limit, RBEE_FAULT_ALLOC_LIMIT,
// counts as the device's size).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "rbee/core/dtype.h"
#include "rbee/core/shape.h"
#include "rbee/llm/model_config.h"
#include "rbee/llm/placement.h"

namespace rbee {
class Device;
}

namespace rbee::llm {

class Model;
class KvCache;

// A model as its files describe it: the config and the shape and dtype of every weight (canonical names).
struct ModelDescription {
  std::string path;
  ModelConfig config;
  struct Weight {
    Shape shape;
    DType dtype = DType::F32;
  };
  std::map<std::string, Weight> weights;
};
// Reads only metadata (GGUF header / safetensors headers and config.json). Throws like Model::load.
ModelDescription describe_model(const std::string& path);

struct PlanRequest {
  // The devices to run on: one (the --backend / --device pick) or several (--devices).
  std::vector<Device*> devices;
  SplitMode split = SplitMode::Layer;  // with several devices
  std::vector<double> split_ratio;     // shares per device; empty: free memory (layer), equal (tensor)
  // Layers on `devices` when the host CPU (cpu:0, when not among them) runs the first ones: -1 = auto (every
  // layer if that fits, else as many as fit), 0..n_layers = that many.
  int gpu_layers = -1;
  int ctx_size = 4096;    // KV cache positions, shared by the running sequences
  bool ctx_given = false; // false: the plan may lower ctx_size (down to min_ctx) to fit
  int min_ctx = 1024;
  int parallel = 1;       // sequences decoded together
  int batch_tokens = 512; // tokens of the largest forward step (prompt chunk + decode rows)
  int logit_rows = 1;     // rows of logits of the largest step
  DType kv_dtype = DType::F16;
  int block_size = 16;
  bool decode_graphs = true;
  bool fit = true;        // false: only check the request as given
  // A draft model for speculative decoding (--draft), or nullptr. It runs whole on the device the model's logits
  // come out on (Model::device(): the last stage of a layer split, rank 0 of a tensor split) with a KV cache of
  // as many positions as the model's and steps of at most batch_tokens tokens (DraftModel's catch-up passes) and
  // parallel rows; it records no decode graphs. Fitting lowers the context for both caches together.
  const ModelDescription* draft = nullptr;
};

struct DevicePlan {
  Device* device = nullptr;
  std::string id;
  int first_layer = 0, end_layer = 0;  // the layers it runs ([0, n) for every rank of a tensor split)
  int64_t weights = 0, mapped = 0, kv = 0, activations = 0, graphs = 0, reserve = 0;
  // The draft model's share (0 without one, and on every other device): what its allocator use adds (weights
  // copied to the device, its KV cache, its activations) and the weights the host reads from its mapped file.
  int64_t draft = 0, draft_mapped = 0;
  int64_t free = 0;  // free when planned (after the reserve is counted separately)
  int64_t total() const { return weights + mapped + kv + activations + graphs + reserve + draft + draft_mapped; }
  // What the device's allocator will hold: everything but the mapped files and the libraries' reserve.
  int64_t allocated() const { return weights + kv + activations + graphs + draft; }
  bool fits() const { return total() <= free; }
};

struct MemoryPlan {
  std::string model;
  std::string draft;  // the draft model's path, or empty
  ModelConfig config;
  Placement placement;
  int ctx_size = 0;     // positions of the KV cache (a multiple of block_size)
  int block_size = 16;
  int parallel = 1, batch_tokens = 0;
  DType kv_dtype = DType::F16;
  std::vector<DevicePlan> devices;   // one per placement device, plus the host when it only maps weights
  std::vector<int64_t> layer_bytes;  // weights of each layer over all ranks
  int64_t other_bytes = 0;           // embedding, output norm and head (all copies)
  bool fits = false;
  std::vector<std::string> notes;    // what fitting changed ("context lowered from 8192 to 4096 positions")

  int kv_blocks() const { return ctx_size / block_size; }
  // The plan as a table (one line per device) for logs and `rbee plan`.
  std::string table() const;
  // Why it does not fit: every device that is short, with its numbers, and what could help.
  std::string refusal() const;
  nlohmann::json to_json() const;
};

// A --gpu-layers value: "auto" -> -1, else a non-negative count (InvalidArgument otherwise).
int parse_gpu_layers(std::string_view text);

// Plans `desc` for `req`, fitting it when req.fit (see PlanRequest). Never throws for "does not fit": the
// plan says fits = false. Throws InvalidArgument for requests that cannot be planned at all (a tensor split the
// heads do not divide, more stages than layers, ...).
MemoryPlan plan_memory(const ModelDescription& desc, const PlanRequest& req);

// Throws Error(OutOfMemory) with plan.refusal() when the plan does not fit.
void require_fit(const MemoryPlan& plan);

// Bytes each device's allocator holds now (in use + cached), to be subtracted from measure_plan's reading.
std::map<const Device*, int64_t> held_bytes(const std::vector<Device*>& devices);

// Planned against measured, per plan device, once the model is loaded, its cache made and (for activations) one
// step of the largest shape run: the allocator's growth since `baseline` against allocated(), and the model's
// weights on the device against weights + mapped.
struct PlanCheck {
  std::string id;
  int64_t planned_allocated = 0, measured_allocated = 0;
  int64_t planned_weights = 0, measured_weights = 0;
  int64_t planned_kv = 0, measured_kv = 0;
  double ratio() const { return planned_allocated > 0 ? (double)measured_allocated / (double)planned_allocated : 0; }
};
std::vector<PlanCheck> measure_plan(const MemoryPlan& plan, const Model& model, const KvCache& cache,
                                    const std::map<const Device*, int64_t>& baseline);
std::string plan_check_table(const std::vector<PlanCheck>& checks);

}  // namespace rbee::llm
