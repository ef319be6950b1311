// The GPU platform layer: our own names (rbee::gpu::Stream, memcpy_async, shfl_xor, dot4_i8, mma_i8_k32, ...)
// over CUDA or HIP. The shared kernels in backends/gpu/ include only this header; the vendor headers stay in
// backends/cuda/ and backends/rocm/. RBEE_GPU_HIP selects HIP (set by the rocm build).
#pragma once

#include <cstdint>

#if defined(RBEE_GPU_HIP)
#include "backends/rocm/hip_platform.h"
#include "backends/rocm/hip_mma_i8.h"     // warp-level int8 tile product (contract: backends/cuda/cuda_mma_i8.h)
#include "backends/rocm/hip_async_copy.h"  // global -> shared copies (contract: backends/cuda/cuda_async_copy.h)
#else
#include "backends/cuda/cuda_platform.h"
#include "backends/cuda/cuda_mma_i8.h"      // warp-level int8 tile product and its contract
#include "backends/cuda/cuda_async_copy.h"  // asynchronous global -> shared copies and their contract
#endif

#include "rbee/core/error.h"
#include "rbee/core/host_device.h"  // RBEE_HOST_DEVICE

// Checks a runtime call and throws rbee::Error(Backend) with the vendor's message.
#define RBEE_GPU_CHECK(call)                                                                                   \
  do {                                                                                                         \
    const ::rbee::gpu::Status rbee_status_ = (call);                                                           \
    if (rbee_status_ != ::rbee::gpu::kSuccess)                                                                 \
      RBEE_THROW(::rbee::ErrorCode::Backend, "{} failed: {} ({}:{})", #call,                                   \
                 ::rbee::gpu::status_string(rbee_status_), __FILE__, __LINE__);                                \
  } while (0)

// Checks the launch just issued.
#define RBEE_GPU_CHECK_LAUNCH() RBEE_GPU_CHECK(::rbee::gpu::get_last_error())
