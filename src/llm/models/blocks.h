// The building blocks decoder layers are made of. Shapes: N new tokens, hidden size H, heads Hq / Hkv of
// size D, MLP width I. All activations are F32 on the model's device.
#pragma once

#include "llm/models/architecture.h"

namespace rbee::llm {

// y = x . w^T (+ bias): x [N, in], w [out, in] -> [N, out]
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor());
// RMS norm over the last axis with weight w (already 1 + w for Gemma).
Tensor norm(const StepContext& step, const Tensor& x, const Tensor& w);
// Under a tensor split, sums a row-parallel projection's partial result over the ranks (in place), with the
// extras (rank 0's addend, what the rank reads next: all_reduce_sum_with in rbee/backend/reduce_with.h); else
// partial.
Tensor reduce_partial(const StepContext& step, const Tensor& partial, const ReduceExtras& extras = {});
// The first projection weight of the next layer's attention (stacked q/k/v or q), or undefined after the last
// layer: the all-reduce that ends a layer names it as what the rank reads next.
Tensor next_layer_first_read(const StepContext& step);
// Self-attention over the paged cache: h [N, H] -> [N, H] (summed over the ranks of a tensor split).
Tensor attention_block(const StepContext& step, const LayerWeights& w, int layer, const Tensor& h);
// Gated MLP: down(act(gate(h)) * up(h)): h [N, H] -> [N, H] (summed over the ranks of a tensor split).
Tensor mlp_block(const StepContext& step, const LayerWeights& w, const Tensor& h);

}  // namespace rbee::llm
