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
  // Whether tune() has candidates to choose from (graph plans made with several).
  virtual bool needs_tuning() const { return false; }
  // Times each candidate kernel on these operands (out is overwritten; the caller runs the plan afterwards) and keeps
  // the fastest; synchronizes the stream. Outside graph captures only. Returns the kept candidate's heuristic rank.
  virtual int tune(Handle /*handle*/, cudaStream_t /*stream*/, const void* /*x*/, const void* /*w*/,
                   const void* /*bias*/, const void* /*residual*/, void* /*out*/, void* /*workspace*/,
                   size_t /*workspace_bytes*/) {
    return 0;
  }
  // Forgets the cuDNN descriptors without destroying them (the destructor then calls no cuDNN function): for the
  // process's end, when cuDNN's libraries may already be torn down (cudnn_dnn.cu says why).
  virtual void abandon() = 0;
};

// nullptr when that API does not take `c` (then *why says so). The handle must be current-device's; zero_bias
// holds at least c.cout 16-bit zeros (the legacy call always adds a bias).
std::unique_ptr<ConvPlan> make_legacy_plan(const Api& api, Handle handle, const DnnConv2d& c, const void* zero_bias,
                                           std::string* why);
// candidates: how many of the heuristics' best ranked engine configurations to finalize (1: the first that finalizes;
// more: tune() picks among them by time).
std::unique_ptr<ConvPlan> make_graph_plan(const Api& api, Handle handle, const DnnConv2d& c, int candidates,
                                          std::string* why);

}  // namespace rbee::gpu::cudnn
