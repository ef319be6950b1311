// The UNet's denoising step replayed as one device graph (Device::begin_graph_capture), so a step costs one launch
// instead of ~1000 kernel launches and the host work between them.
//
// run() returns what UNet::forward returns, for the same inputs. Per (sample shape, context shape) it keeps an
// entry: device buffers for the step's inputs (sample [B, in, H, W] F32, the timestep conditioning, the context) and,
// once recorded, the graph of UNet::denoise over those buffers. The first call of a shape runs eagerly (that run
// puts every temporary of the step into the allocator's cache, which a capture must draw from), the second records
// and replays, later ones copy their inputs into the buffers and replay. The host part of a step
// (UNet::condition: the timestep's sinusoid, SDXL's time ids) runs before each replay. A device without graphs,
// a capture that fails (the failure is logged once) or RBEE_SD_UNET_GRAPH=0 in the environment: eager steps.
//
// The replayed output is overwritten by the next replay: run() hands out a copy. Entries hold the step's
// intermediates in the graph's memory pool for as long as they live (kMaxEntries shapes, least recently used out).
// Not thread-safe: one UNetStepGraph per thread of work (sd::Pipeline keeps one behind a mutex).
#pragma once

#include <list>

#include "rbee/core/device.h"
#include "rbee/sd/unet.h"

namespace rbee::sd {

class UNetStepGraph {
 public:
  UNetStepGraph(const UNet& unet, Device& device);
  ~UNetStepGraph();
  UNetStepGraph(const UNetStepGraph&) = delete;
  UNetStepGraph& operator=(const UNetStepGraph&) = delete;

  Tensor run(const Tensor& sample, double timestep, const Tensor& context, const UNet::AddedConditions& added);

  // Whether this device records graphs at all (and the environment did not turn them off).
  bool enabled() const { return enabled_; }
  int captures() const { return captures_; }
  int replays() const { return replays_; }

 private:
  static constexpr size_t kMaxEntries = 2;
  struct Entry {
    Shape sample_shape, context_shape;
    Tensor sample, context;   // the step's inputs, in place
    UNet::Conditioning cond;  // likewise
    Tensor out;               // the recorded step's output (rewritten by each replay)
    bool warmed = false, eager_only = false, has_graph = false;
    Device::GraphId graph = 0;
  };
  Entry& entry(const Tensor& sample, const Tensor& context, const UNet::Conditioning& cond);
  void release(Entry& e);

  const UNet& unet_;
  Device& device_;
  bool enabled_ = false;
  int captures_ = 0, replays_ = 0;
  std::list<Entry> entries_;  // most recently used first
};

}  // namespace rbee::sd
