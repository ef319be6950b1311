// Batched GEMM for the GPU kernels (matmul, convolutions): the vendor Blas when the operands' layouts map onto
// it, else rbee's own tiled kernel (gemm.cu), which reads any strides and is the only path for F64 and for
// ROCm builds without rocBLAS.
#pragma once

#include <cstdint>

#include "rbee/core/dtype.h"
#include "rbee/core/shape.h"

namespace rbee::gpu {

class GpuDevice;

// One operand: element (r, c) of batch index b is at data + batch_offset(b) + r * rs + c * cs (in elements),
// where batch_offset(b) = sum over batch dims d of (index of b along d) * batch_strides[d].
struct GemmMatrix {
  void* data = nullptr;
  int64_t rs = 0, cs = 0;
  int64_t batch_strides[kMaxRank] = {};
};

// C [m, n] = A [m, k] . B [k, n] for every index of the batch shape (row-major order). A, B and C share `dtype`:
// F32, F16 or BF16 (products summed in f32, C rounded once) or F64 (in f64). C must have cs == 1.
// c_f32: C in F32 instead (16-bit A and B; the vendor Blas only, through Blas::gemm_scaled: gemm_blas returns false
// when it cannot, and gemm_rbee refuses it).
struct GemmSpec {
  DType dtype = DType::F32;
  bool c_f32 = false;
  int64_t m = 0, n = 0, k = 0;
  int batch_rank = 0;
  int64_t batch_shape[kMaxRank] = {};
  GemmMatrix a, b, c;
};

// Whether a [rows, cols] matrix with these strides is a (possibly transposed) BLAS matrix; sets `trans` (stored
// as [cols, rows]) and the leading dimension.
bool blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool* trans, int64_t* ld);

// The vendor Blas; false (nothing or only part written) when it is absent or cannot take this product.
bool gemm_blas(GpuDevice& dev, const GemmSpec& spec);
// rbee's tiled kernel: any strides, any size (k == 0 writes zeros).
void gemm_rbee(GpuDevice& dev, const GemmSpec& spec);
// gemm_blas, else gemm_rbee.
void gemm(GpuDevice& dev, const GemmSpec& spec);

}  // namespace rbee::gpu
