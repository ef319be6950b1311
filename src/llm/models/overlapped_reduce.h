// A tensor split's row-parallel product with its all-reduce overlapped (StepContext::tp_overlap,
// RBEE_TP_OVERLAP=1; docs/perf-notes/multi-device.md, "prepared for the eighth two-GPU session").
#pragma once

#include <cstdint>

#include "llm/models/architecture.h"
#include "rbee/core/function_ref.h"

namespace rbee::llm {

// The product of one block of a row-parallel weight's rows: w_part [cols, in] (rows [c0, c0 + cols) of the weight,
// a view), residual_part [N, cols] (a view of the residual's columns [c0, c0 + cols)) or undefined -> [N, cols] F32,
// this rank's partial sums of those output columns, plus residual_part where given.
using RowBlockProduct = FunctionRef<Tensor(const Tensor& w_part, const Tensor& residual_part)>;

// The output columns (rows of w) the first part takes: percent of out (StepContext::tp_overlap_first_percent) rounded
// down to a multiple of 16, or 0 when that leaves either part empty (then the product is not cut).
int64_t overlap_first_part(int64_t out, int percent);

// reduce_partial(product(w, residual), extras) computed in two parts ("halves" A and B) by output columns, each element
// the same bits: w [out, in] is cut into its first overlap_first_part(out, step.tp_overlap_first_percent) rows and the
// rest (each weight byte read once);
// half A's all-reduce runs on the device's side stream (rbee/backend/side_stream.h; where the communicator records
// into graphs, i.e. its peer-to-peer kernels, which allocate nothing) while half B's product runs on the main
// stream; after the join, half B's all-reduce (a rank's all-reduces stay in one order: the peer-to-peer kernels'
// round counters need it), then both halves are copied into one [N, out] tensor. The residual (rank 0 alone, the
// same on every rank: extras.addend's role) is added by rank 0's products before the reductions, so each element
// is (p_0 + r) + p_1 + ... in rank order, the whole all-reduce's sum; extras.next_read goes with half B's
// all-reduce (half A's overlaps a product that reads the memory already). residual [N, out] F32 or undefined;
// extras.addend must be undefined (pass the residual instead). Without a communicator: product(w, residual).
Tensor reduce_in_halves(const StepContext& step, const Tensor& w, const Tensor& residual, const ReduceExtras& extras,
                        RowBlockProduct product);

// How many products reduce_in_halves has cut in two in this process, all ranks together (tests check that the
// switch took the path).
uint64_t overlapped_reductions();

}  // namespace rbee::llm
