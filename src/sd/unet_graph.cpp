// The UNet step as a replayed device graph (sd/unet_graph.h).
#include "sd/unet_graph.h"

#include <cstdlib>
#include <string_view>

#include "rbee/core/env.h"
#include "rbee/core/error.h"
#include "rbee/core/profile.h"
#include "rbee/ops.h"

namespace rbee::sd {
namespace {

// Off on devices without graphs, by RBEE_SD_UNET_GRAPH=0, and under the per-layer profiler (it synchronizes
// after every layer, which a capture cannot record).
bool graphs_wanted(const Device& device) {
  const bool off = !env::flag_or("RBEE_SD_UNET_GRAPH", true);
  return device.supports_graphs() && !off && !profile::enabled();
}

}  // namespace

UNetStepGraph::UNetStepGraph(const UNet& unet, Device& device)
    : unet_(unet), device_(device), graphs_(device, kMaxEntries, "sd: UNet step", graphs_wanted(device)) {}

std::string UNetStepGraph::Key::to_string() const {
  return fmt::format("for sample {} and context {}", sample_shape.to_string(), context_shape.to_string());
}

Tensor UNetStepGraph::run(const Tensor& sample, double timestep, const Tensor& context,
                          const UNet::AddedConditions& added) {
  RBEE_CHECK(sample.rank() == 4, "unet step: sample must be [B, C, H, W], got {}", sample.shape().to_string());
  const UNet::Conditioning cond = unet_.condition(sample.dim(0), timestep, added, device_);
  if (!graphs_.enabled()) return unet_.denoise(sample, cond, context);
  return graphs_.run(
      Key{sample.shape(), context.shape(), context.dtype()},
      [&] {
        Slots in;
        in.sample = Tensor::empty(sample.shape(), sample.dtype(), device_);
        in.context = Tensor::empty(context.shape(), context.dtype(), device_);
        in.cond.t = Tensor::empty(cond.t.shape(), cond.t.dtype(), device_);
        if (cond.add_in.defined()) in.cond.add_in = Tensor::empty(cond.add_in.shape(), cond.add_in.dtype(), device_);
        return in;
      },
      [&](Slots& in) {
        // Inputs in place: the graph (or the eager step) reads them from these addresses.
        ops::copy(in.sample, sample.to(device_));
        ops::copy(in.context, context.to(device_));
        ops::copy(in.cond.t, cond.t);
        if (cond.add_in.defined()) ops::copy(in.cond.add_in, cond.add_in);
      },
      [&](const Slots& in) { return unet_.denoise(in.sample, in.cond, in.context); });
}

}  // namespace rbee::sd
