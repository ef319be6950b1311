// What the hardware allows, for `rbee bench`: a memory copy bandwidth and a dense GEMM rate measured on the
// benchmark's own device in the same run (through the Device / Kernels interface, so any backend), and the work
// a model's ppN and tgN tests must do at the least (FLOPs of a prompt pass, bytes read per decoded token).
// Their quotient is the time the test would take at the hardware's limit; bench reports achieved / limit.
#pragma once

#include <cstdint>
#include <string>

#include "rbee/backend/device.h"
#include "rbee/core/dtype.h"
#include "rbee/llm/model_config.h"

namespace rbee::cli {

struct HardwareRates {
  // Bytes read plus bytes written per second (STREAM's convention) by the faster of two copies of a
  // `copy_bytes` buffer: Device::copy_on_device, and the affine kernel (x * 1 + 0) that runs on every thread.
  double copy_bytes_per_s = 0;
  std::string copy_method;  // "copy_on_device" or "affine"
  int64_t copy_bytes = 0;
  // FLOPs per second (2 M N K / time) of ops::matmul on [n, n] x [n, n], the faster of F32 and F16 operands.
  double gemm_flops_per_s = 0;
  std::string gemm_dtype;  // "f32" or "f16": which one was faster
  int gemm_n = 0;
};

// Each rate is the best of `rounds` timed loops of at least `min_seconds` each (after one untimed call).
HardwareRates measure_hardware(Device& device, int64_t copy_bytes, int gemm_n, int rounds, double min_seconds);

// FLOPs of one ppN pass (N tokens of one sequence into an empty cache, logits of the last token only):
// 2 x N x (weights of every layer's linear maps) + 2 x hidden x vocab (one logit row) + causal attention
// (q.k and p.v: 4 x heads x head_dim x N (N + 1) / 2 per layer; sliding windows are not subtracted).
double prompt_flops(const llm::ModelConfig& c, int n_prompt);

// Bytes a tgN test must read per decoded token, averaged over its N steps: every weight byte on the device
// (`weight_bytes`; for an untied model this counts the whole embedding table, of which decode reads one row,
// so it is an upper bound there) plus the keys and values of the positions before it (N / 2 on average).
double decode_bytes_per_token(const llm::ModelConfig& c, int64_t weight_bytes, DType kv_dtype, int n_gen);

}  // namespace rbee::cli
