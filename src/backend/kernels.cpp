#include "rbee/backend/kernels.h"

#include "rbee/core/error.h"

namespace rbee {

void Kernels::unsupported(OpKind op) const {
  RBEE_THROW(ErrorCode::Unsupported, "op '{}' is not implemented by the {} backend", op_kind_name(op), backend_name_);
}

// Defaults: a backend that does not override an op reports it as unsupported.
void Kernels::unary(UnaryOp, double, const Tensor&, Tensor&) { unsupported(OpKind::Unary); }
void Kernels::binary(BinaryOp, const Tensor&, const Tensor&, Tensor&) { unsupported(OpKind::Binary); }
void Kernels::affine(const Tensor&, double, double, Tensor&) { unsupported(OpKind::Affine); }
void Kernels::cast(const Tensor&, Tensor&) { unsupported(OpKind::Cast); }
void Kernels::copy(const Tensor&, Tensor&) { unsupported(OpKind::Copy); }
void Kernels::fill(Tensor&, double) { unsupported(OpKind::Fill); }
void Kernels::arange(Tensor&, double, double) { unsupported(OpKind::Arange); }
void Kernels::where(const Tensor&, const Tensor&, const Tensor&, Tensor&) { unsupported(OpKind::Where); }
void Kernels::reduce(ReduceOp, const Tensor&, int, Tensor&) { unsupported(OpKind::Reduce); }
void Kernels::softmax(const Tensor&, Tensor&) { unsupported(OpKind::Softmax); }
void Kernels::argsort(const Tensor&, bool, Tensor&) { unsupported(OpKind::Argsort); }
void Kernels::rms_norm(const Tensor&, const Tensor*, float, Tensor&) { unsupported(OpKind::RmsNorm); }
void Kernels::layer_norm(const Tensor&, const Tensor*, const Tensor*, float, Tensor&) {
  unsupported(OpKind::LayerNorm);
}
void Kernels::group_norm(const Tensor&, int, const Tensor*, const Tensor*, float, Tensor&) {
  unsupported(OpKind::GroupNorm);
}
void Kernels::rope(const Tensor&, const Tensor&, const Tensor&, const RopeParams&, Tensor&) {
  unsupported(OpKind::Rope);
}
void Kernels::attention(const Tensor&, const Tensor&, const Tensor&, const AttentionParams&, Tensor&) {
  unsupported(OpKind::Attention);
}
void Kernels::swiglu(const Tensor&, const Tensor&, Tensor&) { unsupported(OpKind::Swiglu); }
void Kernels::add_rms_norm(const Tensor&, const Tensor&, const Tensor&, float, Tensor&, Tensor&) {
  unsupported(OpKind::AddRmsNorm);
}
void Kernels::matmul(const Tensor&, const Tensor&, Tensor&) { unsupported(OpKind::Matmul); }
void Kernels::quantize(const Tensor&, Tensor&) { unsupported(OpKind::Quantize); }
void Kernels::dequantize(const Tensor&, Tensor&) { unsupported(OpKind::Dequantize); }
void Kernels::qmatmul(const Tensor&, const Tensor&, Tensor&) { unsupported(OpKind::QMatmul); }
void Kernels::conv1d(const Tensor&, const Tensor&, const Conv1dParams&, Tensor&) { unsupported(OpKind::Conv1d); }
void Kernels::conv2d(const Tensor&, const Tensor&, const Conv2dParams&, Tensor&) { unsupported(OpKind::Conv2d); }
void Kernels::conv_transpose1d(const Tensor&, const Tensor&, const Conv1dParams&, Tensor&) {
  unsupported(OpKind::ConvTranspose1d);
}
void Kernels::conv_transpose2d(const Tensor&, const Tensor&, const Conv2dParams&, Tensor&) {
  unsupported(OpKind::ConvTranspose2d);
}
void Kernels::im2col(const Tensor&, int, int, const Conv2dParams&, Tensor&) { unsupported(OpKind::Im2col); }
void Kernels::pool2d(PoolOp, const Tensor&, const Pool2dParams&, Tensor&) { unsupported(OpKind::Pool2d); }
void Kernels::upsample_nearest2d(const Tensor&, Tensor&) { unsupported(OpKind::UpsampleNearest2d); }
void Kernels::index_select(const Tensor&, const Tensor&, int, Tensor&) { unsupported(OpKind::IndexSelect); }
void Kernels::gather(const Tensor&, const Tensor&, int, Tensor&) { unsupported(OpKind::Gather); }
void Kernels::index_add(const Tensor&, const Tensor&, int, Tensor&) { unsupported(OpKind::IndexAdd); }
void Kernels::scatter(const Tensor&, const Tensor&, int, Tensor&) { unsupported(OpKind::Scatter); }
void Kernels::scatter_add(const Tensor&, const Tensor&, int, Tensor&) { unsupported(OpKind::ScatterAdd); }

void Kernels::kv_cache_write(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) {
  unsupported(OpKind::KvCacheWrite);
}
void Kernels::paged_attention(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const AttentionParams&, Tensor&) {
  unsupported(OpKind::PagedAttention);
}
void Kernels::sample(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  unsupported(OpKind::Sample);
}

}  // namespace rbee
