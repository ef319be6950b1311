// The emulated CUDA plug-in has no convolution library behind rbee::gpu::Dnn (cuDNN's kernels cannot run on the
// CPU): conv2d_fused takes rbee's own paths there, as on a machine without libcudnn.so.9.
#include "backends/gpu/dnn.h"

namespace rbee::gpu {

std::unique_ptr<Dnn> make_vendor_dnn(std::string* why) {
  if (why) *why = "no convolution library in the emulator; convolutions use rbee's kernels";
  return nullptr;
}

}  // namespace rbee::gpu
