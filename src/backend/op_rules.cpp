// The dtype rules of the op table (op_table.def): each op names one of the functions below, which gets the dtypes
// of its kernel's tensor arguments in order (inputs first, then outputs). The CPU backend supports exactly
// these; a GPU backend answers supports() with a subset.
#include "rbee/backend/op_kinds.h"

namespace rbee {

namespace {
bool is_plain(DType t) { return !is_quantized(t); }
bool is_matmul_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
bool is_index_type(DType t) { return t == DType::I64 || t == DType::I32 || t == DType::U32; }
bool is_cache_type(DType t) { return t == DType::F16 || t == DType::F32 || t == DType::BF16; }
// d[i], or `fallback` when the caller passed fewer dtypes.
DType at(std::span<const DType> d, size_t i, DType fallback) { return d.size() > i ? d[i] : fallback; }
}  // namespace

namespace {
namespace dtype_rules {
// Every dtype, block dtypes included.
bool any(std::span<const DType>) { return true; }
// The first (defining) dtype is a plain (non-block) dtype.
bool plain(std::span<const DType> d) { return is_plain(d[0]); }
// Floating dtypes only: F32, F16, BF16, F64.
bool floating(std::span<const DType> d) { return is_floating(d[0]); }
// (x, out): floating, I64 or I32, out = x.
bool unary(std::span<const DType> d) {
  return (is_floating(d[0]) || d[0] == DType::I64 || d[0] == DType::I32) && at(d, 1, d[0]) == d[0];
}
// (a, b, out): a plain, b = a, out = a or U8 (comparisons).
bool binary(std::span<const DType> d) {
  return is_plain(d[0]) && at(d, 1, d[0]) == d[0] && (d.size() < 3 || d[2] == d[0] || d[2] == DType::U8);
}
// (x, out): any two plain dtypes.
bool cast(std::span<const DType> d) { return is_plain(d[0]) && is_plain(at(d, 1, d[0])); }
// (cond, a): cond U8, a plain.
bool where(std::span<const DType> d) { return d[0] == DType::U8 && is_plain(at(d, 1, DType::F32)); }
// (a, b, out): F32, F16 or BF16, b = a.
bool matmul(std::span<const DType> d) { return is_matmul_float(d[0]) && at(d, 1, d[0]) == d[0]; }
// (x, out): F32 into a block dtype.
bool quantize(std::span<const DType> d) { return d[0] == DType::F32 && is_quantized(at(d, 1, DType::F32)); }
// (q, out): a block dtype into F32.
bool dequantize(std::span<const DType> d) { return is_quantized(d[0]) && at(d, 1, DType::F32) == DType::F32; }
// (x, w, out): x F32; w a block dtype or F32 / F16 / BF16.
bool qmatmul(std::span<const DType> d) {
  const DType w = at(d, 1, DType::F32);
  return d[0] == DType::F32 && (is_quantized(w) || is_matmul_float(w));
}
// (k/v rows, cache): rows F32 / F16 / BF16 into an F16 / F32 / BF16 cache.
bool kv_cache_write(std::span<const DType> d) { return is_matmul_float(d[0]) && is_cache_type(at(d, 1, DType::F16)); }
// (q, cache): q F32 over an F16 / F32 / BF16 cache.
bool paged_attention(std::span<const DType> d) { return d[0] == DType::F32 && is_cache_type(at(d, 1, DType::F16)); }
// (logits, ...): F32 logits; the settings, token lists and ids have fixed dtypes (op_table.def, Sample).
bool sample(std::span<const DType> d) { return d[0] == DType::F32; }
// (x, ids, ...): x plain, ids I64 / I32 / U32.
bool index(std::span<const DType> d) { return is_plain(d[0]) && is_index_type(at(d, 1, DType::I64)); }
}  // namespace dtype_rules
}  // namespace

bool op_dtypes_valid(OpKind op, std::span<const DType> dtypes) {
  if (dtypes.empty()) return false;
  switch (op) {
#define RBEE_OP(Kind, rule, backends, method, params) \
  case OpKind::Kind: return dtype_rules::rule(dtypes);
#include "rbee/backend/op_table.def"
  }
  return false;
}

}  // namespace rbee
