// cuBLASLt products planned once per shape, with the per-shape algorithm choice timed as replayed graphs: the
// machinery behind Blas::gemm_bias (SD's fused linear layers) and the 16-bit products of Blas::gemm_f32_out that an
// LLM's batched decode runs (cublas_blas.cu). One instance per cuBLAS handle (per device); thread-safe.
//
// A product in rbee's row-major terms (LtProduct):
//   out [m, n] (type cd) = x [m, k] (type ab) . (w stored [n, k], type ab)^T (+ bias [n], type cd) (+ C [m, n])
// with f32 sums, computed by cuBLASLt as the column-major out^T [n, m] = op(w) [n, k] . x^T [k, m] (TRANSA = T): w,
// x and out are used in place, nothing is transposed. C (beta = 1) has out's layout and type.
//
// Plan life, once per shape (LtProduct and whether C is read) for the process:
//   1. first call: descriptors, and the heuristic's candidates (up to kLtCandidates, plus split-K forms of its first
//      two when the choice may be timed);
//   2. the algorithm is fixed at that call (LtTuning):
//        - group_rows > 0 and another m of the same group (m rounded up to a power of two >= group_rows, all else
//          equal) already has a timed winner that cuBLASLt accepts for this m (cublasLtMatmulAlgoCheck, within the
//          workspace): that winner;
//        - else, with timing allowed, an uncaptured stream and C not aliasing out: every candidate timed as a
//          replayed graph on the call's own operands, the fastest kept (the heuristic's first unless another takes
//          under kLtMargin of its time), and recorded as its group's winner;
//        - else the heuristic's first;
//   3. later calls run that algorithm, so a shape's result is the same at every call.
// Split-K partial sums are only ever reduced in f32 (the compute type): in the workspace for every output type, and
// also in place or in the output type when the output is f32.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace rbee::gpu {

// One product as described above; ld* are row strides in elements, align_* the byte alignments (powers of two up
// to 256) of w, x, C and out that the heuristic and the checks may assume.
struct LtProduct {
  cudaDataType_t ab = CUDA_R_16F, cd = CUDA_R_16F;
  int m = 0, n = 0, k = 0;
  int64_t ldx = 0, ldw = 0, ldo = 0;
  bool bias = false;
  bool reads_c = false;  // beta = 1
  uint32_t align_w = 256, align_x = 256, align_c = 256, align_d = 256;
};

// How a plan's algorithm is fixed at its first call (plan life, step 2).
struct LtTuning {
  bool time = false;   // time the candidates when the call allows it
  int group_rows = 0;  // > 0: share timed winners between the m of one row group (powers of two from group_rows)
  // Time each call on weights out of L2 (a write of twice the L2 size before each timed call, its own time taken
  // off), as a decode step reads them, instead of on the operands the previous call left in L2.
  bool cold = false;
  // Share the timed choice between the devices of the process (a tensor split's ranks): the first device to reach a
  // shape and row group times it, the others wait for its choice and take it, so every rank runs the same
  // algorithm (two independent timings can differ, and the slower rank sets the pace of a split).
  bool shared = false;
};

// The operands of one call: bias may be null when the product has none; c == out or c null when !reads_c.
struct LtOperands {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* bias = nullptr;
  const void* c = nullptr;
  void* out = nullptr;
};

// Byte alignment of ptr, a power of two capped at 256 (cuBLASLt's default assumption).
uint32_t lt_alignment(const void* ptr);

// The group an m falls in: the smallest power of two >= max(m, group_rows).
int lt_row_group(int m, int group_rows);

class LtPlans {
 public:
  LtPlans(cublasLtHandle_t lt, void* workspace, size_t workspace_bytes)
      : lt_(lt), workspace_(workspace), workspace_bytes_(workspace_bytes) {}
  ~LtPlans() { release(); }
  LtPlans(const LtPlans&) = delete;
  LtPlans& operator=(const LtPlans&) = delete;

  // Runs `p` on `stream` with its shape's algorithm (the plan's life above). False when cuBLASLt has no algorithm for
  // the shape or refuses the call (nothing was computed then; the caller takes another path).
  bool matmul(const LtProduct& p, const LtTuning& tuning, const LtOperands& ops, cudaStream_t stream);
  // Destroys every plan's descriptors and forgets the choices (before the cuBLASLt handle goes).
  void release();

 private:
  static constexpr int kLtCandidates = 16;
  static constexpr int kLtSplitBases = 2;
  static constexpr int kLtSplits[] = {2, 3, 4, 8};
  static constexpr int kLtSplitSchemes = 2;  // in the workspace (f32); in place (f32 outputs only)
  static constexpr int kLtMaxCandidates =
      kLtCandidates + kLtSplitBases * kLtSplitSchemes * (int)(sizeof(kLtSplits) / sizeof(kLtSplits[0]));

  // One shape's descriptors, candidates (best ranked first) and the algorithm it runs.
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t candidates[kLtMaxCandidates] = {};
    int count = 0;
    cublasLtMatmulAlgo_t algo{};
    bool ok = false;       // the heuristic gave at least one algorithm
    bool decided = false;  // algo is final
  };
  // Every field of LtProduct, m first (a group key has the row group there).
  using Key = std::array<int64_t, 14>;
  static Key key_of(const LtProduct& p, int m);

  bool make_plan(Plan& plan, const LtProduct& p, bool with_splits);
  void add_split_k_variants(Plan& plan, const LtProduct& p);
  bool flush_buffer();
  template <class Run>
  void decide(Plan& plan, const LtProduct& p, const LtTuning& tuning, bool timeable, cudaStream_t stream,
              const Run& run);
  bool borrow(Plan& plan, const cublasLtMatmulAlgo_t& winner) const;

  cublasLtHandle_t lt_;
  void* workspace_;
  size_t workspace_bytes_;
  std::mutex mutex_;
  std::map<Key, Plan> plans_;
  std::map<Key, cublasLtMatmulAlgo_t> winners_;  // per row group: the algorithm a timed m of the group chose
  void* flush_ = nullptr;  // LtTuning::cold's L2 flush buffer (made at the first cold timing), flush_bytes_ long
  size_t flush_bytes_ = 0;
};

}  // namespace rbee::gpu
