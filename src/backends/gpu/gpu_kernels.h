// GpuKernels: the GPU implementation of the op set, one source for CUDA and HIP. Each op family lives in
// backends/gpu/kernels/<family>.cu; this class ties them together. Ops not overridden here fall back to
// Kernels' defaults (Unsupported), and supports() says so.
#pragma once

#include "rbee/backend/kernels.h"

namespace rbee::gpu {

class GpuDevice;

class GpuKernels final : public Kernels {
 public:
  explicit GpuKernels(GpuDevice& device);
  bool supports(OpKind op, std::span<const DType> dtypes) const override;
  GpuDevice& device() const { return device_; }

  // elementwise (kernels/elementwise.cu)
  void unary(UnaryOp op, double param, const Tensor& x, Tensor& out) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override;
  void affine(const Tensor& x, double mul, double add, Tensor& out) override;
  void cast(const Tensor& x, Tensor& out) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void fill(Tensor& dst, double value) override;
  void arange(Tensor& out, double start, double step) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) override;

  // ---- LLM inference: quantization and paged KV cache (gpu-llm) ----
  // quantize / dequantize: kernels/quant_quantize.cu, quant_dequantize.cu; qmatmul: kernels/quant_qmatmul.cu
  void quantize(const Tensor& x, Tensor& out) override;
  void dequantize(const Tensor& q, Tensor& out) override;
  void qmatmul(const Tensor& x, const Tensor& w, Tensor& out) override;
  // kernels/paged.cu
  void kv_cache_write(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_cache,
                      Tensor& v_cache) override;
  void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& seq_info,
                       const Tensor& block_tables, const AttentionParams& params, Tensor& out) override;

 private:
  GpuDevice& device_;
};

}  // namespace rbee::gpu
