// The UNet step as a replayed device graph (sd/unet_graph.h).
#include "sd/unet_graph.h"

#include <cstdlib>
#include <string_view>

#include "rbee/core/env.h"
#include "rbee/core/error.h"
#include "rbee/core/profile.h"
#include "rbee/ops.h"
#include "sd/flop_count.h"

namespace rbee::sd {
namespace {

// Off on devices without graphs, by RBEE_SD_UNET_GRAPH=0, and under the per-layer profiler (it synchronizes
// after every layer, which a capture cannot record).
bool graphs_wanted(const Device& device) {
  const bool off = !env::flag_or("RBEE_SD_UNET_GRAPH", true);
  return device.supports_graphs() && !off && !profile::enabled();
}

// UNet::project_context with its products counted by a FlopCounter of its own, not by the caller's (the UNet step's:
// Pipeline::unet_step_flops): the projections are made once per context, they are not work of the step.
UNet::ContextProjections project_apart(const UNet& unet, const Tensor& context) {
  FlopCounter apart;
  return unet.project_context(context);
}

}  // namespace

UNetStepGraph::UNetStepGraph(const UNet& unet, Device& device)
    : unet_(unet),
      device_(device),
      context_kv_once_(env::flag_or("RBEE_SD_CONTEXT_KV_ONCE", true)),
      graphs_(device, kMaxEntries, "sd: UNet step", graphs_wanted(device)) {}

bool UNetStepGraph::same_tensor(const Tensor& kv_source, const Tensor& context) {
  return kv_source.defined() && kv_source.buffer() == context.buffer() && kv_source.offset() == context.offset() &&
         kv_source.shape() == context.shape() && kv_source.strides() == context.strides() &&
         kv_source.dtype() == context.dtype();
}

std::string UNetStepGraph::Key::to_string() const {
  return fmt::format("for sample {} and context {}", sample_shape.to_string(), context_shape.to_string());
}

Tensor UNetStepGraph::run(const Tensor& sample, double timestep, const Tensor& context,
                          const UNet::AddedConditions& added) {
  RBEE_CHECK(sample.rank() == 4, "unet step: sample must be [B, C, H, W], got {}", sample.shape().to_string());
  const UNet::Conditioning cond = unet_.condition(sample.dim(0), timestep, added, device_);
  if (!graphs_.enabled()) {
    if (!context_kv_once_) return unet_.denoise(sample, cond, context);
    if (!same_tensor(eager_kv_source_, context)) {
      eager_kv_ = project_apart(unet_, context.to(device_));
      eager_kv_source_ = context;
    }
    return unet_.denoise(sample, cond, eager_kv_);
  }
  return graphs_.run(
      Key{sample.shape(), context.shape(), context.dtype()},
      [&] {
        Slots in;
        in.sample = Tensor::empty(sample.shape(), sample.dtype(), device_);
        in.cond.t = Tensor::empty(cond.t.shape(), cond.t.dtype(), device_);
        if (cond.add_in.defined()) in.cond.add_in = Tensor::empty(cond.add_in.shape(), cond.add_in.dtype(), device_);
        if (context_kv_once_) {
          in.kv = project_apart(unet_, context.to(device_));  // the slots: fresh tensors of this entry
          in.kv_source = context;
        } else {
          in.context = Tensor::empty(context.shape(), context.dtype(), device_);
        }
        return in;
      },
      [&](Slots& in) {
        // Inputs in place: the graph (or the eager step) reads them from these addresses.
        ops::copy(in.sample, sample.to(device_));
        ops::copy(in.cond.t, cond.t);
        if (cond.add_in.defined()) ops::copy(in.cond.add_in, cond.add_in);
        if (!context_kv_once_) {
          ops::copy(in.context, context.to(device_));
        } else if (!same_tensor(in.kv_source, context)) {  // a new context: project it into the slots, eagerly
          const UNet::ContextProjections fresh = project_apart(unet_, context.to(device_));
          for (size_t i = 0; i < fresh.keys.size(); ++i) {
            ops::copy(in.kv.keys[i], fresh.keys[i]);
            ops::copy(in.kv.values[i], fresh.values[i]);
          }
          in.kv_source = context;
        }
      },
      [&](const Slots& in) {
        return context_kv_once_ ? unet_.denoise(in.sample, in.cond, in.kv)
                                : unet_.denoise(in.sample, in.cond, in.context);
      });
}

}  // namespace rbee::sd
