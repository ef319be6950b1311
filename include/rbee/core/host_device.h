// RBEE_HOST_DEVICE marks a function that the host compiler and the GPU compilers (nvcc, hipcc) both build: code
// shared by the CPU backend and the GPU kernels (16-bit float conversions, quantizer scale searches) is written
// once with it. Outside nvcc/hipcc it expands to nothing.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define RBEE_HOST_DEVICE __host__ __device__
#else
#define RBEE_HOST_DEVICE
#endif
