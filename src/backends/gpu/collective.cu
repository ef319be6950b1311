#include "backends/gpu/collective.h"
#include "backends/gpu/collective_prefetch.cuh"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <type_traits>

#include "backends/gpu/gpu_device.h"
#include "backends/gpu/kernels/l2_prefetch.cuh"
#include "backends/gpu/kernels/quant_launch.h"
#include "backends/gpu/peer_load.h"
#include "rbee/core/env.h"
#include "rbee/core/log.h"
#include "rbee/core/tensor.h"
#include "rbee/ops.h"

namespace rbee::gpu {

namespace nccl {

const Api* open_api(std::string* why) {
  static std::once_flag once;
  static Api api;
  static std::string note;
  std::call_once(once, [] {
    if (const char* env = std::getenv("RBEE_NCCL"); env && std::string_view(env) == "off") {
      note = RBEE_GPU_COLLECTIVE_NAME " disabled by RBEE_NCCL=off";
      return;
    }
    void* lib = nullptr;
    for (const char* name : RBEE_GPU_COLLECTIVE_LIBS) {
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    }
    if (!lib) {
      note = RBEE_GPU_COLLECTIVE_NAME " not installed";
      return;
    }
    Api a;
    a.lib = lib;
    a.comm_init_all = reinterpret_cast<CommInitAllFn>(dlsym(lib, "ncclCommInitAll"));
    a.comm_destroy = reinterpret_cast<CommDestroyFn>(dlsym(lib, "ncclCommDestroy"));
    a.comm_abort = reinterpret_cast<CommAbortFn>(dlsym(lib, "ncclCommAbort"));
    a.all_reduce = reinterpret_cast<AllReduceFn>(dlsym(lib, "ncclAllReduce"));
    a.error_string = reinterpret_cast<GetErrorStringFn>(dlsym(lib, "ncclGetErrorString"));
    auto version = reinterpret_cast<GetVersionFn>(dlsym(lib, "ncclGetVersion"));
    if (!a.comm_init_all || !a.comm_destroy || !a.comm_abort || !a.all_reduce || !a.error_string || !version) {
      note = RBEE_GPU_COLLECTIVE_NAME " found but an entry point is missing";
      dlclose(lib);
      return;
    }
    version(&a.version);
    note = fmt::format(RBEE_GPU_COLLECTIVE_NAME " {} opened at run time", a.version);
    api = a;
  });
  if (why) *why = note;
  return api.lib ? &api : nullptr;
}

}  // namespace nccl

namespace {


// One rank's arguments of a one-shot round (the same launch shape on every rank).
struct OneShotArgs {
  float* x;                                           // this rank's data, n elements, summed in place
  const float* addend;                                // rank 0's ReduceExtras::addend (n elements), or null
  L2Hint prefetch;                                    // asked for in L2 first (ReduceExtras::next_read)
  int64_t n;
  uint64_t* inbox[GpuCommunicator::kMaxRanks];        // every rank's inbox: [2 parities][ranks][chunk] words
  uint32_t* rounds;                                   // [blocks]: this rank's last finished round per block
  int64_t chunk;                                      // elements per (parity, sender) slot
  int rank, ranks;
};

// Push-then-poll all-reduce of one chunk. First, the L2 prefetch of what the rank reads next (a.prefetch: the HBM
// idles while this kernel waits on the link); rank 0's addend is added to its values as they are pushed. Block b
// owns elements i with (i mod stride) / blockDim == b, the same on every rank and for every n, so a block's round
// counter, parity and inbox slots are its own.
//  1. Every element the block owns goes, as one 8-byte word (value bits | round << 32), into slot `rank` of
//     every peer's inbox (stores through peer access; no fence or flag: value and round travel in one word,
//     which a reader sees whole).
//  2. Each element is summed in rank order (this rank's own value from x), spinning on each peer's word until
//     it carries this round: the same bits on every rank.
// Reuse: rank r writes round k + 2 into parity k & 1 only after its round k + 1 got every peer's round k + 1
// words for this block, which a peer sends only after its round k kernel (all its reads of that parity) ended.
// Round 0 is skipped at wrap-around (rounds go 0xffffffff -> 2, keeping the parity), so a word never written
// (zero) never matches.
// Launched as a decode kernel (launch_decode_kernel: programmatic dependent launch where enabled): the launch starts
// while the projection before it finishes, and nothing here is read or written before grid_dependency_wait. Its
// trigger comes first, so the decode kernel after it (a norm + gemv) starts too and loads its weights while this
// one waits for its peers' words; that kernel reads x only after its own wait, i.e. after this kernel completed.
// The inbox reuse argument above still holds: a rank's round k + 1 kernel pushes only after its wait, which comes
// after every earlier launch on its stream completed (each decode kernel waits for the one before it).
__global__ void one_shot_all_reduce(OneShotArgs a) {
  issue_prefetch(a.prefetch);  // weights: never written by earlier launches
  grid_dependency_trigger();
  grid_dependency_wait();
  const int b = (int)blockIdx.x;
  uint32_t round = a.rounds[b] + 1u;
  if (round == 0u) round = 2u;
  const uint64_t tag = (uint64_t)round << 32;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t first = (int64_t)b * blockDim.x + threadIdx.x;
  const int64_t parity = (int64_t)(round & 1u) * a.ranks * a.chunk;
  for (int64_t i = first; i < a.n; i += stride) {
    float own = a.x[i];
    if (a.addend) {  // (x_0 + addend) is rank 0's partial: pushed, and kept in x for the sum below (same thread)
      own += a.addend[i];
      a.x[i] = own;
    }
    const uint64_t word = tag | (uint64_t)__float_as_uint(own);
    for (int p = 0; p < a.ranks; ++p) {
      if (p == a.rank) continue;
      *((volatile uint64_t*)a.inbox[p] + parity + (int64_t)a.rank * a.chunk + i) = word;
    }
  }
  // The block's pushes all issued before any of its threads spins: on a GPU it costs a barrier; where threads
  // are run one after the other (tools/gpu_emu) it makes the ranks hand over once per block, not per thread.
  __syncthreads();
  const volatile uint64_t* own = (const volatile uint64_t*)a.inbox[a.rank] + parity;
  for (int64_t i = first; i < a.n; i += stride) {
    float s = 0.f;
    for (int p = 0; p < a.ranks; ++p) {
      float v;
      if (p == a.rank) {
        v = a.x[i];
      } else {
        uint64_t w = own[(int64_t)p * a.chunk + i];
        while ((uint32_t)(w >> 32) != round) w = own[(int64_t)p * a.chunk + i];
        v = __int_as_float((int)(uint32_t)w);
      }
      s += v;
    }
    a.x[i] = s;
  }
  __syncthreads();  // every thread read the round before it advances
  if (threadIdx.x == 0) a.rounds[b] = round;
}

// One rank's arguments of a flag round (the same launch shape on every rank).
struct FlagArgs {
  float* x;                                           // this rank's data, n elements, summed in place
  const float* addend;                                // rank 0's ReduceExtras::addend (n elements), or null
  L2Hint prefetch;                                    // asked for in L2 first (ReduceExtras::next_read)
  int64_t n;
  float* inbox[GpuCommunicator::kMaxRanks];           // every rank's inbox: [2 parities][ranks][chunk] floats
  uint32_t* flags[GpuCommunicator::kMaxRanks];        // every rank's flags: [ranks][kMaxFlagBlocks], the sender's round
  uint32_t* rounds;                                   // [blocks]: this rank's last finished round per block
  int64_t chunk;                                      // elements per (parity, sender) slot
  int rank, ranks;
  bool block_fence;  // one system-scope fence per block (thread 0, after a barrier) instead of one per thread
  bool release_flags;  // no fences: each peer's flag written with a release and read with an acquire (system scope)
  bool wide_loads;   // V == 4: the peers' units as 16-byte loads through L2 (load_peer_f4), else volatile floats
  // Gather mode (all_gather_columns) where cols > 0: x is [.., cols] from element `base` of the whole message on;
  // rank p owns columns [bounds[p], bounds[p + 1]) (whole units: with V == 4 every bound is a multiple of 4).
  int64_t cols, base;
  int64_t bounds[GpuCommunicator::kMaxRanks + 1];
};

// The rank that owns element i of the chunk (gather mode).
__device__ __forceinline__ int column_owner(const FlagArgs& a, int64_t i) {
  const int64_t c = (a.base + i) % a.cols;
  int p = 0;
  while (p + 1 < a.ranks && c >= a.bounds[p + 1]) ++p;
  return p;
}

// V floats moved as one unit. Its alignment is that of a float, so the compiler splits a copy of a Unit<4> into
// four 4-byte accesses (what the flag kernel has done since it exists: RBEE_ALLREDUCE_STORES=split).
template <int V>
struct Unit {
  float v[V];
};

// V floats at a (4 x V)-byte aligned address: a copy of a WideUnit<4> is one 16-byte load or store (the flag kernel
// with RBEE_ALLREDUCE_STORES=wide, and the ll kernel).
template <int V>
struct alignas(sizeof(float) * V) WideUnit {
  float v[V];
};

// The values-only all-reduce of one chunk, for large messages (many decode rows): 4 bytes per value cross the link
// instead of the one-shot kernel's 8, and one flag per block and peer says a block's values arrived. The prefetch
// and the addend as in one_shot_all_reduce.
// Ownership: the message is cut into groups of 4 floats (kFlagGroup; the last may be short), and block b owns the
// groups g with (g mod stride) / blockDim == b, on every rank and in both forms: a group is one unit where V == 4 and
// four units (each one float) where V == 1. The inbox reuse argument below needs a float's inbox word to belong to
// the same block (and so to the same per-block round counter) in every launch; owning single floats where V == 1
// gave two blocks one word when a message of n % 4 != 0 followed a 4-float one while their rounds' parities
// differed (the one-shot kernel advances only the counters of its kBlocks blocks).
//  1. Every unit the block owns goes into slot `rank` of every peer's inbox at this round's parity (plain stores
//     through peer access: one 16-byte store per unit with kWide, RBEE_ALLREDUCE_STORES=wide; else one per float).
//  2. Every thread fences at system scope (its stores are visible to the peers before anything it does next),
//     the block meets at a barrier, then thread p (< ranks, != rank) writes this round into peer p's flag
//     [rank][b]: the peer that sees the flag sees the block's values. RBEE_ALLREDUCE_FENCE=block: the block meets
//     first and thread 0 alone fences and writes every peer's flag (one fence per block, for comparison).
//  3. Thread p spins on its own flag [p][b] until it holds this round or a later one (a peer may already be one
//     round further, writing the other parity), fences, and the block meets again; then each unit is summed in
//     rank order (this rank's own value from x; the peers' values read with volatile loads, never from a stale
//     L1 line): the same bits on every rank.
//  RBEE_ALLREDUCE_FENCE=release (a.release_flags): no fence in steps 2 and 3. The block meets, then thread p writes
//  peer p's flag with a release at system scope (store_release_sys: cumulative, so the stores the other threads
//  made before the barrier are visible to whoever acquires the flag), and in step 3 spins with acquire loads at
//  system scope (load_acquire_sys); the barrier after the spin orders every thread's reads after the acquire.
//  A fence waits for all of the thread's earlier memory operations; the release orders only what precedes it.
// Gather mode (a.cols > 0): step 1 pushes only the units this rank owns, and step 3 copies each unit of a peer
// from that owner's slot (own units stay); the flags, rounds and barriers are the same, so each block still meets
// every peer once per round and the reuse argument below holds unchanged.
// Inbox reuse: as in one_shot_all_reduce (both kernels advance the same per-block round counters, so they can
// follow each other in any order): a peer writes round k + 2 into parity k & 1 only after it saw this rank's
// round k + 1 flag, which this rank sends only after its round k kernel ended. Flags compare as serial numbers
// (a difference read as signed), so the wrap-around (0xffffffff -> 2) keeps the order.
constexpr int kFlagGroup = 4;  // floats per owned group (flag_all_reduce)

template <int V, bool kWide>
__global__ void flag_all_reduce(FlagArgs a) {
  static_assert(V == 1 || V == kFlagGroup, "a unit is one float or one whole group");
  constexpr int kUnitsPerGroup = kFlagGroup / V;
  using U = std::conditional_t<kWide, WideUnit<V>, Unit<V>>;  // RBEE_ALLREDUCE_STORES: 1 access per unit or V
  issue_prefetch(a.prefetch);  // weights: never written by earlier launches
  grid_dependency_trigger();
  grid_dependency_wait();
  const int b = (int)blockIdx.x;
  const int t = (int)threadIdx.x;
  uint32_t round = a.rounds[b] + 1u;
  if (round == 0u) round = 2u;
  const int64_t units = a.n / V;  // V == 4 only where n % 4 == 0 (flag())
  const int64_t groups = (a.n + kFlagGroup - 1) / kFlagGroup;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t first = (int64_t)b * blockDim.x + t;
  const int64_t parity = (int64_t)(round & 1u) * a.ranks * a.chunk;
  U* x = reinterpret_cast<U*>(a.x);
  const bool gather = a.cols > 0;
  // Both passes visit the units this thread owns: those of groups first, first + stride, ... (ownership above).
  for (int64_t g = first; g < groups; g += stride) {
    const int64_t end = (g + 1) * kUnitsPerGroup < units ? (g + 1) * kUnitsPerGroup : units;
    for (int64_t u = g * kUnitsPerGroup; u < end; ++u) {
      if (gather && column_owner(a, u * V) != a.rank) continue;
      U v = x[u];
      if (a.addend) {  // (x_0 + addend) is rank 0's partial: pushed, and kept in x for the sum below (same thread)
        const U r = reinterpret_cast<const U*>(a.addend)[u];
        for (int j = 0; j < V; ++j) v.v[j] += r.v[j];
        x[u] = v;
      }
      for (int p = 0; p < a.ranks; ++p) {
        if (p == a.rank) continue;
        reinterpret_cast<U*>(a.inbox[p] + parity + (int64_t)a.rank * a.chunk)[u] = v;
      }
    }
  }
  const bool peer_thread = t < a.ranks && t != a.rank;
  if (a.release_flags) {
    __syncthreads();
    if (peer_thread) store_release_sys(a.flags[t] + a.rank * GpuCommunicator::kMaxFlagBlocks + b, round);
  } else if (a.block_fence) {
    // The barrier orders every thread's stores before thread 0's fence, which is cumulative (as in a grid sync):
    // the peer that sees thread 0's flag sees the block's values.
    __syncthreads();
    if (t == 0) {
      threadfence_system();
      for (int p = 0; p < a.ranks; ++p) {
        if (p != a.rank) *((volatile uint32_t*)a.flags[p] + a.rank * GpuCommunicator::kMaxFlagBlocks + b) = round;
      }
    }
  } else {
    threadfence_system();
    __syncthreads();
    if (peer_thread) *((volatile uint32_t*)a.flags[t] + a.rank * GpuCommunicator::kMaxFlagBlocks + b) = round;
  }
  // Every flag is sent before any thread spins (tools/gpu_emu runs the threads of a block one after the other).
  __syncthreads();
  if (peer_thread && a.release_flags) {
    const uint32_t* flag = a.flags[a.rank] + t * GpuCommunicator::kMaxFlagBlocks + b;
    while ((int32_t)(load_acquire_sys(flag) - round) < 0) {
    }
  } else if (peer_thread) {
    const volatile uint32_t* flag = (const volatile uint32_t*)a.flags[a.rank] + t * GpuCommunicator::kMaxFlagBlocks + b;
    while ((int32_t)(*flag - round) < 0) {
    }
    threadfence_system();
  }
  __syncthreads();
  const volatile float* own = (const volatile float*)a.inbox[a.rank] + parity;
  U* xo = x;
  for (int64_t g = first; g < groups; g += stride) {
    const int64_t end = (g + 1) * kUnitsPerGroup < units ? (g + 1) * kUnitsPerGroup : units;
    for (int64_t u = g * kUnitsPerGroup; u < end; ++u) {
      if (gather) {
        const int p = column_owner(a, u * V);
        if (p == a.rank) continue;
        const volatile float* src = own + (int64_t)p * a.chunk + u * V;
        U v;
        if constexpr (V == 4) {
          if (a.wide_loads) {
            const float4 w = load_peer_f4(reinterpret_cast<const float4*>(const_cast<const float*>(src)));
            xo[u] = U{{w.x, w.y, w.z, w.w}};
            continue;
          }
        }
        for (int j = 0; j < V; ++j) v.v[j] = src[j];
        xo[u] = v;
        continue;
      }
      U s;
      for (int j = 0; j < V; ++j) s.v[j] = 0.f;
      for (int p = 0; p < a.ranks; ++p) {
        if (p == a.rank) {
          const U v = xo[u];
          for (int j = 0; j < V; ++j) s.v[j] += v.v[j];
        } else {
          const volatile float* src = own + (int64_t)p * a.chunk + u * V;
          if constexpr (V == 4) {
            if (a.wide_loads) {
              // After the flag's acquire: one 16-byte load served by L2, where the peer's stores landed.
              const float4 v = load_peer_f4(reinterpret_cast<const float4*>(const_cast<const float*>(src)));
              s.v[0] += v.x;
              s.v[1] += v.y;
              s.v[2] += v.z;
              s.v[3] += v.w;
              continue;
            }
          }
          for (int j = 0; j < V; ++j) s.v[j] += src[j];
        }
      }
      xo[u] = s;
    }
  }
  __syncthreads();  // every thread read the round before it advances
  if (t == 0) a.rounds[b] = round;
}

// One rank's arguments of an ll round (the same launch shape on every rank).
struct LlArgs {
  float* x;                                           // this rank's data, n elements, summed in place
  const float* addend;                                // rank 0's ReduceExtras::addend (n elements), or null
  L2Hint prefetch;                                    // asked for in L2 first (ReduceExtras::next_read)
  int64_t n;
  uint64_t* inbox[GpuCommunicator::kMaxRanks];        // every rank's ll inbox: [2 parities][ranks][chunk] words
  uint32_t* rounds;                                   // [blocks]: this rank's ll rounds so far, per block
  int64_t chunk;                                      // words per (parity, sender) slot
  int rank, ranks;
};

// Units (V floats) a thread of the ll kernel has in flight at once: all its loads of x, then all its stores; all
// its polls of a peer's words, then the checks. A whole chunk (kOneShotChunk floats) is one unit per thread on 128
// blocks of kThreads, two on 64. The batch sets the registers, and they the blocks an SM holds, which the
// co-residency of the whole grid needs: ll_all_reduce<4> takes 48 registers on sm_90 at 2 (two blocks of 512 per
// SM: 128 blocks fit a GPU of 64 SMs, 256 one of 128; the flag kernel's 37 fit three), 84 at 4 (one per SM).
constexpr int kLlBatch = 2;

// Unit v as V words (value bits | tag) at w, in 16-byte stores of two words where V == 4.
template <int V>
__device__ __forceinline__ void ll_push(uint64_t* w, const WideUnit<V>& v, uint64_t tag) {
  if constexpr (V == 1) {
    *(volatile uint64_t*)w = tag | (uint64_t)__float_as_uint(v.v[0]);
  } else {
    for (int j = 0; j < V; j += 2) {
      store_peer_u64x2(w + j, tag | (uint64_t)__float_as_uint(v.v[j]), tag | (uint64_t)__float_as_uint(v.v[j + 1]));
    }
  }
}

// The V words of a unit at w, read from memory (16-byte loads of two words where V == 4).
template <int V>
__device__ __forceinline__ void ll_poll(const uint64_t* w, uint64_t (&out)[V]) {
  if constexpr (V == 1) {
    out[0] = *(const volatile uint64_t*)w;
  } else {
    for (int j = 0; j < V; j += 2) load_peer_u64x2(w + j, out[j], out[j + 1]);
  }
}

// Whether every word of a unit carries `round`.
template <int V>
__device__ __forceinline__ bool ll_arrived(const uint64_t (&w)[V], uint32_t round) {
  bool ok = true;
  for (int j = 0; j < V; ++j) ok = ok && (uint32_t)(w[j] >> 32) == round;
  return ok;
}

// The one-shot protocol (value | round in one 8-byte word, no fence or flag) rebuilt for a link that carries a
// message only as fast as it is fed (RBEE_ALLREDUCE=ll): one_shot_all_reduce's thread works on one element at a
// time, so each of its elements costs an HBM load before its store and a peer word's load before the next poll,
// one after the other (the compiler cannot move a load of x across a volatile store to an inbox that may alias
// it); here a thread loads all of a batch of kLlBatch units (V = 4: 16 bytes of x each) before it stores any, and
// polls all of a peer's words of the batch before it checks one, so a block keeps batch x blockDim units in
// flight each way; the words travel as 16-byte stores of two (store_peer_u64x2: each 8-byte word is seen whole,
// the pair need not be). The prefetch, the addend and the launch (programmatic dependent, nothing touched before
// grid_dependency_wait) as in one_shot_all_reduce; the sum in rank order as there: the same bits on every rank.
// Block b owns the units u with (u mod stride) / blockDim == b.
// Inbox reuse: every ll launch advances every block's round counter (and no other kernel uses them or the ll
// inbox), so all the counters of a rank hold its number of ll launches and one launch writes one parity whatever
// the units' owners (V = 1 or 4). A rank writes round k + 2 into parity k & 1 only after its round k + 1 launch
// ended, whose block 0 (every launch has unit 0) waited for every peer's round k + 1 words, which a peer sends
// only after its round k launch (all its reads of parity k & 1) ended: each launch waits for the one before it
// on its stream, as in one_shot_all_reduce. Round 0 is skipped at wrap-around as there.
template <int V>
__global__ void ll_all_reduce(LlArgs a) {
  issue_prefetch(a.prefetch);  // weights: never written by earlier launches
  grid_dependency_trigger();
  grid_dependency_wait();
  const int b = (int)blockIdx.x;
  uint32_t round = a.rounds[b] + 1u;
  if (round == 0u) round = 2u;
  const uint64_t tag = (uint64_t)round << 32;
  const int64_t units = a.n / V;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t first = (int64_t)b * blockDim.x + threadIdx.x;
  const int64_t parity = (int64_t)(round & 1u) * a.ranks * a.chunk;
  WideUnit<V>* x = reinterpret_cast<WideUnit<V>*>(a.x);
  const WideUnit<V>* addend = reinterpret_cast<const WideUnit<V>*>(a.addend);
  for (int64_t u0 = first; u0 < units; u0 += kLlBatch * stride) {
    WideUnit<V> v[kLlBatch];
#pragma unroll
    for (int k = 0; k < kLlBatch; ++k) {
      if (u0 + k * stride < units) v[k] = x[u0 + k * stride];
    }
    if (addend) {  // (x_0 + addend) is rank 0's partial: pushed, and kept in x for the sum below (same thread)
#pragma unroll
      for (int k = 0; k < kLlBatch; ++k) {
        const int64_t u = u0 + k * stride;
        if (u >= units) continue;
        const WideUnit<V> r = addend[u];
        for (int j = 0; j < V; ++j) v[k].v[j] += r.v[j];
        x[u] = v[k];
      }
    }
    for (int p = 0; p < a.ranks; ++p) {
      if (p == a.rank) continue;
      uint64_t* slot = a.inbox[p] + parity + (int64_t)a.rank * a.chunk;
#pragma unroll
      for (int k = 0; k < kLlBatch; ++k) {
        const int64_t u = u0 + k * stride;
        if (u < units) ll_push<V>(slot + u * V, v[k], tag);
      }
    }
  }
  // The block's pushes all issued before any of its threads polls (tools/gpu_emu: see one_shot_all_reduce).
  __syncthreads();
  const uint64_t* own = a.inbox[a.rank] + parity;
  for (int64_t u0 = first; u0 < units; u0 += kLlBatch * stride) {
    WideUnit<V> s[kLlBatch];
#pragma unroll
    for (int k = 0; k < kLlBatch; ++k) {
      for (int j = 0; j < V; ++j) s[k].v[j] = 0.f;
    }
    for (int p = 0; p < a.ranks; ++p) {
      if (p == a.rank) {
#pragma unroll
        for (int k = 0; k < kLlBatch; ++k) {
          const int64_t u = u0 + k * stride;
          if (u >= units) continue;
          const WideUnit<V> mine = x[u];
          for (int j = 0; j < V; ++j) s[k].v[j] += mine.v[j];
        }
        continue;
      }
      const uint64_t* slot = own + (int64_t)p * a.chunk;
      uint64_t w[kLlBatch][V];
#pragma unroll
      for (int k = 0; k < kLlBatch; ++k) {
        if (u0 + k * stride < units) ll_poll<V>(slot + (u0 + k * stride) * V, w[k]);
      }
#pragma unroll
      for (int k = 0; k < kLlBatch; ++k) {
        const int64_t u = u0 + k * stride;
        if (u >= units) continue;
        while (!ll_arrived<V>(w[k], round)) ll_poll<V>(slot + u * V, w[k]);
        for (int j = 0; j < V; ++j) s[k].v[j] += __int_as_float((int)(uint32_t)w[k][j]);
      }
    }
#pragma unroll
    for (int k = 0; k < kLlBatch; ++k) {
      if (u0 + k * stride < units) x[u0 + k * stride] = s[k];
    }
  }
  __syncthreads();  // every thread read the round before it advances
  if (threadIdx.x == 0) a.rounds[b] = round;
}

// Whether the one-shot kernel is a programmatic dependent launch (launch_decode_kernel, where RBEE_PDL allows):
// yes unless RBEE_ALLREDUCE_PDL=0 (an ordinary launch, as before; for comparisons). Measured on two H100s over NVLink
// (docs/perf-notes/multi-device.md, third session): 64 all-reduces in a graph (bench/rbee_bench_collective) of one
// decode row, 4096 / 8192 floats, 2.8 / 2.7 us each with it against 3.4 / 3.5-4.5 us without; at 64 rows (1 MiB)
// 10.9-14.7 us either way, but 7B F16 S_TG of 64 streams over two cards 10347 / 10387 t/s with it against 10219 /
// 10001 without (same call, alternating).
bool all_reduce_pdl() {
  static const bool on = [] {
    const char* v = std::getenv("RBEE_ALLREDUCE_PDL");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return on;
}

// One all-reduce kernel launch of `blocks` x kThreads on the rank's stream: a programmatic dependent launch
// (launch_decode_kernel) where all_reduce_pdl(), else an ordinary one.
template <typename Args>
void launch_round(void (*kernel)(Args), int blocks, GpuDevice& dev, const Args& a) {
  if (all_reduce_pdl()) {
    quant::launch_decode_kernel(kernel, dim3(blocks), dim3(GpuCommunicator::kThreads), 0, dev.stream(), a);
    return;
  }
  kernel<<<blocks, GpuCommunicator::kThreads, 0, dev.stream()>>>(a);
  RBEE_GPU_CHECK_LAUNCH();
}

// The fields every kernel's arguments have, for the chunk of a message [x, x + n) that starts at element `off`
// (chunks of `chunk` elements, one launch each): the hint goes with the first chunk only.
template <typename Args>
void set_chunk(Args& a, float* x, const float* addend, L2Hint hint, int64_t n, int64_t off, int64_t chunk) {
  a.x = x + off;
  a.addend = addend ? addend + off : nullptr;
  a.prefetch = off == 0 ? hint : L2Hint{};
  a.n = std::min(chunk, n - off);
}

// Whether a chunk goes as 16-byte units (4 floats): whole units at 16-byte addresses (every decode message of a
// model whose hidden size is a multiple of 4); else single floats. The same choice on every rank (same n; the
// allocators give every tensor 256-byte alignment, and a narrowed view has the same offset on every rank).
template <typename Args>
bool in_whole_units(const Args& a) {
  return a.n % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && reinterpret_cast<uintptr_t>(a.addend) % 16 == 0;
}

// RBEE_ALLREDUCE (collective.h): unset or "auto" is the size rule; anything else not listed is an error.
GpuCommunicator::Path requested_path() {
  const char* v = std::getenv("RBEE_ALLREDUCE");
  const std::string_view s = v ? v : "";
  if (s.empty() || s == "auto") return GpuCommunicator::Path::Auto;
  if (s == "oneshot") return GpuCommunicator::Path::OneShot;
  if (s == "flag") return GpuCommunicator::Path::Flag;
  if (s == "ll") return GpuCommunicator::Path::Ll;
  if (s == "nccl" || s == "rccl") return GpuCommunicator::Path::Library;
  RBEE_THROW(ErrorCode::InvalidArgument, "RBEE_ALLREDUCE={}: expected auto, oneshot, flag, ll or {}", s,
             RBEE_GPU_COLLECTIVE_NAME);
}

}  // namespace

GpuCommunicator::GpuCommunicator(std::vector<GpuDevice*> devices, std::string* why) : devices_(std::move(devices)) {
  const int ranks = size();
  RBEE_CHECK(ranks >= 1 && ranks <= kMaxRanks, "GPU communicator: {} devices (1 to {})", ranks, kMaxRanks);
  path_ = requested_path();
  if (const char* f = std::getenv("RBEE_ALLREDUCE_FENCE")) {
    const std::string_view v = f;
    RBEE_CHECK_CODE(v == "block" || v == "thread" || v == "release", ErrorCode::InvalidArgument,
                    "RBEE_ALLREDUCE_FENCE={}: expected thread, block or release", v);
    block_fence_ = v == "block";
    release_flags_ = v == "release";
  }
  if (const char* v = std::getenv("RBEE_ALLREDUCE_BLOCKS"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    RBEE_CHECK_CODE(end != v && *end == '\0' && n >= 1 && n <= kMaxFlagBlocks, ErrorCode::InvalidArgument,
                    "RBEE_ALLREDUCE_BLOCKS={}: expected 1 to {}", v, kMaxFlagBlocks);
    flag_blocks_ = (int)n;
  }
  if (const char* v = std::getenv("RBEE_ALLREDUCE_STORES")) {
    const std::string_view s = v;
    RBEE_CHECK_CODE(s == "wide" || s == "split", ErrorCode::InvalidArgument,
                    "RBEE_ALLREDUCE_STORES={}: expected split or wide", s);
    wide_stores_ = s == "wide";
  }
  if (const char* v = std::getenv("RBEE_ALLREDUCE_LOADS")) {
    const std::string_view s = v;
    RBEE_CHECK_CODE(s == "wide" || s == "scalar", ErrorCode::InvalidArgument,
                    "RBEE_ALLREDUCE_LOADS={}: expected wide or scalar", s);
    wide_loads_ = s == "wide";
  }
  prefetch_cap_ = env::integer_or("RBEE_ALLREDUCE_PREFETCH_MB", kPrefetchCapMiB, 0, 1024) << 20;
  if (const char* v = std::getenv("RBEE_ALLREDUCE_PREFETCH")) {
    const std::string_view s = v;
    RBEE_CHECK_CODE(s == "rows" || s == "heads", ErrorCode::InvalidArgument,
                    "RBEE_ALLREDUCE_PREFETCH={}: expected rows or heads", s);
    prefetch_row_heads_ = s == "heads";
  }
  if (const char* v = std::getenv("RBEE_TP_GATHER")) {
    const std::string_view s = v;
    RBEE_CHECK_CODE(s == "own" || s == "sum", ErrorCode::InvalidArgument, "RBEE_TP_GATHER={}: expected own or sum", s);
    gather_kernel_ = s == "own";
  }
  // Peer access between every pair.
  p2p_ = ranks > 1;
  for (GpuDevice* a : devices_) {
    for (GpuDevice* b : devices_) {
      if (a == b) continue;
      int can = 0;
      if (can_access_peer(&can, a->index(), b->index()) != kSuccess) {
        get_last_error();
        can = 0;
      }
      p2p_ = p2p_ && can;
    }
  }
  if (p2p_) {
    for (GpuDevice* a : devices_) {
      a->activate();
      for (GpuDevice* b : devices_) {
        if (a != b && enable_peer_access(b->index()) != kSuccess) {
          get_last_error();
          p2p_ = false;
        }
      }
    }
  }
  std::string lib_note;
  nccl_ = nccl::open_api(&lib_note);
  if (nccl_) {
    std::vector<int> ids;
    for (GpuDevice* d : devices_) ids.push_back(d->index());
    comms_.assign((size_t)ranks, nullptr);
    const nccl::Result r = nccl_->comm_init_all(comms_.data(), ranks, ids.data());
    if (r != nccl::kSuccess) {
      lib_note = fmt::format("{}: ncclCommInitAll failed: {}", lib_note, nccl_->error_string(r));
      comms_.clear();
      nccl_ = nullptr;
    }
  }
  if (p2p_) {
    const size_t inbox_bytes = (size_t)(2 * ranks) * (size_t)kOneShotChunk * sizeof(uint64_t);
    for (GpuDevice* d : devices_) {
      d->activate();
      void* inbox = nullptr;
      void* rounds = nullptr;
      RBEE_GPU_CHECK(device_malloc_coherent(&inbox, inbox_bytes));
      RBEE_GPU_CHECK(device_malloc_coherent(&rounds, (size_t)kMaxFlagBlocks * sizeof(uint32_t)));
      RBEE_GPU_CHECK(memset_async(inbox, 0, inbox_bytes, d->stream()));
      RBEE_GPU_CHECK(memset_async(rounds, 0, (size_t)kMaxFlagBlocks * sizeof(uint32_t), d->stream()));
      RBEE_GPU_CHECK(stream_synchronize(d->stream()));
      inbox_.push_back(static_cast<uint64_t*>(inbox));
      rounds_.push_back(static_cast<uint32_t*>(rounds));
      void* flag_inbox = nullptr;
      void* flags = nullptr;
      const size_t flag_inbox_bytes = (size_t)(2 * ranks) * (size_t)kFlagChunk * sizeof(float);
      const size_t flags_bytes = (size_t)ranks * kMaxFlagBlocks * sizeof(uint32_t);
      RBEE_GPU_CHECK(device_malloc_coherent(&flag_inbox, flag_inbox_bytes));
      RBEE_GPU_CHECK(device_malloc_coherent(&flags, flags_bytes));
      RBEE_GPU_CHECK(memset_async(flags, 0, flags_bytes, d->stream()));
      RBEE_GPU_CHECK(stream_synchronize(d->stream()));
      flag_inbox_.push_back(static_cast<float*>(flag_inbox));
      flags_.push_back(static_cast<uint32_t*>(flags));
      if (path_ == Path::Ll) {  // the ll kernel's own inbox and round counters (ll_all_reduce: the reuse argument)
        void* ll_inbox = nullptr;
        void* ll_rounds = nullptr;
        RBEE_GPU_CHECK(device_malloc_coherent(&ll_inbox, inbox_bytes));
        RBEE_GPU_CHECK(device_malloc_coherent(&ll_rounds, (size_t)kMaxFlagBlocks * sizeof(uint32_t)));
        RBEE_GPU_CHECK(memset_async(ll_inbox, 0, inbox_bytes, d->stream()));
        RBEE_GPU_CHECK(memset_async(ll_rounds, 0, (size_t)kMaxFlagBlocks * sizeof(uint32_t), d->stream()));
        RBEE_GPU_CHECK(stream_synchronize(d->stream()));
        ll_inbox_.push_back(static_cast<uint64_t*>(ll_inbox));
        ll_rounds_.push_back(static_cast<uint32_t*>(ll_rounds));
      }
    }
    // The fused all-reduce + norm's buffers (16 MiB a GPU for two ranks) only where the model asks for the pass.
    if (env::flag_or("RBEE_TP_REDUCE_NORM", false)) alloc_norm_buffers();
  }
  if (!p2p_ && !nccl_) {
    std::vector<Device*> plain(devices_.begin(), devices_.end());
    host_ = make_host_communicator(plain);
  }
  if (why) {
    *why = fmt::format("{}; {}", p2p_ ? "peer-to-peer one-shot kernel" : "no peer access between the GPUs", lib_note);
  }
}

GpuCommunicator::~GpuCommunicator() {
  for (size_t r = 0; r < comms_.size(); ++r) {
    if (comms_[r]) nccl_->comm_destroy(comms_[r]);
  }
  for (size_t r = 0; r < inbox_.size(); ++r) {
    if (set_device(devices_[r]->index()) != kSuccess) continue;  // the runtime may be gone at exit
    stream_synchronize(devices_[r]->stream());
    device_free(inbox_[r]);
    device_free(rounds_[r]);
    device_free(flag_inbox_[r]);
    device_free(flags_[r]);
    if (r < ll_inbox_.size()) {
      device_free(ll_inbox_[r]);
      device_free(ll_rounds_[r]);
    }
  }
  free_norm_buffers();
}

Device& GpuCommunicator::device(int rank) const { return *devices_.at((size_t)rank); }

std::string GpuCommunicator::name() const {
  if (host_) return "host";
  std::string n = p2p_ ? "p2p" : "";
  if (nccl_) n += std::string(n.empty() ? "" : "+") + RBEE_GPU_COLLECTIVE_NAME;
  return n;
}

void GpuCommunicator::abort(const std::string& why) {
  if (aborted_.empty()) aborted_ = why.empty() ? "aborted" : why;
  if (host_) host_->abort(why);
  // NCCL: wakes ranks blocked in a collective. The one-shot kernel of a rank whose peer never comes spins until
  // the process ends: the model refuses further steps (aborted_), and the worker reports the fault.
  for (size_t r = 0; r < comms_.size(); ++r) {
    if (comms_[r]) nccl_->comm_abort(comms_[r]);
    comms_[r] = nullptr;
  }
}

void GpuCommunicator::one_shot(int rank, float* x, int64_t n, const float* addend, L2Hint hint) {
  GpuDevice& dev = *devices_[(size_t)rank];
  OneShotArgs a{};
  a.rounds = rounds_[(size_t)rank];
  a.chunk = kOneShotChunk;
  a.rank = rank;
  a.ranks = size();
  for (int p = 0; p < size(); ++p) a.inbox[p] = inbox_[(size_t)p];
  for (int64_t off = 0; off < n; off += kOneShotChunk) {
    // Always kBlocks blocks: block b owns the same elements (and round counter and inbox words) in every call,
    // whatever its size, so a rank that runs one call ahead never overwrites words a slower peer still reads
    // in another block's slice (its writes go to the other parity of the same block's round). The blocks of
    // both ranks must be resident at once (each waits for its peer's twin): kBlocks x kThreads fits any GPU.
    set_chunk(a, x, addend, hint, n, off, kOneShotChunk);
    launch_round(one_shot_all_reduce, kBlocks, dev, a);
  }
}

void GpuCommunicator::flag(int rank, float* x, int64_t n, int64_t cols, std::span<const int64_t> bounds,
                           const float* addend, L2Hint hint) {
  GpuDevice& dev = *devices_[(size_t)rank];
  FlagArgs a{};
  a.rounds = rounds_[(size_t)rank];
  a.chunk = kFlagChunk;
  a.rank = rank;
  a.ranks = size();
  a.block_fence = block_fence_;
  a.release_flags = release_flags_;
  a.wide_loads = wide_loads_;
  a.cols = bounds.empty() ? 0 : cols;
  bool bounds_in_units = true;
  for (size_t p = 0; p < bounds.size(); ++p) {
    a.bounds[p] = bounds[p];
    bounds_in_units = bounds_in_units && bounds[p] % 4 == 0;
  }
  for (int p = 0; p < size(); ++p) {
    a.inbox[p] = flag_inbox_[(size_t)p];
    a.flags[p] = flags_[(size_t)p];
  }
  for (int64_t off = 0; off < n; off += kFlagChunk) {
    set_chunk(a, x, addend, hint, n, off, kFlagChunk);
    a.base = off;
    // Gather mode: 16-byte units only where every unit lies in one owner's columns (cols and the bounds multiples
    // of 4).
    const bool vec4 = in_whole_units(a) && (a.cols == 0 || (a.cols % 4 == 0 && bounds_in_units));
    // Always flag_blocks_ blocks, as in one_shot (the round counters are per block; blocks past kBlocks have
    // counters of their own that only this kernel advances, which keeps the reuse argument per block).
    launch_round(!vec4          ? flag_all_reduce<1, false>
                 : wide_stores_ ? flag_all_reduce<4, true>
                                : flag_all_reduce<4, false>,
                 flag_blocks_, dev, a);
  }
}

void GpuCommunicator::ll(int rank, float* x, int64_t n, const float* addend, L2Hint hint) {
  GpuDevice& dev = *devices_[(size_t)rank];
  LlArgs a{};
  a.rounds = ll_rounds_[(size_t)rank];
  a.chunk = kOneShotChunk;
  a.rank = rank;
  a.ranks = size();
  for (int p = 0; p < size(); ++p) a.inbox[p] = ll_inbox_[(size_t)p];
  for (int64_t off = 0; off < n; off += kOneShotChunk) {
    set_chunk(a, x, addend, hint, n, off, kOneShotChunk);
    // 16-byte units as in flag(); always flag_blocks_ blocks, every one of which advances its round counter
    // (ll_all_reduce's reuse argument needs all of them in every launch).
    launch_round(in_whole_units(a) ? ll_all_reduce<4> : ll_all_reduce<1>, flag_blocks_, dev, a);
  }
}

L2Hint GpuCommunicator::prefetch_hint(const Tensor& x, const Tensor& next_read) const {
  L2Hint hint;
  if (!next_read.defined() || &next_read.device() != &x.device() || prefetch_cap_ <= 0) return hint;
  hint.p = next_read.data();
  hint.bytes = std::min({(int64_t)next_read.nbytes(), x.numel() * (int64_t)sizeof(float) * kPrefetchPerByte,
                         prefetch_cap_});
  if (prefetch_row_heads_ && next_read.rank() == 2 && next_read.is_contiguous()) {
    hint.rows = next_read.dim(0);
    hint.row_bytes = (int64_t)next_read.nbytes() / std::max<int64_t>(hint.rows, 1);
    // Row heads under kMinRowHead bytes (a message of a few decode rows) are not worth a request each.
    if (hint.rows == 0 || hint.bytes / hint.rows < kMinRowHead) hint = L2Hint{};
  }
  return hint;
}

void GpuCommunicator::all_reduce_sum(int rank, const Tensor& x) { reduce(rank, x, ReduceExtras()); }

void GpuCommunicator::all_reduce_sum_with(int rank, const Tensor& x, const ReduceExtras& extras) {
  check_reduce_extras(*this, rank, x, extras);
  reduce(rank, x, extras);
}

void GpuCommunicator::reduce(int rank, const Tensor& x, const ReduceExtras& extras) {
  const Tensor& addend = extras.addend;
  RBEE_CHECK(rank >= 0 && rank < size(), "all_reduce_sum: rank {} of {}", rank, size());
  RBEE_CHECK(x.dtype() == DType::F32 && x.is_contiguous(), "all_reduce_sum: needs a contiguous f32 tensor, got {}",
             x.to_string());
  RBEE_CHECK(&x.device() == devices_[(size_t)rank], "all_reduce_sum: rank {} passed a tensor on {}, not {}", rank,
             x.device().id(), devices_[(size_t)rank]->id());
  RBEE_CHECK_CODE(aborted_.empty(), ErrorCode::Backend, "GPU communicator: the group was aborted ({})", aborted_);
  if (host_) return add_then_reduce(*host_, rank, x, extras);
  const int64_t n = x.numel();
  if (n == 0) return;
  // One rank: the addend alone (Communicator's default: an add on rank 0; its all_reduce_sum is then nothing).
  if (size() == 1) return addend.defined() ? add_then_reduce(*this, rank, x, extras) : void();
  GpuDevice& dev = *devices_[(size_t)rank];
  dev.activate();
  float* data = static_cast<float*>(x.data());
  const float* add = addend.defined() ? static_cast<const float*>(addend.data()) : nullptr;
  const int64_t bytes = n * (int64_t)sizeof(float);
  const L2Hint hint = prefetch_hint(x, extras.next_read);
  // The path (collective.h): the library where asked for (also while recording: NCCL and RCCL record into
  // graphs); else the one-shot kernel for small messages, the flag kernel up to kFlagMaxBytes, and the flag
  // kernel for any size where the library cannot serve (recording, or none loaded); the library above.
  // RBEE_ALLREDUCE=oneshot: the one-shot kernel up to 1 MiB and wherever the library cannot serve (as before
  // the flag kernel); =flag: the flag kernel at every size the library is not needed for; =ll: the ll kernel there.
  // The peer-to-peer kernels add rank 0's addend in their push; the library path adds it by an op first.
  const bool library_ok = nccl_ && !dev.capturing();
  if (path_ == Path::Library && nccl_) {
    // the library for every size (below)
  } else if (p2p_ && path_ == Path::OneShot) {
    if (bytes <= ((int64_t)1 << 20) || !library_ok) return one_shot(rank, data, n, add, hint);
  } else if (p2p_ && path_ == Path::Flag) {
    if (bytes <= kFlagMaxBytes || !library_ok) return flag(rank, data, n, 0, {}, add, hint);
  } else if (p2p_ && path_ == Path::Ll) {
    if (bytes <= kFlagMaxBytes || !library_ok) return ll(rank, data, n, add, hint);
  } else if (p2p_) {
    if (bytes <= kOneShotMaxBytes) return one_shot(rank, data, n, add, hint);
    if (bytes <= kFlagMaxBytes || !library_ok) return flag(rank, data, n, 0, {}, add, hint);
  }
  if (add) ops::copy(x, ops::add(x, addend));
  const nccl::Result r = nccl_->all_reduce(data, data, (size_t)n, nccl::kFloat32, nccl::kSum, comms_[(size_t)rank],
                                           dev.stream());
  RBEE_CHECK_CODE(r == nccl::kSuccess, ErrorCode::Backend, "{} all-reduce of {} floats on {}: {}",
                  RBEE_GPU_COLLECTIVE_NAME, n, dev.id(), nccl_->error_string(r));
}

void GpuCommunicator::all_gather_columns(int rank, const Tensor& x, std::span<const int64_t> bounds) {
  check_gather_columns(*this, rank, x, bounds);
  RBEE_CHECK_CODE(aborted_.empty(), ErrorCode::Backend, "GPU communicator: the group was aborted ({})", aborted_);
  const int64_t bytes = x.numel() * (int64_t)sizeof(float);
  // The flag kernel in gather mode (collective.h); the default (zeros, then all_reduce_sum) where the one-shot
  // kernel or a library would carry the message, or where RBEE_TP_GATHER=sum asks for it.
  if (host_ || !p2p_ || !gather_kernel_ || path_ == Path::Library || path_ == Path::OneShot ||
      bytes <= kOneShotMaxBytes || size() == 1) {
    return gather_columns_by_sum(*this, rank, x, bounds);
  }
  if (x.numel() == 0) return;
  devices_[(size_t)rank]->activate();
  flag(rank, static_cast<float*>(x.data()), x.numel(), x.dim(1), bounds);
}

}  // namespace rbee::gpu
