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

  // reductions and sorting (kernels/reduce.cu, kernels/sort.cu)
  void reduce(ReduceOp op, const Tensor& x, int axis, Tensor& out) override;
  void softmax(const Tensor& x, Tensor& out) override;
  void argsort(const Tensor& x, bool ascending, Tensor& out) override;

  // indexing (kernels/index.cu)
  void index_select(const Tensor& x, const Tensor& ids, int axis, Tensor& out) override;
  void gather(const Tensor& x, const Tensor& ids, int axis, Tensor& out) override;
  void index_add(const Tensor& ids, const Tensor& src, int axis, Tensor& out) override;
  void scatter(const Tensor& ids, const Tensor& src, int axis, Tensor& out) override;
  void scatter_add(const Tensor& ids, const Tensor& src, int axis, Tensor& out) override;

  // matrix products (kernels/matmul.cu over kernels/gemm.cu and the vendor Blas)
  void matmul(const Tensor& a, const Tensor& b, Tensor& out) override;

  // neural-network blocks (kernels/norm.cu, rms_norm.cu, swiglu.cu, rope.cu, attention.cu)
  void rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) override;
  void layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps, Tensor& out) override;
  void group_norm(const Tensor& x, int groups, const Tensor* weight, const Tensor* bias, float eps,
                  Tensor& out) override;
  void add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps, Tensor& sum_out,
                    Tensor& norm_out) override;
  void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, const RopeParams& params,
            Tensor& out) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& params,
                 Tensor& out) override;

  // convolution family (kernels/conv.cu, kernels/pool.cu)
  void conv1d(const Tensor& x, const Tensor& w, const Conv1dParams& p, Tensor& out) override;
  void conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p, Tensor& out) override;
  void conv_transpose1d(const Tensor& x, const Tensor& w, const Conv1dParams& p, Tensor& out) override;
  void conv_transpose2d(const Tensor& x, const Tensor& w, const Conv2dParams& p, Tensor& out) override;
  void im2col(const Tensor& x, int kernel_h, int kernel_w, const Conv2dParams& p, Tensor& out) override;
  void pool2d(PoolOp op, const Tensor& x, const Pool2dParams& p, Tensor& out) override;
  void upsample_nearest2d(const Tensor& x, Tensor& out) override;

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
  // kernels/sample.cu
  void sample(const Tensor& logits, const Tensor& params, const Tensor& control, const Tensor& tokens,
              const Tensor& bias, Tensor& out) override;

 private:
  GpuDevice& device_;
};

}  // namespace rbee::gpu
