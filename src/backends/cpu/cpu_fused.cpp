// The fused decoder ops on the CPU (contracts in rbee/backend/op_table.def): exactly their compositions, run
// through the unfused CPU kernels with f32 temporaries. The CPU gains nothing from fusing launches; these keep
// the CPU able to run the model code that calls the fused ops, with the reference results the GPU kernels are
// checked against.
#include "backends/cpu/cpu_kernels.h"
#include "rbee/core/tensor.h"

namespace rbee::cpu {

void CpuKernels::norm_qmatmul(const Tensor& x, const Tensor& w, const Tensor& norm_weight, const Tensor* residual,
                              float eps, Tensor* sum_out, Tensor& out) {
  Tensor h = Tensor::empty(x.shape(), DType::F32, out.device());
  if (residual) add_rms_norm(x, *residual, norm_weight, eps, *sum_out, h);
  else rms_norm(x, &norm_weight, eps, h);
  qmatmul(h, w, out);
}

void CpuKernels::swiglu_qmatmul(const Tensor& gate_up, const Tensor& w, const Tensor* residual, Tensor& out) {
  const int64_t m = gate_up.dim(0), inner = gate_up.dim(1) / 2;
  Device& device = out.device();
  Tensor gate = Tensor::empty({m, inner}, DType::F32, device), up = Tensor::empty({m, inner}, DType::F32, device);
  copy(gate_up.narrow(1, 0, inner), gate);
  copy(gate_up.narrow(1, inner, inner), up);
  Tensor act = Tensor::empty({m, inner}, DType::F32, device);
  swiglu(gate, up, act);
  if (!residual) {
    qmatmul(act, w, out);
    return;
  }
  Tensor product = Tensor::empty(out.shape(), DType::F32, device);
  qmatmul(act, w, product);
  binary(BinaryOp::Add, *residual, product, out);
}

void CpuKernels::rope_kv_cache_write(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                                     const Tensor& inv_freq, const RopeParams& params, const Tensor& slots,
                                     Tensor& k_cache, Tensor& v_cache, Tensor& q_out) {
  rope(q, positions, inv_freq, params, q_out);
  Tensor k_rot = Tensor::empty(k.shape(), DType::F32, q_out.device());
  rope(k, positions, inv_freq, params, k_rot);
  kv_cache_write(k_rot, v, slots, k_cache, v_cache);
}

}  // namespace rbee::cpu
