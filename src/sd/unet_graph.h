// The UNet's denoising step replayed as one device graph (Device::begin_graph_capture), so a step costs one launch
// instead of ~1000 kernel launches and the host work between them.
//
// run() returns what UNet::forward returns, for the same inputs. Per (sample shape, context shape and dtype) it keeps
// an entry of a rbee::GraphCache (rbee/backend/graph_cache.h: warm-up, capture, replay, eager fall-backs): device
// buffers for the step's inputs (sample [B, in, H, W], the timestep conditioning, the context) and, once recorded,
// the graph of UNet::denoise over those buffers. The host part of a step (UNet::condition: the timestep's
// sinusoid, SDXL's time ids) runs before each replay. A device without graphs, a capture that fails (logged once)
// or RBEE_SD_UNET_GRAPH=0 in the environment: eager steps.
//
// The context's cross-attention keys and values (UNet::project_context: 16 products a step in SD 1.5, 70 in SDXL)
// depend on the prompt alone, so they are made once per context, outside the graph, and the step reads them: an
// entry keeps the projections in its slots with the context they came from, and projects again (eagerly, then
// copies into the slots) only when run() is handed another context tensor. "Another" is by identity (the same
// storage, offset, shape and strides), which is sound because the entry holds that tensor: its memory cannot be
// reused while held. Contract: a caller never writes into a context tensor it has passed to run() (sd::Pipeline
// makes one per request). The eager path (no graphs) keeps one such projection the same way. A FlopCounter of the
// caller's does not see these products (they are per context, not step work).
// RBEE_SD_CONTEXT_KV_ONCE=0 (read when the UNetStepGraph is made): the projections inside every step, as before.
//
// Entries hold the step's intermediates in the graph's memory pool for as long as they live (kMaxEntries shapes,
// least recently used out). Not thread-safe: one UNetStepGraph per thread of work (sd::Pipeline keeps one behind a
// mutex).
#pragma once

#include <string>

#include "rbee/backend/graph_cache.h"
#include "rbee/core/device.h"
#include "rbee/sd/unet.h"

namespace rbee::sd {

class UNetStepGraph {
 public:
  UNetStepGraph(const UNet& unet, Device& device);
  UNetStepGraph(const UNetStepGraph&) = delete;
  UNetStepGraph& operator=(const UNetStepGraph&) = delete;

  Tensor run(const Tensor& sample, double timestep, const Tensor& context, const UNet::AddedConditions& added);

  // Whether this device records graphs at all (and the environment did not turn them off).
  bool enabled() const { return graphs_.enabled(); }
  int captures() const { return (int)graphs_.captures(); }
  int replays() const { return (int)graphs_.replays(); }

 private:
  static constexpr size_t kMaxEntries = 2;
  struct Key {
    Shape sample_shape, context_shape;
    DType context_dtype;
    bool operator==(const Key&) const = default;
    std::string to_string() const;
  };
  // The step's inputs in place: sample [B, in, H, W], the conditioning, and either the context [B, tokens, width]
  // (projected inside the step) or its projections with the context they were made from (context_kv_once_).
  struct Slots {
    Tensor sample, context;
    UNet::Conditioning cond;
    UNet::ContextProjections kv;
    Tensor kv_source;
  };
  // Whether `kv_source` is `context` itself (the same storage and view); see the header comment.
  static bool same_tensor(const Tensor& kv_source, const Tensor& context);

  const UNet& unet_;
  Device& device_;
  const bool context_kv_once_;
  GraphCache<Key, Slots> graphs_;
  // The eager path's projections (graphs off) and their source context.
  UNet::ContextProjections eager_kv_;
  Tensor eager_kv_source_;
};

}  // namespace rbee::sd
