// The UNet step as a replayed device graph (sd/unet_graph.h).
#include "sd/unet_graph.h"

#include <cstdlib>
#include <string_view>

#include "rbee/core/error.h"
#include "rbee/core/log.h"
#include "rbee/core/profile.h"
#include "rbee/ops.h"

namespace rbee::sd {

UNetStepGraph::UNetStepGraph(const UNet& unet, Device& device) : unet_(unet), device_(device) {
  const char* env = std::getenv("RBEE_SD_UNET_GRAPH");
  const bool off = env && std::string_view(env) == "0";
  // The per-layer profiler synchronizes after every layer, which a capture cannot record.
  enabled_ = device.supports_graphs() && !off && !profile::enabled();
}

UNetStepGraph::~UNetStepGraph() {
  for (Entry& e : entries_) {
    try {
      release(e);
    } catch (const std::exception&) {
      // the device may already be failing or torn down at exit: nothing left to free then
    }
  }
}

void UNetStepGraph::release(Entry& e) {
  if (!e.has_graph) return;
  e.has_graph = false;
  device_.release_graph(e.graph);
}

UNetStepGraph::Entry& UNetStepGraph::entry(const Tensor& sample, const Tensor& context,
                                           const UNet::Conditioning& cond) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->sample_shape == sample.shape() && it->context_shape == context.shape() &&
        it->context.dtype() == context.dtype()) {
      entries_.splice(entries_.begin(), entries_, it);
      return entries_.front();
    }
  }
  while (entries_.size() >= kMaxEntries) {
    release(entries_.back());
    entries_.pop_back();
  }
  // The buffers exist before the warm-up run, so the capture finds the same cache contents that run left.
  Entry e;
  e.sample_shape = sample.shape();
  e.context_shape = context.shape();
  e.sample = Tensor::empty(sample.shape(), sample.dtype(), device_);
  e.context = Tensor::empty(context.shape(), context.dtype(), device_);
  e.cond.t = Tensor::empty(cond.t.shape(), cond.t.dtype(), device_);
  if (cond.add_in.defined()) e.cond.add_in = Tensor::empty(cond.add_in.shape(), cond.add_in.dtype(), device_);
  entries_.push_front(std::move(e));
  return entries_.front();
}

Tensor UNetStepGraph::run(const Tensor& sample, double timestep, const Tensor& context,
                          const UNet::AddedConditions& added) {
  RBEE_CHECK(sample.rank() == 4, "unet step: sample must be [B, C, H, W], got {}", sample.shape().to_string());
  const UNet::Conditioning cond = unet_.condition(sample.dim(0), timestep, added, device_);
  if (!enabled_) return unet_.denoise(sample, cond, context);
  Entry& e = entry(sample, context, cond);
  // Inputs in place: the graph (or the eager step) reads them from these addresses.
  ops::copy(e.sample, sample.to(device_));
  ops::copy(e.context, context.to(device_));
  ops::copy(e.cond.t, cond.t);
  if (cond.add_in.defined()) ops::copy(e.cond.add_in, cond.add_in);
  if (e.has_graph) {
    device_.replay_graph(e.graph);
    ++replays_;
    return e.out.clone();
  }
  if (e.eager_only || !e.warmed) {
    e.warmed = true;  // this eager run put the step's temporaries into the allocator's cache
    return unet_.denoise(e.sample, e.cond, e.context);
  }
  try {
    device_.begin_graph_capture();
  } catch (const std::exception& err) {
    enabled_ = false;
    log::info("sd: UNet step graphs off on {}: {}", device_.id(), err.what());
    return unet_.denoise(e.sample, e.cond, e.context);
  }
  Tensor out;
  try {
    out = unet_.denoise(e.sample, e.cond, e.context);
  } catch (const std::exception& err) {
    try {
      device_.release_graph(device_.end_graph_capture());
    } catch (const std::exception&) {
      // end_graph_capture reports the broken capture: handled by running eagerly below
    }
    e.eager_only = true;
    log::warn("sd: UNet step {} runs eagerly: its graph capture failed: {}", e.sample_shape.to_string(), err.what());
    return unet_.denoise(e.sample, e.cond, e.context);
  }
  try {
    e.graph = device_.end_graph_capture();
  } catch (const std::exception& err) {
    e.eager_only = true;
    log::warn("sd: UNet step {} runs eagerly: {}", e.sample_shape.to_string(), err.what());
    return unet_.denoise(e.sample, e.cond, e.context);
  }
  e.has_graph = true;
  e.out = out;
  ++captures_;
  log::debug("sd: UNet step graph recorded for sample {} and context {}", e.sample_shape.to_string(),
             e.context_shape.to_string());
  device_.replay_graph(e.graph);
  ++replays_;
  return e.out.clone();
}

}  // namespace rbee::sd
