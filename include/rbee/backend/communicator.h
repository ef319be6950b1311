// Communicator: collectives over a group of devices, one rank per device (tensor parallelism, docs/DESIGN.md
// section 7). Each rank is driven by its own host thread, which calls every collective of the step in the same
// order as the other ranks.
//
// Implementations: the host communicator (any devices, here: copies to the host, sums in rank order, copies
// back; never inside a device graph), and the GPU backends' (backends/gpu/collective.h): NCCL on CUDA and RCCL
// on ROCm, both opened at run time, with a one-shot peer-to-peer kernel for small messages where the GPUs can
// reach each other's memory. A backend without one answers nullptr from Backend::make_communicator and the
// model falls back to the host communicator.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rbee/core/tensor.h"

namespace rbee {

class Device;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int size() const = 0;
  virtual Device& device(int rank) const = 0;
  // What carries the data, for logs: "host", "nccl", "rccl", "nccl+p2p" ...
  virtual std::string name() const = 0;

  // x := sum over ranks of x, in place. Called by every rank's thread with its own tensor (F32, contiguous, the
  // same shape on every rank) on device(rank); ordered with that device's kernels like an op (on a GPU it may
  // return before the sum is done). Every rank receives the same bits: the partial sums are added in rank order
  // (or by one reduction whose result is copied to all).
  virtual void all_reduce_sum(int rank, const Tensor& x) = 0;

  // Whether all_reduce_sum may be recorded into a device graph (Device::begin_graph_capture) and replayed.
  virtual bool capturable() const = 0;

  // A rank failed mid-step: ranks waiting in a collective, now or later, throw instead of waiting forever, and
  // the group stays unusable (the model must be loaded again).
  virtual void abort(const std::string& why) = 0;
};

// The host communicator for any devices (one per rank, each used by one thread at a time).
std::unique_ptr<Communicator> make_host_communicator(std::vector<Device*> devices);

}  // namespace rbee
