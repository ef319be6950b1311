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
  // The step's inputs in place: sample [B, in, H, W], context [B, tokens, width], the conditioning.
  struct Slots {
    Tensor sample, context;
    UNet::Conditioning cond;
  };

  const UNet& unet_;
  Device& device_;
  GraphCache<Key, Slots> graphs_;
};

}  // namespace rbee::sd
