// HIP's side of the GPU platform layer: the only place the shared kernel source meets HIP headers.
// Everything is re-exported under rbee::gpu names by backends/gpu/platform.h.
#pragma once

#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

#include <cstdio>
#include <utility>

#define RBEE_GPU_VENDOR "AMD"
#define RBEE_GPU_BACKEND_NAME "rocm"
// The collective library opened at run time for tensor parallelism (backends/gpu/collective.cu).
#define RBEE_GPU_COLLECTIVE_NAME "rccl"
#define RBEE_GPU_COLLECTIVE_LIBS {"librccl.so.1", "librccl.so"}
// Wavefront width of the target being compiled: 64 on CDNA/GCN (gfx908, gfx90a, gfx942), 32 on RDNA
// (gfx1030, gfx1100). Only meaningful in device passes; host code reads DeviceProps::warp_size.
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define RBEE_DEVICE_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#else
#define RBEE_DEVICE_WARP_SIZE 64
#endif

namespace rbee::gpu {

using Stream = hipStream_t;
using Event = hipEvent_t;
using Status = hipError_t;
using Graph = hipGraph_t;
using GraphExec = hipGraphExec_t;
using half = __half;
inline constexpr Status kSuccess = hipSuccess;

inline const char* status_string(Status s) { return hipGetErrorString(s); }
inline Status get_last_error() { return hipGetLastError(); }
inline Status device_count(int* n) { return hipGetDeviceCount(n); }
inline Status set_device(int d) { return hipSetDevice(d); }
inline Status mem_get_info(size_t* free_bytes, size_t* total_bytes) { return hipMemGetInfo(free_bytes, total_bytes); }
inline Status device_malloc(void** p, size_t n) { return hipMalloc(p, n); }
inline Status device_free(void* p) { return hipFree(p); }
inline Status host_malloc_pinned(void** p, size_t n) { return hipHostMalloc(p, n, hipHostMallocDefault); }
// Device memory that kernels on other GPUs read and write while a kernel here runs (peer flags and staging):
// fine-grained on AMD, whose ordinary (coarse-grained) memory is only coherent at kernel boundaries.
inline Status device_malloc_coherent(void** p, size_t n) {
  return hipExtMallocWithFlags(p, n, hipDeviceMallocFinegrained);
}
inline Status can_access_peer(int* can, int device, int peer) { return hipDeviceCanAccessPeer(can, device, peer); }
// Lets the current device's kernels use `peer`'s memory; enabling it twice is not an error.
inline Status enable_peer_access(int peer) {
  const Status s = hipDeviceEnablePeerAccess(peer, 0);
  if (s == hipErrorPeerAccessAlreadyEnabled) {
    hipGetLastError();
    return hipSuccess;
  }
  return s;
}
inline Status host_free_pinned(void* p) { return hipHostFree(p); }
inline Status memcpy_async(void* dst, const void* src, size_t n, Stream s) {
  return hipMemcpyAsync(dst, src, n, hipMemcpyDefault, s);
}
inline Status memset_async(void* dst, int value, size_t n, Stream s) { return hipMemsetAsync(dst, value, n, s); }
inline Status stream_create(Stream* s) { return hipStreamCreateWithFlags(s, hipStreamNonBlocking); }
inline Status stream_destroy(Stream s) { return hipStreamDestroy(s); }
inline Status stream_synchronize(Stream s) { return hipStreamSynchronize(s); }
inline Status event_create(Event* e) { return hipEventCreate(e); }
inline Status event_destroy(Event e) { return hipEventDestroy(e); }
inline Status event_record(Event e, Stream s) { return hipEventRecord(e, s); }
inline Status event_synchronize(Event e) { return hipEventSynchronize(e); }
inline Status event_elapsed_ms(float* ms, Event a, Event b) { return hipEventElapsedTime(ms, a, b); }
// Contracts: cuda_platform.h.
inline Status event_create_for_order(Event* e) { return hipEventCreateWithFlags(e, hipEventDisableTiming); }
inline Status stream_wait_event(Stream s, Event e) { return hipStreamWaitEvent(s, e, 0); }
inline Status stream_begin_capture(Stream s) { return hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal); }
inline Status stream_end_capture(Stream s, Graph* g) { return hipStreamEndCapture(s, g); }
inline Status graph_instantiate(GraphExec* e, Graph g) { return hipGraphInstantiate(e, g, nullptr, nullptr, 0); }
inline Status graph_launch(GraphExec e, Stream s) { return hipGraphLaunch(e, s); }
inline Status graph_destroy(Graph g) { return hipGraphDestroy(g); }
inline Status graph_exec_destroy(GraphExec e) { return hipGraphExecDestroy(e); }
#if defined(__HIPCC__)
// Programmatic dependent launch (cuda_platform.h) does not exist on HIP: an ordinary launch, in stream order.
template <class... Params, class... Args>
inline Status launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Stream stream,
                         Args&&... args) {
  hipLaunchKernelGGL(kernel, grid, block, smem, stream, std::forward<Args>(args)...);
  return hipGetLastError();
}
#endif

struct DeviceProps {
  char name[256];
  char arch[32];  // "gfx90a"
  int warp_size;
  int multiprocessors;
  int max_threads_per_block;
  size_t shared_mem_per_block;
  size_t shared_mem_per_block_optin;  // the most a kernel may use after func_set_max_dynamic_smem
  size_t total_memory;
};
inline Status device_props(int d, DeviceProps* out) {
  hipDeviceProp_t p;
  const Status s = hipGetDeviceProperties(&p, d);
  if (s != hipSuccess) return s;
  snprintf(out->name, sizeof(out->name), "%s", p.name);
  // gcnArchName is "gfx90a:sramecc+:xnack-": keep the part before the first ':'.
  int i = 0;
  for (; p.gcnArchName[i] && p.gcnArchName[i] != ':' && i < (int)sizeof(out->arch) - 1; ++i) out->arch[i] = p.gcnArchName[i];
  out->arch[i] = 0;
  out->warp_size = p.warpSize;
  out->multiprocessors = p.multiProcessorCount;
  out->max_threads_per_block = p.maxThreadsPerBlock;
  out->shared_mem_per_block = p.sharedMemPerBlock;
  out->shared_mem_per_block_optin = p.sharedMemPerBlock;  // the LDS of a workgroup: no opt-in above it
  out->total_memory = p.totalGlobalMem;
  return s;
}

// Lets `kernel` take up to `bytes` of dynamic shared memory (at most DeviceProps::shared_mem_per_block_optin).
inline Status func_set_max_dynamic_smem(const void* kernel, int bytes) {
  return hipFuncSetAttribute(kernel, hipFuncAttributeMaxDynamicSharedMemorySize, bytes);
}
// The shared-memory share hint of CUDA (cuda_platform.h): AMD GPUs have a fixed LDS, nothing to ask.
inline Status func_prefer_max_shared(const void*) { return hipSuccess; }

}  // namespace rbee::gpu

// ---- device-side names ----
#if defined(__HIPCC__)
namespace rbee::gpu {
__device__ __forceinline__ float shfl_xor(float v, int mask, int width = RBEE_DEVICE_WARP_SIZE) {
  return __shfl_xor(v, mask, width);
}
__device__ __forceinline__ int shfl_xor(int v, int mask, int width = RBEE_DEVICE_WARP_SIZE) {
  return __shfl_xor(v, mask, width);
}
__device__ __forceinline__ float shfl(float v, int lane, int width = RBEE_DEVICE_WARP_SIZE) {
  return __shfl(v, lane, width);
}
__device__ __forceinline__ float half_to_float(__half h) { return __half2float(h); }
__device__ __forceinline__ __half float_to_half(float f) { return __float2half(f); }
// 4 x int8 dot product accumulate.
__device__ __forceinline__ int dot4_i8(int a, int b, int c) {
#if defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx942__) || defined(__gfx1030__) || defined(__gfx1100__)
  return __builtin_amdgcn_sdot4(a, b, c, false);
#else
  const signed char* x = reinterpret_cast<const signed char*>(&a);
  const signed char* y = reinterpret_cast<const signed char*>(&b);
  return c + x[0] * y[0] + x[1] * y[1] + x[2] * y[2] + x[3] * y[3];
#endif
}

// ---- used by the reduce / index / matmul / nn / conv kernels (gpu-ops) ----
__device__ __forceinline__ double shfl_xor(double v, int mask, int width = RBEE_DEVICE_WARP_SIZE) {
  return __shfl_xor(v, mask, width);
}
// *addr = min(*addr, v) atomically; returns the old value.
__device__ __forceinline__ unsigned long long atomic_min_u64(unsigned long long* addr, unsigned long long v) {
  return atomicMin(addr, v);
}
// *addr += v atomically; returns the old value.
__device__ __forceinline__ int atomic_add_i32(int* addr, int v) { return atomicAdd(addr, v); }
// Orders this thread's global-memory writes before its later ones as seen by every thread of the device.
__device__ __forceinline__ void thread_fence() { __threadfence(); }

// ---- used by the sample kernel ----
__device__ __forceinline__ unsigned long long shfl_xor(unsigned long long v, int mask,
                                                       int width = RBEE_DEVICE_WARP_SIZE) {
  return __shfl_xor(v, mask, width);
}
// *addr += v / *addr = max(*addr, v) atomically (shared or global memory); return the old value.
__device__ __forceinline__ unsigned long long atomic_add_u64(unsigned long long* addr, unsigned long long v) {
  return atomicAdd(addr, v);
}
__device__ __forceinline__ unsigned atomic_add_u32(unsigned* addr, unsigned v) { return atomicAdd(addr, v); }
__device__ __forceinline__ unsigned long long atomic_max_u64(unsigned long long* addr, unsigned long long v) {
  return atomicMax(addr, v);
}

// Orders this thread's memory writes before its later ones for every device and the host (peer signalling).
__device__ __forceinline__ void threadfence_system() { __threadfence_system(); }

// One float multiply / add, rounded once and never fused into an FMA: reference formulas (dequantization,
// the round-to-nearest quantizers) must give the CPU's bits. HIP contracts a * b + c by default; the pragma
// keeps these operations out of it.
__device__ __forceinline__ float mul_rn(float a, float b) {
#pragma clang fp contract(off)
  return a * b;
}
__device__ __forceinline__ float add_rn(float a, float b) {
#pragma clang fp contract(off)
  return a + b;
}
// L2 prefetch hint (cuda_platform.h): no bulk prefetch instruction on AMD GPUs, so nothing.
__device__ __forceinline__ void prefetch_l2(const void*, uint32_t) {}
// Programmatic dependent launch (cuda_platform.h): HIP launches in order, so nothing to wait for.
__device__ __forceinline__ void grid_dependency_wait() {}
__device__ __forceinline__ void grid_dependency_trigger() {}
// ---- warps (tensor-core kernels) ----
// This thread's lane in its wavefront.
__device__ __forceinline__ int lane_id() { return (int)__lane_id(); }
// Orders the LDS accesses of the calling wavefront's lanes (all lanes call it). A wavefront executes in
// lockstep; the fences keep the compiler from moving LDS accesses across the point.
__device__ __forceinline__ void warp_sync() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}
}  // namespace rbee::gpu
#endif
