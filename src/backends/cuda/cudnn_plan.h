// One convolution shape (gpu/dnn.h DnnConv2d) prepared by one of cuDNN's two APIs: the legacy fused call
// (cudnn_legacy.cu) or an operation graph of the backend API (cudnn_graph.cu). cudnn_dnn.cu caches them per shape.
#pragma once

#include <memory>
#include <string>

#include "backends/cuda/cudnn_api.h"
#include "backends/gpu/dnn.h"

namespace rbee::gpu::cudnn {

class ConvPlan {
 public:
  virtual ~ConvPlan() = default;
  // "legacy" or "graph" (for the logs).
  virtual const char* api() const = 0;
  // Workspace bytes run() needs.
  virtual size_t workspace() const = 0;
  // The convolution on the handle's stream; bias / residual null when the shape has none. cuDNN's status.
  virtual Status run(Handle handle, const void* x, const void* w, const void* bias, const void* residual, void* out,
                     void* workspace, size_t workspace_bytes) = 0;
  // Forgets the cuDNN descriptors without destroying them (the destructor then calls no cuDNN function): for the
  // process's end, when cuDNN's libraries may already be torn down (cudnn_dnn.cu says why).
  virtual void abandon() = 0;
};

// nullptr when that API does not take `c` (then *why says so). The handle must be current-device's; zero_bias
// holds at least c.cout 16-bit zeros (the legacy call always adds a bias).
std::unique_ptr<ConvPlan> make_legacy_plan(const Api& api, Handle handle, const DnnConv2d& c, const void* zero_bias,
                                           std::string* why);
std::unique_ptr<ConvPlan> make_graph_plan(const Api& api, Handle handle, const DnnConv2d& c, std::string* why);

}  // namespace rbee::gpu::cudnn
