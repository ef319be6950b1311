// The ROCm build has no vendor convolution library behind rbee::gpu::Dnn: Debian ships no MIOpen, so conv2d_fused
// keeps rbee's own kernels there (kernels/conv.cu, conv_implicit.cu, conv_igemm.cu) with rocBLAS where installed.
#include "backends/gpu/dnn.h"

namespace rbee::gpu {

std::unique_ptr<Dnn> make_vendor_dnn(std::string* why) {
  if (why) *why = "no convolution library on ROCm (MIOpen is not used); convolutions use rbee's kernels";
  return nullptr;
}

}  // namespace rbee::gpu
