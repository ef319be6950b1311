// CUDA's side of the GPU platform layer: the only place the shared kernel source meets CUDA headers.
// Everything is re-exported under rbee::gpu names by backends/gpu/platform.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <utility>

#define RBEE_GPU_VENDOR "NVIDIA"
#define RBEE_GPU_BACKEND_NAME "cuda"
// The collective library opened at run time for tensor parallelism (backends/gpu/collective.cu).
#define RBEE_GPU_COLLECTIVE_NAME "nccl"
#define RBEE_GPU_COLLECTIVE_LIBS {"libnccl.so.2", "libnccl.so"}
// Warp width of the code being compiled (device passes) and of every NVIDIA GPU.
#define RBEE_DEVICE_WARP_SIZE 32

namespace rbee::gpu {

using Stream = cudaStream_t;
using Event = cudaEvent_t;
using Status = cudaError_t;
using Graph = cudaGraph_t;
using GraphExec = cudaGraphExec_t;
using half = __half;
inline constexpr Status kSuccess = cudaSuccess;

inline const char* status_string(Status s) { return cudaGetErrorString(s); }
inline Status get_last_error() { return cudaGetLastError(); }
inline Status device_count(int* n) { return cudaGetDeviceCount(n); }
inline Status set_device(int d) { return cudaSetDevice(d); }
inline Status mem_get_info(size_t* free_bytes, size_t* total_bytes) { return cudaMemGetInfo(free_bytes, total_bytes); }
inline Status device_malloc(void** p, size_t n) { return cudaMalloc(p, n); }
inline Status device_free(void* p) { return cudaFree(p); }
inline Status host_malloc_pinned(void** p, size_t n) { return cudaMallocHost(p, n); }
// Device memory that kernels on other GPUs read and write while a kernel here runs (peer flags and staging):
// ordinary device memory on CUDA.
inline Status device_malloc_coherent(void** p, size_t n) { return cudaMalloc(p, n); }
inline Status can_access_peer(int* can, int device, int peer) { return cudaDeviceCanAccessPeer(can, device, peer); }
// Lets the current device's kernels use `peer`'s memory; enabling it twice is not an error.
inline Status enable_peer_access(int peer) {
  const Status s = cudaDeviceEnablePeerAccess(peer, 0);
  if (s == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();
    return cudaSuccess;
  }
  return s;
}
inline Status host_free_pinned(void* p) { return cudaFreeHost(p); }
inline Status memcpy_async(void* dst, const void* src, size_t n, Stream s) {
  return cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s);
}
inline Status memset_async(void* dst, int value, size_t n, Stream s) { return cudaMemsetAsync(dst, value, n, s); }
inline Status stream_create(Stream* s) { return cudaStreamCreateWithFlags(s, cudaStreamNonBlocking); }
inline Status stream_destroy(Stream s) { return cudaStreamDestroy(s); }
inline Status stream_synchronize(Stream s) { return cudaStreamSynchronize(s); }
inline Status event_create(Event* e) { return cudaEventCreate(e); }
inline Status event_destroy(Event e) { return cudaEventDestroy(e); }
inline Status event_record(Event e, Stream s) { return cudaEventRecord(e, s); }
inline Status event_synchronize(Event e) { return cudaEventSynchronize(e); }
inline Status event_elapsed_ms(float* ms, Event a, Event b) { return cudaEventElapsedTime(ms, a, b); }
// An event for ordering streams only (no timing: cheaper to record, and what a graph capture turns into edges).
inline Status event_create_for_order(Event* e) { return cudaEventCreateWithFlags(e, cudaEventDisableTiming); }
// Work issued on s afterwards starts after the work e's last record captured (recorded into a capture as an edge).
inline Status stream_wait_event(Stream s, Event e) { return cudaStreamWaitEvent(s, e, 0); }
inline Status stream_begin_capture(Stream s) { return cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal); }
inline Status stream_end_capture(Stream s, Graph* g) { return cudaStreamEndCapture(s, g); }
inline Status graph_instantiate(GraphExec* e, Graph g) { return cudaGraphInstantiate(e, g, 0); }
inline Status graph_launch(GraphExec e, Stream s) { return cudaGraphLaunch(e, s); }
inline Status graph_destroy(Graph g) { return cudaGraphDestroy(g); }
inline Status graph_exec_destroy(GraphExec e) { return cudaGraphExecDestroy(e); }

// Launches kernel<<<grid, block, smem, stream>>>(args...) as a programmatic dependent launch: the kernel may
// start while the previous kernel on the stream is finishing, and must call grid_dependency_wait() before it
// reads anything an earlier launch wrote (stream capture records the programmatic edge in the graph).
template <class... Params, class... Args>
inline Status launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Stream stream,
                         Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// Facts read from the device, vendor-neutral.
struct DeviceProps {
  char name[256];
  char arch[32];  // "sm_90"
  int warp_size;
  int multiprocessors;
  int max_threads_per_block;
  size_t shared_mem_per_block;
  size_t shared_mem_per_block_optin;  // the most a kernel may use after func_set_max_dynamic_smem
  size_t total_memory;
};
inline Status device_props(int d, DeviceProps* out) {
  cudaDeviceProp p;
  const Status s = cudaGetDeviceProperties(&p, d);
  if (s != cudaSuccess) return s;
  snprintf(out->name, sizeof(out->name), "%s", p.name);
  snprintf(out->arch, sizeof(out->arch), "sm_%d%d", p.major, p.minor);
  out->warp_size = p.warpSize;
  out->multiprocessors = p.multiProcessorCount;
  out->max_threads_per_block = p.maxThreadsPerBlock;
  out->shared_mem_per_block = p.sharedMemPerBlock;
  out->shared_mem_per_block_optin = p.sharedMemPerBlockOptin;
  out->total_memory = p.totalGlobalMem;
  return s;
}

// Lets `kernel` (a __global__ function) take up to `bytes` of dynamic shared memory (above the default 48 KiB, up
// to DeviceProps::shared_mem_per_block_optin) on the current device.
inline Status func_set_max_dynamic_smem(const void* kernel, int bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}
// Asks for the largest shared-memory share of the unified L1 / shared memory when `kernel` runs (so that as many
// blocks fit a multiprocessor as its shared memory allows; the driver otherwise may pick a smaller share). A hint.
inline Status func_prefer_max_shared(const void* kernel) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
}

}  // namespace rbee::gpu

// ---- device-side names ----
#if defined(__CUDACC__)
namespace rbee::gpu {
__device__ __forceinline__ float shfl_xor(float v, int mask, int width = RBEE_DEVICE_WARP_SIZE) {
  return __shfl_xor_sync(0xffffffffu, v, mask, width);
}
__device__ __forceinline__ int shfl_xor(int v, int mask, int width = RBEE_DEVICE_WARP_SIZE) {
  return __shfl_xor_sync(0xffffffffu, v, mask, width);
}
__device__ __forceinline__ float shfl(float v, int lane, int width = RBEE_DEVICE_WARP_SIZE) {
  return __shfl_sync(0xffffffffu, v, lane, width);
}
__device__ __forceinline__ float half_to_float(__half h) { return __half2float(h); }
__device__ __forceinline__ __half float_to_half(float f) { return __float2half_rn(f); }
// 4 x int8 dot product accumulate (dp4a).
__device__ __forceinline__ int dot4_i8(int a, int b, int c) { return __dp4a(a, b, c); }

// ---- used by the reduce / index / matmul / nn / conv kernels (gpu-ops) ----
__device__ __forceinline__ double shfl_xor(double v, int mask, int width = RBEE_DEVICE_WARP_SIZE) {
  return __shfl_xor_sync(0xffffffffu, v, mask, width);
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
  return __shfl_xor_sync(0xffffffffu, v, mask, width);
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
// the round-to-nearest quantizers) must give the CPU's bits.
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }

// Programmatic dependent launch (launch_pdl), device side. wait: blocks until every earlier launch on the stream
// has completed and its writes are visible (immediately when the kernel was not launched with launch_pdl).
// trigger: lets the next launch_pdl kernel start its blocks early (they run up to their wait). sm_90 and newer;
// elsewhere kernels are never launched early and both do nothing.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_dependency_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Asks the memory system to bring [p, p + bytes) into the L2 cache, without waiting and without registers
// (p and bytes multiples of 16). A hint: correctness never depends on it. sm_90: one bulk prefetch (the copy
// engine splits it into lines); older GPUs: nothing.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
  (void)p;
  (void)bytes;
#endif
}
// ---- warps (tensor-core kernels) ----
// This thread's lane in its warp.
__device__ __forceinline__ int lane_id() {
  int l;
  asm("mov.u32 %0, %%laneid;" : "=r"(l));
  return l;
}
// Orders the shared-memory accesses of the calling warp's lanes (all lanes call it).
__device__ __forceinline__ void warp_sync() { __syncwarp(); }
}  // namespace rbee::gpu
#endif
