// One attention shape (gpu/dnn.h DnnAttention) prepared as a fused flash-attention graph of cuDNN's backend API
// (cudnn_sdpa.cu). cudnn_dnn.cu caches them per shape.
#pragma once

#include <memory>
#include <string>

#include "backends/cuda/cudnn_api.h"
#include "backends/gpu/dnn.h"

namespace rbee::gpu::cudnn {

class SdpaPlan {
 public:
  virtual ~SdpaPlan() = default;
  // Workspace bytes run() needs.
  virtual size_t workspace() const = 0;
  // Which softmax pattern the engine took ("div" or "stats", for the logs).
  virtual const char* pattern() const = 0;
  // The attention on the handle's stream; scale multiplies q.k (passed by value). cuDNN's status.
  virtual Status run(Handle handle, float scale, const void* q, const void* k, const void* v, void* out,
                     void* workspace) = 0;
  // Forgets the descriptors without destroying them (the process's end: cudnn_dnn.cu says why).
  virtual void abandon() = 0;
};

// nullptr when no engine of this cuDNN takes `a` (then *why says what was refused). The handle must be the current
// device's; outside graph captures only.
std::unique_ptr<SdpaPlan> make_sdpa_plan(const Api& api, Handle handle, const DnnAttention& a, std::string* why);

}  // namespace rbee::gpu::cudnn
