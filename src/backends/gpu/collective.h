// Collectives over the GPUs of one backend (rbee/backend/communicator.h), for tensor parallelism.
//
// all_reduce_sum takes one of three paths, chosen by message size and what the machine offers (the same choice
// on every rank, since every rank passes the same size):
//  - one-shot peer-to-peer (GPUs that can reach each other's memory, cudaDeviceCanAccessPeer): one kernel on each
//    rank pushes its values, each as one 8-byte word carrying the value and the round number, into every peer's
//    inbox through peer access, then sums the words of every rank in rank order, spinning on each word until it
//    carries the current round (no separate flags or fences: a reader sees value and round together), so all
//    ranks get the same bits. One launch per kOneShotChunk elements, no host involvement: it records into decode
//    graphs, one kernel per all-reduce and one network crossing (stores) per element. It is launched like the
//    decode kernels around it (programmatic dependent launch on sm_90, unless RBEE_PDL=0 or
//    RBEE_ALLREDUCE_PDL=0): it starts while the projection before it ends, and lets the norm + gemv after it
//    start and load its weights while it waits for its peers. Used for messages up to
//    kOneShotMaxBytes (decode steps), for every message while a graph is being recorded, and for every message
//    when no collective library is present.
//  - NCCL (CUDA) / RCCL (ROCm), opened at run time (nccl_api.h): larger messages outside graph capture (prompt
//    steps), where its ring/tree algorithms and copy engines beat the one-shot kernel's n-fold peer reads.
//  - the host communicator, when the GPUs cannot reach each other and no library is present (never recorded).
//
// The one-shot words carry a per-block round number kept in device memory and advanced by the kernel, so a
// replayed graph needs no host update. Inboxes are double-buffered by round parity: a rank may start round k + 1
// while a slow peer still reads round k's words; it cannot reach round k + 2 before every peer has sent round
// k + 1, which they do only after finishing round k.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/gpu/nccl_api.h"
#include "rbee/backend/communicator.h"

namespace rbee::gpu {

class GpuDevice;

class GpuCommunicator final : public Communicator {
 public:
  static constexpr int kMaxRanks = 8;
  static constexpr int kBlocks = 64;                // blocks of a one-shot launch (a round counter per block)
  static constexpr int kThreads = 512;
  static constexpr int64_t kOneShotChunk = 1 << 18;  // elements per one-shot launch (1 MiB of f32)
  static constexpr int64_t kOneShotMaxBytes = 1 << 20;

  // Throws Backend when the devices can neither reach each other nor use a collective library (the caller then
  // uses the host communicator); `why` says which paths are available.
  GpuCommunicator(std::vector<GpuDevice*> devices, std::string* why);
  ~GpuCommunicator() override;

  int size() const override { return (int)devices_.size(); }
  Device& device(int rank) const override;
  std::string name() const override;
  bool capturable() const override { return p2p_; }
  void all_reduce_sum(int rank, const Tensor& x) override;
  void abort(const std::string& why) override;

 private:
  void one_shot(int rank, float* x, int64_t n);

  std::vector<GpuDevice*> devices_;
  bool p2p_ = false;
  const nccl::Api* nccl_ = nullptr;
  std::vector<nccl::Comm> comms_;
  std::unique_ptr<Communicator> host_;  // no peer access and no library
  // Per rank: inbox [2 parities][ranks][kOneShotChunk] u64 (peers write slot p: value bits | round << 32),
  // rounds [kBlocks] u32; coherent device memory (device_malloc_coherent).
  std::vector<uint64_t*> inbox_;
  std::vector<uint32_t*> rounds_;
  std::string aborted_;
};

}  // namespace rbee::gpu
