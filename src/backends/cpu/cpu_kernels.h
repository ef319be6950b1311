// CpuKernels: the CPU implementation of every op. Each op family lives in its own file
// (cpu_elementwise.cpp, cpu_reduce.cpp, cpu_nn.cpp, cpu_matmul.cpp, cpu_quant.cpp, cpu_conv.cpp,
// cpu_index.cpp, cpu_paged_attention.cpp, cpu_sample.cpp); this class only ties them together. Preconditions are those of rbee/backend/kernels.h.
#pragma once

#include "rbee/backend/kernels.h"

namespace rbee::cpu {

class CpuKernels final : public Kernels {
 public:
  CpuKernels() : Kernels("cpu") {}
  bool supports(OpKind op, std::span<const DType> dtypes) const override;

  void unary(UnaryOp op, double param, const Tensor& x, Tensor& out) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override;
  void affine(const Tensor& x, double mul, double add, Tensor& out) override;
  void cast(const Tensor& x, Tensor& out) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void fill(Tensor& dst, double value) override;
  void arange(Tensor& out, double start, double step) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) override;

  void reduce(ReduceOp op, const Tensor& x, int axis, Tensor& out) override;
  void softmax(const Tensor& x, Tensor& out) override;
  void argsort(const Tensor& x, bool ascending, Tensor& out) override;

  void rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) override;
  void layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps, Tensor& out) override;
  void group_norm(const Tensor& x, int groups, const Tensor* weight, const Tensor* bias, float eps,
                  Tensor& out) override;
  void rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, const RopeParams& params,
            Tensor& out) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& params,
                 Tensor& out) override;
  void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps, Tensor& sum_out,
                    Tensor& norm_out) override;

  void matmul(const Tensor& a, const Tensor& b, Tensor& out) override;
  void quantize(const Tensor& x, Tensor& out) override;
  void dequantize(const Tensor& q, Tensor& out) override;
  void qmatmul(const Tensor& x, const Tensor& w, Tensor& out) override;

  void conv1d(const Tensor& x, const Tensor& w, const Conv1dParams& p, Tensor& out) override;
  void conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p, Tensor& out) override;
  void conv_transpose1d(const Tensor& x, const Tensor& w, const Conv1dParams& p, Tensor& out) override;
  void conv_transpose2d(const Tensor& x, const Tensor& w, const Conv2dParams& p, Tensor& out) override;
  void im2col(const Tensor& x, int kernel_h, int kernel_w, const Conv2dParams& p, Tensor& out) override;
  void pool2d(PoolOp op, const Tensor& x, const Pool2dParams& p, Tensor& out) override;
  void upsample_nearest2d(const Tensor& x, Tensor& out) override;

  void index_select(const Tensor& x, const Tensor& ids, int axis, Tensor& out) override;
  void gather(const Tensor& x, const Tensor& ids, int axis, Tensor& out) override;
  void index_add(const Tensor& ids, const Tensor& src, int axis, Tensor& out) override;
  void scatter(const Tensor& ids, const Tensor& src, int axis, Tensor& out) override;
  void scatter_add(const Tensor& ids, const Tensor& src, int axis, Tensor& out) override;

  void kv_cache_write(const Tensor& k, const Tensor& v, const Tensor& slots, Tensor& k_cache,
                      Tensor& v_cache) override;
  void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& seq_info,
                       const Tensor& block_tables, const AttentionParams& params, Tensor& out) override;

  void sample(const Tensor& logits, const Tensor& params, const Tensor& control, const Tensor& tokens,
              const Tensor& bias, Tensor& out) override;
};

}  // namespace rbee::cpu
