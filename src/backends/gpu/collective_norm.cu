// GpuCommunicator::all_reduce_add_rms_norm_qmatmul (rbee/backend/reduce_norm.h): the attention output's all-reduce,
// the residual add and the MLP's RMS norm in one kernel per rank, then the 16-bit vendor GEMM of the normed rows.
//
// The kernel is the flag all-reduce (collective.cu) with whole rows per block, so the norm can follow the sum in the
// same block: block b of G owns rows b, b + G, ... (G = min(rows, kNormMaxBlocks), the same on every rank). Its own
// protocol state (inbox, flags, round counters per block, allocated with the others), so nothing it does interleaves
// with the other kernels' slots:
//  1. Every element of the block's rows goes into slot `rank` of every peer's inbox, in the block's own region
//     (kNormSlot floats per block: the j-th owned row at j * K), at this round's parity (plain 16-byte stores
//     through peer access).
//  2. Every thread fences at system scope, the block meets, thread p (< ranks, != rank) writes this round into peer
//     p's flag [rank][b]; then thread p spins on its own flag [p][b] until it holds this round or a later one,
//     fences, and the block meets again (RBEE_ALLREDUCE_FENCE=release: release / acquire flags instead of fences).
//  3. Per row: s = x_0 + x_1 + ... in rank order (this rank's from x, the peers' from its inbox, loaded through L2;
//     rank 0's x_0 with its addend added first, as all_reduce_sum_with), h = residual + s (or s) stored to sum_out, the sum of the f32 squares of h in double and 1 / sqrtf(mean + eps), then
//     h * rstd * weight rounded to the weight type: quant_activation.cu's norm pass (256 threads a row, the same
//     element order, shuffles and per-warp totals), so the bits are those of all_reduce_sum then
//     add_rms_norm_qmatmul's 16-bit rows.
// Inbox reuse: as in the flag kernel, per block: a peer writes round k + 2 into parity k & 1 only after it saw this
// rank's round k + 1 flag, which this rank sends only after its round k kernel (all its reads of that parity) ended.
// Launched as a decode kernel (programmatic dependent launch): nothing is read or written before the wait; before
// it, the L2 prefetch of the product's weights (the all-reduce's next_read hint, prefetch_hint), as the separate
// all-reduce kernels issue it (without it the fused pass measured 4-7% slower in the model on two H200s).
#include <algorithm>
#include <limits>

#include "backends/common/batch_invariant.h"
#include "backends/gpu/blas.h"
#include "backends/gpu/collective.h"
#include "backends/gpu/collective_prefetch.cuh"
#include "backends/gpu/gpu_device.h"
#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/kernels/common.cuh"
#include "backends/gpu/kernels/quant_launch.h"
#include "backends/gpu/peer_load.h"
#include "rbee/core/env.h"
#include "rbee/core/error.h"
#include "rbee/core/tensor.h"

namespace rbee::gpu {

namespace {

constexpr int kNormThreads = 256;  // a row per block, as quant_activation.cu's norm pass (its f64 sum order)
constexpr int kNormMaxBlocks = GpuCommunicator::kNormMaxBlocks;
constexpr int64_t kNormSlot = GpuCommunicator::kNormSlot;
constexpr int kMaxChunks = (int)(kNormSlot / (8 * kNormThreads));  // 8-element chunks a thread holds of one row

// One rank's arguments (the same launch shape on every rank).
struct ReduceNormArgs {
  float* x;               // this rank's partial [rows, k] (rank 0 with an addend: x + addend is written back)
  const float* addend;    // rank 0's [rows, k] added to its partial before the sum (ReduceExtras::addend), or null
  const float* residual;  // [rows, k] added after the sum, or null
  const float* weight;    // [k]
  float eps;
  int64_t rows, k;
  float* sum_out;                                  // [rows, k]: residual + the sum of the partials
  uint16_t* normed;                                // [rows, k] in the weight's 16-bit type
  float* inbox[GpuCommunicator::kMaxRanks];        // every rank's: [2 parities][ranks][kNormMaxBlocks][kNormSlot]
  uint32_t* flags[GpuCommunicator::kMaxRanks];     // every rank's: [ranks][kNormMaxBlocks], the sender's round
  uint32_t* rounds;                                // this rank's [kNormMaxBlocks]
  int rank, ranks;
  bool vec;  // every row pointer 16-byte aligned: 16-byte loads and stores, else 4-byte ones (the same values)
  bool release_flags;  // RBEE_ALLREDUCE_FENCE=release: no fences, flags written with a release and read with an acquire
  L2Hint prefetch;     // the product's weights w, asked for in L2 first (the HBM idles while the kernel waits)
};

__device__ __forceinline__ void load8(const float* p, bool vec, float (&v)[8]) {
  if (vec) {
    const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = p[i];
  }
}
__device__ __forceinline__ void store8(float* p, bool vec, const float (&v)[8]) {
  if (vec) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    *reinterpret_cast<float4*>(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) p[i] = v[i];
  }
}
// A peer's values after the flag's acquire: from L2, where the peer's stores landed (the inbox is 16-byte aligned).
__device__ __forceinline__ void load8_peer(const float* p, float (&v)[8]) {
  const float4 a = load_peer_f4(reinterpret_cast<const float4*>(p));
  const float4 b = load_peer_f4(reinterpret_cast<const float4*>(p + 4));
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

template <class H>
__global__ void __launch_bounds__(kNormThreads) reduce_add_norm_kernel(ReduceNormArgs a) {
  constexpr int W = RBEE_DEVICE_WARP_SIZE;
  __shared__ double partial[kNormThreads / W];
  issue_prefetch(a.prefetch);  // weights: never written by earlier launches
  grid_dependency_trigger();
  grid_dependency_wait();
  const int b = (int)blockIdx.x, t = (int)threadIdx.x, blocks = (int)gridDim.x;
  uint32_t round = a.rounds[b] + 1u;
  if (round == 0u) round = 2u;
  const int64_t k = a.k;
  const int64_t parity = (int64_t)(round & 1u) * a.ranks * kNormMaxBlocks * kNormSlot;
  // Sender `s`'s slot of this block in the inbox `box` at this round's parity.
  auto slot = [&](float* box, int s) { return box + parity + ((int64_t)s * kNormMaxBlocks + b) * kNormSlot; };
  // Per thread: the row's 8-element chunks e = 8 t + 2048 c (the norm pass's order), at most kMaxChunks of them. The
  // first row's own values, residual and the norm weight (every row's) are read before the wait, from local memory,
  // and kept in registers: after the peers' flags, a row costs one read of the peers' values from L2.
  float own[kMaxChunks][8], hv[kMaxChunks][8], wt[kMaxChunks][8];
  // 1. Push the block's rows to every peer.
  for (int64_t r = b, j = 0; r < a.rows; r += blocks, ++j) {
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c) {
      const int64_t e = 8 * (int64_t)t + (int64_t)c * 8 * kNormThreads;
      if (e >= k) continue;
      float v[8];
      load8(a.x + r * k + e, a.vec, v);
      if (a.addend) {  // (x_0 + addend) is rank 0's partial: pushed, and kept in x for the sum below (same thread)
        float d[8];
        load8(a.addend + r * k + e, a.vec, d);
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] += d[i];
        store8(a.x + r * k + e, a.vec, v);
      }
      for (int p = 0; p < a.ranks; ++p) {
        if (p != a.rank) store8(slot(a.inbox[p], a.rank) + j * k + e, true, v);
      }
      if (j == 0) {
#pragma unroll
        for (int i = 0; i < 8; ++i) own[c][i] = v[i];
      }
    }
  }
#pragma unroll
  for (int c = 0; c < kMaxChunks; ++c) {
    const int64_t e = 8 * (int64_t)t + (int64_t)c * 8 * kNormThreads;
    if (e >= k) continue;
    load8(a.weight + e, a.vec, wt[c]);
    if (a.residual) load8(a.residual + (int64_t)b * k + e, a.vec, hv[c]);  // the first row's (row b)
  }
  // 2. Flags: this block's values are out; wait for every peer's twin block. With release_flags, as the flag
  // kernel's RBEE_ALLREDUCE_FENCE=release: the barrier, then a cumulative release store of the flag (the block's
  // stores before the barrier are visible to the peer's acquire that reads it), and acquire loads while spinning.
  const bool peer_thread = t < a.ranks && t != a.rank;
  if (a.release_flags) {
    __syncthreads();
    if (peer_thread) store_release_sys(a.flags[t] + a.rank * kNormMaxBlocks + b, round);
  } else {
    threadfence_system();
    __syncthreads();
    if (peer_thread) *((volatile uint32_t*)a.flags[t] + a.rank * kNormMaxBlocks + b) = round;
  }
  __syncthreads();  // every flag sent before any thread spins (the emulator runs a block's threads in turn)
  if (peer_thread && a.release_flags) {
    const uint32_t* flag = a.flags[a.rank] + t * kNormMaxBlocks + b;
    while ((int32_t)(load_acquire_sys(flag) - round) < 0) {
    }
  } else if (peer_thread) {
    const volatile uint32_t* flag = (const volatile uint32_t*)a.flags[a.rank] + t * kNormMaxBlocks + b;
    while ((int32_t)(*flag - round) < 0) {
    }
    threadfence_system();
  }
  __syncthreads();
  // 3. Sum in rank order, add the residual, norm.
  for (int64_t r = b, j = 0; r < a.rows; r += blocks, ++j) {
    double ss = 0;
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c) {
      const int64_t e = 8 * (int64_t)t + (int64_t)c * 8 * kNormThreads;
      if (e >= k) continue;
      float s[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (int p = 0; p < a.ranks; ++p) {
        float v[8];
        if (p != a.rank) {
          load8_peer(slot(a.inbox[a.rank], p) + j * k + e, v);
        } else if (j == 0) {
#pragma unroll
          for (int i = 0; i < 8; ++i) v[i] = own[c][i];
        } else {
          load8(a.x + r * k + e, a.vec, v);
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) s[i] += v[i];
      }
      // The norm pass's x + residual (x: the residual stream, residual: the all-reduced sum), or the sum alone.
      if (a.residual) {
        if (j > 0) load8(a.residual + r * k + e, a.vec, hv[c]);
#pragma unroll
        for (int i = 0; i < 8; ++i) hv[c][i] += s[i];
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) hv[c][i] = s[i];
      }
      store8(a.sum_out + r * k + e, a.vec, hv[c]);
#pragma unroll
      for (int i = 0; i < 8; ++i) ss += (double)(hv[c][i] * hv[c][i]);
    }
    for (int off = W / 2; off > 0; off >>= 1) ss += shfl_xor(ss, off);
    if (t % W == 0) partial[t / W] = ss;
    __syncthreads();
    double total = 0;
    for (int w = 0; w < kNormThreads / W; ++w) total += partial[w];
    const float mean = (float)(total / (double)k);
    const float rstd = 1.0f / sqrtf(mean + a.eps);
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c) {
      const int64_t e = 8 * (int64_t)t + (int64_t)c * 8 * kNormThreads;
      if (e >= k) continue;
      uint32_t packed[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float lo = mul_rn(mul_rn(hv[c][2 * i], rstd), wt[c][2 * i]);
        const float hi = mul_rn(mul_rn(hv[c][2 * i + 1], rstd), wt[c][2 * i + 1]);
        if constexpr (std::is_same_v<H, bf16_t>) packed[i] = float_to_bf16(lo) | ((uint32_t)float_to_bf16(hi) << 16);
        else packed[i] = float_to_f16(lo) | ((uint32_t)float_to_f16(hi) << 16);
      }
      uint16_t* dst = a.normed + r * k + e;
      if (a.vec) {
        *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          dst[2 * i] = (uint16_t)(packed[i] & 0xFFFFu);
          dst[2 * i + 1] = (uint16_t)(packed[i] >> 16);
        }
      }
    }
    __syncthreads();  // `partial` is rewritten by the next row
  }
  __syncthreads();  // every thread read the round before it advances
  if (t == 0) a.rounds[b] = round;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

// StepContext's switch is the model's (RBEE_TP_REDUCE_NORM); this one says whether this communicator offers the pass.
bool GpuCommunicator::reduce_norm_fits(const Tensor& x, const Tensor& w) const {
  if (size() < 2 || !p2p_ || host_ || path_ == Path::Library || norm_inbox_.empty() || !aborted_.empty()) return false;
  if (w.dtype() != DType::F16 && w.dtype() != DType::BF16) return false;
  if (x.dtype() != DType::F32 || x.rank() != 2 || w.rank() != 2 || x.dim(1) != w.dim(1)) return false;
  const int64_t m = x.dim(0), k = x.dim(1);
  // The rows the vendor GEMM takes (quant_qmatmul.cu's takes_blas: more rows than one gemv launch, not batch-
  // invariant mode); the gemv paths below that norm inside their own launch.
  if (m <= quant::kMatvecMaxRows || batch_invariant() || devices_[0]->blas() == nullptr) return false;
  if (k % 8 != 0 || k > kNormSlot || m > std::numeric_limits<int>::max() || w.dim(0) > std::numeric_limits<int>::max())
    return false;
  const int64_t blocks = std::min<int64_t>(m, kNormMaxBlocks);
  const int64_t rows_per_block = (m + blocks - 1) / blocks;
  return rows_per_block * k <= kNormSlot;
}

bool GpuCommunicator::all_reduce_add_rms_norm_qmatmul(int rank, const Tensor& x, const Tensor& addend,
                                                      const Tensor& residual, const Tensor& norm_weight, float eps,
                                                      const Tensor& w, const Tensor& sum_out, const Tensor& out) {
  RBEE_CHECK(rank >= 0 && rank < size(), "all_reduce_add_rms_norm_qmatmul: rank {} of {}", rank, size());
  if (!reduce_norm_fits(x, w)) return false;
  GpuDevice& dev = *devices_[(size_t)rank];
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  for (const Tensor* t : {&x, &addend, &residual, &norm_weight, &sum_out, &out, &w}) {
    RBEE_CHECK(!t->defined() || &t->device() == &dev,
               "all_reduce_add_rms_norm_qmatmul: rank {} passed a tensor on {}, not {}", rank, t->device().id(),
               dev.id());
    RBEE_CHECK(!t->defined() || t->is_contiguous(), "all_reduce_add_rms_norm_qmatmul: needs contiguous tensors, got {}",
               t->to_string());
  }
  // An operand that is not a [rows, K] f32 tensor.
  auto rows_f32 = [&](const Tensor& t) { return !t.defined() || (t.shape() == x.shape() && t.dtype() == DType::F32); };
  RBEE_CHECK(rows_f32(addend) && rows_f32(residual) && rows_f32(sum_out) && sum_out.defined() &&
                 out.shape() == Shape({m, n}) && out.dtype() == DType::F32 && norm_weight.numel() == k &&
                 norm_weight.dtype() == DType::F32 && (!addend.defined() || rank == 0),
             "all_reduce_add_rms_norm_qmatmul: rank {}: x {}, addend {}, residual {}, norm weight {}, sum_out {}, out "
             "{}, w {}",
             rank, x.to_string(), addend.to_string(), residual.to_string(), norm_weight.to_string(),
             sum_out.to_string(), out.to_string(), w.to_string());
  if (m == 0) return true;
  dev.activate();
  Tensor normed = Tensor::empty({m, k}, w.dtype(), dev);
  ReduceNormArgs a{};
  a.x = static_cast<float*>(x.data());
  a.addend = addend.defined() ? static_cast<const float*>(addend.data()) : nullptr;
  a.residual = residual.defined() ? static_cast<const float*>(residual.data()) : nullptr;
  a.weight = static_cast<const float*>(norm_weight.data());
  a.eps = eps;
  a.rows = m;
  a.k = k;
  a.sum_out = static_cast<float*>(sum_out.data());
  a.normed = static_cast<uint16_t*>(normed.data());
  for (int p = 0; p < size(); ++p) {
    a.inbox[p] = norm_inbox_[(size_t)p];
    a.flags[p] = norm_flags_[(size_t)p];
  }
  a.rounds = norm_rounds_[(size_t)rank];
  a.rank = rank;
  a.ranks = size();
  a.release_flags = release_flags_;
  a.prefetch = prefetch_hint(x, w);  // the all-reduce's hint for the weights read next, as all_reduce_sum_with's
  a.vec = aligned16(a.x) && aligned16(a.addend) && aligned16(a.residual) && aligned16(a.weight) &&
          aligned16(a.sum_out) && aligned16(a.normed);
  const int blocks = (int)std::min<int64_t>(m, kNormMaxBlocks);
  quant::launch_decode_kernel(w.dtype() == DType::BF16 ? reduce_add_norm_kernel<bf16_t> : reduce_add_norm_kernel<f16_t>,
                              dim3(blocks), dim3(kNormThreads), 0, dev.stream(), a);
  if (dev.blas()->gemm_f32_out(w.dtype(), false, true, (int)m, (int)n, (int)k, normed.data(), k, w.data(), k,
                               static_cast<float*>(out.data()), n, 0.f, dev.stream())) {
    return true;
  }
  // The library declined this product: the kernels' path from sum_out (the norm again, the same values).
  Tensor o = out;
  dev.kernels().norm_qmatmul(sum_out, w, norm_weight, nullptr, eps, nullptr, o);
  return true;
}

void GpuCommunicator::alloc_norm_buffers() {
  const int ranks = size();
  const size_t inbox_bytes = (size_t)(2 * ranks) * kNormMaxBlocks * (size_t)kNormSlot * sizeof(float);
  const size_t flags_bytes = (size_t)ranks * kNormMaxBlocks * sizeof(uint32_t);
  for (GpuDevice* d : devices_) {
    d->activate();
    void* inbox = nullptr;
    void* flags = nullptr;
    void* rounds = nullptr;
    RBEE_GPU_CHECK(device_malloc_coherent(&inbox, inbox_bytes));
    RBEE_GPU_CHECK(device_malloc_coherent(&flags, flags_bytes));
    RBEE_GPU_CHECK(device_malloc_coherent(&rounds, (size_t)kNormMaxBlocks * sizeof(uint32_t)));
    RBEE_GPU_CHECK(memset_async(flags, 0, flags_bytes, d->stream()));
    RBEE_GPU_CHECK(memset_async(rounds, 0, (size_t)kNormMaxBlocks * sizeof(uint32_t), d->stream()));
    RBEE_GPU_CHECK(stream_synchronize(d->stream()));
    norm_inbox_.push_back(static_cast<float*>(inbox));
    norm_flags_.push_back(static_cast<uint32_t*>(flags));
    norm_rounds_.push_back(static_cast<uint32_t*>(rounds));
  }
}

void GpuCommunicator::free_norm_buffers() {
  for (size_t r = 0; r < norm_inbox_.size(); ++r) {
    if (set_device(devices_[r]->index()) != kSuccess) continue;  // the runtime may be gone at exit
    stream_synchronize(devices_[r]->stream());
    device_free(norm_inbox_[r]);
    device_free(norm_flags_[r]);
    device_free(norm_rounds_[r]);
  }
}

}  // namespace rbee::gpu
