// Collectives over the GPUs of one backend (rbee/backend/communicator.h), for tensor parallelism.
//
// all_reduce_sum takes one of four paths, chosen by message size and what the machine offers (the same choice
// on every rank, since every rank passes the same size):
//  - one-shot peer-to-peer (GPUs that can reach each other's memory, cudaDeviceCanAccessPeer), small messages
//    (up to kOneShotMaxBytes: up to 32 decode rows of a 4096-wide model): one kernel on each rank pushes its values, each as one
//    8-byte word carrying the value and the round number, into every peer's inbox through peer access, then sums
//    the words of every rank in rank order, spinning on each word until it carries the current round (no
//    separate flags or fences: a reader sees value and round together), so all ranks get the same bits. No host
//    involvement: it records into decode graphs, one kernel per all-reduce and one network crossing (stores) per
//    element. It is launched like the decode kernels around it (programmatic dependent launch on sm_90, unless
//    RBEE_PDL=0 or RBEE_ALLREDUCE_PDL=0): it starts while the projection before it ends, and lets the norm + gemv
//    after it start and load its weights while it waits for its peers.
//  - flag peer-to-peer, larger messages (many decode rows, prompt steps up to kFlagMaxBytes, and any size while
//    a graph is recorded or when no collective library is present): the same push-then-sum in rank order, but
//    the values travel alone (4 bytes each, in 16-byte stores; four 4-byte ones with RBEE_ALLREDUCE_STORES=split)
//    and one flag per block and peer, written with a system-scope release (RBEE_ALLREDUCE_FENCE=thread or block:
//    after a fence instead), says that a block's values arrived: half the bytes over the link of the one-shot
//    words, for one flag round trip more. Launched like the
//    one-shot kernel, on kFlagBlocks blocks (RBEE_ALLREDUCE_BLOCKS=N: N blocks, 1 to kMaxFlagBlocks; 64 was the
//    fourth session's grid) that read their peers' values as 16-byte loads through L2 (RBEE_ALLREDUCE_LOADS=scalar: one volatile 4-byte load per value,
//    as before).
//  - NCCL (CUDA) / RCCL (ROCm), opened at run time (nccl_api.h): messages above kFlagMaxBytes outside graph
//    capture, where its ring/tree algorithms and copy engines beat the peer-to-peer kernels.
//  - the host communicator, when the GPUs cannot reach each other and no library is present (never recorded).
// all_gather_columns (rbee/backend/column_gather.h: each rank's own columns of [rows, cols]) takes the flag kernel
// in gather mode above kOneShotMaxBytes where the GPUs reach each other: each rank pushes only the units of its own
// columns (1 / ranks of the bytes of an all-reduce of the same tensor) with the same flags and rounds, and every
// rank copies each unit from its owner's inbox instead of summing. Smaller messages (a few decode rows: the one-shot
// kernel's latency, not its bytes, is the cost there), RBEE_ALLREDUCE=oneshot or nccl, and RBEE_TP_GATHER=sum (as
// before; for comparisons) take gather_columns_by_sum: zeros, then all_reduce_sum.
// all_reduce_sum_with (rbee/backend/reduce_with.h): both peer-to-peer kernels add rank 0's addend to its values as
// they push them (no launch of its own; the same bits as an add before the sum) and first ask for the first bytes of
// next_read in L2 (the weights the rank reads next: the HBM idles while the kernel waits on the link); a library
// path adds the addend by an op first and drops the hint.
// RBEE_ALLREDUCE=oneshot | flag | ll | nccl forces one path where it is possible (for comparisons: oneshot is the
// one-shot kernel up to 1 MiB as before the flag kernel existed; ll is the ll kernel wherever flag would run;
// nccl is the library for every size, also recorded into graphs); the default (auto) is the size rule above.
//  - ll (only where asked for, until measured): the one-shot protocol (8-byte value | round words, no fences or
//    flags) with every thread keeping a batch of 16-byte units in flight, loads before stores and polls before
//    checks, on the flag kernel's grid (RBEE_ALLREDUCE_BLOCKS), with an inbox and round counters of its own.
// RBEE_ALLREDUCE_STORES=wide: the flag kernel copies its 16-byte units (x, the addend, the pushes to the peers) as
// one 16-byte access each; split (the default, as measured so far): four 4-byte accesses, which is what the
// compiler makes of a unit aligned like a float (the PTX of flag_all_reduce<4> has st.global.f32 pushes).
// RBEE_ALLREDUCE_FENCE=release: the flag kernel's flags written with a release and read with an acquire at system
// scope, no fences (thread: a fence per thread, the default; block: one per block).
//
// Both peer-to-peer kernels carry a per-block round number kept in device memory and advanced by the kernel, so
// a replayed graph needs no host update. Inboxes are double-buffered by round parity: a rank may start round
// k + 1 while a slow peer still reads round k's values; it cannot reach round k + 2 before every peer has sent
// round k + 1, which they do only after finishing round k.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/gpu/nccl_api.h"
#include "rbee/backend/column_gather.h"
#include "rbee/backend/communicator.h"
#include "rbee/backend/reduce_norm.h"
#include "rbee/backend/reduce_with.h"

namespace rbee::gpu {

class GpuDevice;

// An L2 prefetch an all-reduce kernel issues first (ReduceExtras::next_read): [p, p + bytes) where rows == 0, else the
// first `bytes` / rows bytes of each of `rows` rows of row_bytes bytes (prefetch_l2_row_heads).
struct L2Hint {
  const void* p = nullptr;
  int64_t bytes = 0;
  int64_t rows = 0, row_bytes = 0;
};

class GpuCommunicator final : public Communicator, public ColumnGather, public ReduceWith, public ReduceNormQMatmul {
 public:
  static constexpr int kMaxRanks = 8;
  static constexpr int kBlocks = 64;                // blocks of a one-shot launch (a round counter per block)
  static constexpr int kFlagBlocks = 128;           // blocks of a flag launch by default (about one per SM of an H100)
  static constexpr int kMaxFlagBlocks = 256;        // round counters and flags kept per rank
  static constexpr int kThreads = 512;
  static constexpr int64_t kOneShotChunk = 1 << 18;  // elements per one-shot launch (1 MiB of f32)
  static constexpr int64_t kOneShotMaxBytes = 512 << 10;  // measured: one-shot 4.1 us at 256 KiB (flag 7.3), 11.9 at 1 MiB (flag 11.3)
  static constexpr int64_t kFlagChunk = 1 << 20;     // elements per flag launch (4 MiB of f32)
  static constexpr int64_t kFlagMaxBytes = 4 << 20;
  // ReduceExtras::next_read: bytes asked for in L2 per byte of the message (the link carries ~0.1 TB/s of a 1 MiB
  // decode message while the HBM could read ~3 TB/s), at most RBEE_ALLREDUCE_PREFETCH_MB (default kPrefetchCapMiB,
  // half of an H100's L2; 0: no prefetch), taken as the first bytes of every row of a 2-D tensor (each reader of
  // a row gets a head start; at least kMinRowHead bytes a row, else nothing), or with RBEE_ALLREDUCE_PREFETCH=rows
  // as the tensor's leading bytes.
  static constexpr int64_t kPrefetchPerByte = 24;
  static constexpr int64_t kPrefetchCapMiB = 24;
  static constexpr int64_t kMinRowHead = 512;  // bytes per row below which the row-heads layout asks for nothing
  // all_reduce_add_rms_norm_qmatmul (collective_norm.cu): blocks of its kernel at most (a row or more each) and the
  // floats of each block's inbox region (its rows, at most kNormSlot floats in all): 4 MiB per parity and sender.
  static constexpr int kNormMaxBlocks = 128;
  static constexpr int64_t kNormSlot = 8192;
  // The path RBEE_ALLREDUCE asks for (read when the communicator is made).
  enum class Path { Auto, OneShot, Flag, Ll, Library };

  // Throws Backend when the devices can neither reach each other nor use a collective library (the caller then
  // uses the host communicator); `why` says which paths are available.
  GpuCommunicator(std::vector<GpuDevice*> devices, std::string* why);
  ~GpuCommunicator() override;

  int size() const override { return (int)devices_.size(); }
  Device& device(int rank) const override;
  std::string name() const override;
  bool capturable() const override { return p2p_; }
  void all_reduce_sum(int rank, const Tensor& x) override;
  // Both peer-to-peer kernels add rank 0's addend as they push it and ask for next_read's first bytes in L2
  // before they wait (prefetch_cap_); the library path adds the addend by an op first and ignores the hint.
  void all_reduce_sum_with(int rank, const Tensor& x, const ReduceExtras& extras) override;
  void all_gather_columns(int rank, const Tensor& x, std::span<const int64_t> bounds) override;
  // The all-reduce, the residual add and the norm in one kernel (collective_norm.cu), then the 16-bit vendor GEMM:
  // for F16 / BF16 weights at the rows that take the vendor GEMM, over peer access; false elsewhere.
  bool all_reduce_add_rms_norm_qmatmul(int rank, const Tensor& x, const Tensor& addend, const Tensor& residual,
                                       const Tensor& norm_weight, float eps, const Tensor& w, const Tensor& sum_out,
                                       const Tensor& out) override;
  void abort(const std::string& why) override;

 private:
  // all_reduce_sum(_with): the checks, then the path for x's size.
  void reduce(int rank, const Tensor& x, const ReduceExtras& extras);
  // addend: rank 0's ReduceExtras::addend (n floats), or null; hint: issued by the first chunk's launch.
  void one_shot(int rank, float* x, int64_t n, const float* addend = nullptr, L2Hint hint = {});
  // bounds: all_gather_columns' column bounds of a [n / cols, cols] tensor (gather mode), or empty (sum).
  void flag(int rank, float* x, int64_t n, int64_t cols = 0, std::span<const int64_t> bounds = {},
            const float* addend = nullptr, L2Hint hint = {});
  // collective_norm.cu: whether the fused pass takes these operands (shapes, dtypes, settings: the same on every
  // rank), and its buffers.
  bool reduce_norm_fits(const Tensor& x, const Tensor& w) const;
  // The L2 prefetch an all-reduce of x issues for next_read (ReduceExtras::next_read): its first bytes, as many as
  // the HBM could read while the link carries x (kPrefetchPerByte per message byte), at most prefetch_cap_; each
  // row's head where prefetch_row_heads_. Empty where next_read is undefined or on another device.
  L2Hint prefetch_hint(const Tensor& x, const Tensor& next_read) const;
  void alloc_norm_buffers();
  void free_norm_buffers();
  // The ll kernel (RBEE_ALLREDUCE=ll), in chunks of kOneShotChunk elements; addend and hint as in one_shot.
  void ll(int rank, float* x, int64_t n, const float* addend = nullptr, L2Hint hint = {});

  std::vector<GpuDevice*> devices_;
  bool p2p_ = false;
  const nccl::Api* nccl_ = nullptr;
  std::vector<nccl::Comm> comms_;
  std::unique_ptr<Communicator> host_;  // no peer access and no library
  // Per rank: inbox [2 parities][ranks][kOneShotChunk] u64 (peers write slot p: value bits | round << 32),
  // rounds [kMaxFlagBlocks] u32 (block b's last round, whichever kernel ran it; the one-shot kernel uses the first
  // kBlocks); coherent device memory (device_malloc_coherent).
  std::vector<uint64_t*> inbox_;
  std::vector<uint32_t*> rounds_;
  // Per rank, for the flag kernel: inbox [2 parities][ranks][kFlagChunk] f32, flags [ranks][kMaxFlagBlocks] u32
  // (the round each sender's block last delivered); the round counters are the one-shot kernel's.
  std::vector<float*> flag_inbox_;
  std::vector<uint32_t*> flags_;
  // Per rank, for the fused all-reduce + norm (collective_norm.cu), a protocol of its own: inbox [2 parities][ranks]
  // [kNormMaxBlocks][kNormSlot] f32, flags [ranks][kNormMaxBlocks] u32, rounds [kNormMaxBlocks] u32; allocated only
  // where RBEE_TP_REDUCE_NORM=1 when the communicator is made (else the pass is declined).
  std::vector<float*> norm_inbox_;
  std::vector<uint32_t*> norm_flags_;
  std::vector<uint32_t*> norm_rounds_;
  // Per rank, for the ll kernel (allocated only under RBEE_ALLREDUCE=ll): inbox [2 parities][ranks][kOneShotChunk]
  // u64 words as the one-shot kernel's, rounds [kMaxFlagBlocks] u32 that only the ll kernel advances.
  std::vector<uint64_t*> ll_inbox_;
  std::vector<uint32_t*> ll_rounds_;
  Path path_ = Path::Auto;
  bool block_fence_ = false;  // RBEE_ALLREDUCE_FENCE=block: the flag kernel fences once per block (flag_all_reduce)
  // RBEE_ALLREDUCE_FENCE (default release: release / acquire flags, no fences; thread or block: fences), measured on
  // two H200s (docs/perf-notes/multi-device.md, eighth session): 1 MiB 10.6 -> 7.9 us with wide stores.
  bool release_flags_ = true;
  int flag_blocks_ = kFlagBlocks;  // RBEE_ALLREDUCE_BLOCKS
  bool wide_loads_ = true;         // RBEE_ALLREDUCE_LOADS=scalar: false
  bool wide_stores_ = true;        // RBEE_ALLREDUCE_STORES (default wide): the flag kernel's units as one 16-byte access; split: four
  bool gather_kernel_ = true;      // RBEE_TP_GATHER=sum: false (all_gather_columns by zeros and all_reduce_sum)
  int64_t prefetch_cap_ = kPrefetchCapMiB << 20;  // RBEE_ALLREDUCE_PREFETCH_MB, in bytes
  bool prefetch_row_heads_ = true;  // RBEE_ALLREDUCE_PREFETCH=rows: false (the first rows, not each row's head)
  std::string aborted_;
};

}  // namespace rbee::gpu
