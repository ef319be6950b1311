// The op set every backend implements (DESIGN.md section 3), as enums shared by the front-end (rbee/ops.h),
// the Kernels interface and supports() queries.
#pragma once

#include <cstdint>

namespace rbee {

enum class OpKind : uint8_t {
  // elementwise
  Unary, Binary, Affine, Cast, Copy, Fill, Arange, Where,
  // reductions and sorting
  Reduce, Softmax, Argsort,
  // neural-network building blocks
  RmsNorm, LayerNorm, GroupNorm, Rope, Attention, Swiglu, AddRmsNorm,
  // matrix products and quantization
  Matmul, Quantize, Dequantize, QMatmul,
  // convolution family
  Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d, Im2col, Pool2d, UpsampleNearest2d,
  // indexing
  IndexSelect, Gather, IndexAdd, Scatter, ScatterAdd,
  // LLM serving: paged KV cache, token sampling
  KvCacheWrite, PagedAttention, Sample,
};
inline constexpr int kOpKindCount = (int)OpKind::Sample + 1;
const char* op_kind_name(OpKind op);

// out = f(x). Elu takes alpha and Powf the exponent through the op's scalar parameter.
enum class UnaryOp : uint8_t {
  Neg, Recip, Exp, Log, Sin, Cos, Tanh, Erf, Ceil, Floor,
  Round,  // half away from zero, like C's round()
  Abs, Sqr, Sqrt,
  GeluTanh,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  GeluErf,   // 0.5 x (1 + erf(x / sqrt(2)))
  Relu, Elu, Silu, Sigmoid,
  Sign,      // -1, 0 or 1
  Powf,      // x^p
  NormCdf,   // standard normal CDF
};
inline constexpr int kUnaryOpCount = (int)UnaryOp::NormCdf + 1;
const char* unary_op_name(UnaryOp op);

// Arithmetic ops keep the input dtype; comparisons produce U8 (1 true, 0 false).
enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Min, Max, Eq, Ne, Lt, Le, Gt, Ge };
inline constexpr int kBinaryOpCount = (int)BinaryOp::Ge + 1;
const char* binary_op_name(BinaryOp op);
inline bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq; }

// ArgMin/ArgMax return I64 indices (the first one on ties).
enum class ReduceOp : uint8_t { Sum, Min, Max, ArgMin, ArgMax };
const char* reduce_op_name(ReduceOp op);

enum class PoolOp : uint8_t { Avg, Max };

// Normal: rotate pairs (2i, 2i+1) (GPT-J / llama.cpp "normal"); Neox: pairs (i, i + rotary_dim/2) (HF Llama).
enum class RopeMode : uint8_t { Normal, Neox };

struct Conv1dParams {
  int stride = 1, padding = 0, dilation = 1, groups = 1;
  int output_padding = 0;  // transposed convolution only
};

struct Conv2dParams {
  int stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1, groups = 1;
  int output_pad_h = 0, output_pad_w = 0;  // transposed convolution only
};

struct Pool2dParams {
  int kernel_h = 2, kernel_w = 2, stride_h = 2, stride_w = 2, pad_h = 0, pad_w = 0;
  // Avg pooling: divide by the full window (true, PyTorch's default) or by the in-bounds elements only.
  bool count_include_pad = true;
};

struct AttentionParams {
  float scale = 1.0f;   // multiplies q.k
  bool causal = false;  // query i (of Tq) sits at key position Tk - Tq + i and sees keys <= that position
  int window = 0;       // > 0: sliding window, a query at position p also needs key position > p - window
  float softcap = 0.f;  // > 0: scores become softcap * tanh(scores / softcap) before the softmax (Gemma 2)
};

// Columns of the sample op's per-row settings (rbee/backend/kernels.h, sample): `params` F32 [B, kSampleParams]
// and `control` I64 [B, kSampleControls].
namespace sample_col {
inline constexpr int kTemperature = 0;  // 0: greedy
inline constexpr int kTopP = 1;         // (0, 1]; 1: off
inline constexpr int kMinP = 2;         // [0, 1]; 0: off
inline constexpr int kRepetition = 3;   // > 0; 1: off
inline constexpr int kPresence = 4;     // 0: off
inline constexpr int kFrequency = 5;    // 0: off
inline constexpr int kTopK = 0;         // >= 0; 0: off
inline constexpr int kSeed = 1;         // the random stream's seed (its 64 bits)
inline constexpr int kDraw = 2;         // >= 0: which number of that stream this row uses
}  // namespace sample_col
inline constexpr int kSampleParams = 6;
inline constexpr int kSampleControls = 3;

struct RopeParams {
  RopeMode mode = RopeMode::Neox;
  int rotary_dim = 0;     // leading dims of each head that rotate (<= head_dim, even); the rest pass through
  float mscale = 1.0f;    // multiplies cos and sin (YaRN attention factor)
  // > 0: the angles of llama.cpp's rope instead of positions * inv_freq (GGUF models follow llama.cpp's
  // numerics): pair i turns by a_i = p * r * ... * r (i factors r = freq_ratio, multiplied left to right in
  // f32), cos and sin taken of that f32 angle. Only for unscaled frequencies, r = powf(base, -2 / rotary_dim);
  // inv_freq is then not read.
  float freq_ratio = 0.f;
};

}  // namespace rbee

#include <span>
#include "rbee/core/dtype.h"

namespace rbee {
// The dtype combinations each op is defined for (the argument order of rbee/backend/kernels.h). The CPU
// backend supports exactly these; a GPU backend answers supports() with a subset.
bool op_dtypes_valid(OpKind op, std::span<const DType> dtypes);
}  // namespace rbee
