// The op set every backend implements, as enums shared by the front-end (rbee/ops.h), the Kernels interface
// and supports() queries. The lists come from the op table (op_table.def); the op parameters are here.
#pragma once

#include <cstdint>

namespace rbee {

// The ops, in the order of the op table (op_table.def).
enum class OpKind : uint8_t {
#define RBEE_OP(Kind, rule, backends, method, params) Kind,
#include "rbee/backend/op_table.def"
};
inline constexpr int kOpKindCount = 0
#define RBEE_OP(Kind, rule, backends, method, params) +1
#include "rbee/backend/op_table.def"
    ;
const char* op_kind_name(OpKind op);  // the Kernels method's name: "rms_norm"

// The functions of OpKind::Unary, out = f(x) (the formulas are in op_table.def).
enum class UnaryOp : uint8_t {
#define RBEE_UNARY_OP(Kind, name) Kind,
#include "rbee/backend/op_table.def"
};
inline constexpr int kUnaryOpCount = 0
#define RBEE_UNARY_OP(Kind, name) +1
#include "rbee/backend/op_table.def"
    ;
const char* unary_op_name(UnaryOp op);

// The functions of OpKind::Binary. Arithmetic ops keep the input dtype; comparisons produce U8 (1 true, 0 false).
enum class BinaryOp : uint8_t {
#define RBEE_BINARY_OP(Kind, name) Kind,
#include "rbee/backend/op_table.def"
};
inline constexpr int kBinaryOpCount = 0
#define RBEE_BINARY_OP(Kind, name) +1
#include "rbee/backend/op_table.def"
    ;
const char* binary_op_name(BinaryOp op);
inline bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq; }

// The functions of OpKind::Reduce. ArgMin/ArgMax return I64 indices (the first one on ties).
enum class ReduceOp : uint8_t {
#define RBEE_REDUCE_OP(Kind, name) Kind,
#include "rbee/backend/op_table.def"
};
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

// Columns of the sample op's per-row settings (op_table.def, Sample): `params` F32 [B, kSampleParams] and
// `control` I64 [B, kSampleControls].
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
// The dtype combinations each op is defined for (its rule in the op table; dtypes in the order of its kernel
// entry's tensor arguments). The CPU backend supports exactly these; a GPU backend answers supports() with a subset.
bool op_dtypes_valid(OpKind op, std::span<const DType> dtypes);
}  // namespace rbee
