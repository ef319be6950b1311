// The emulator's side of the GPU platform layer (stands in for src/backends/cuda/cuda_platform.h, which it
// shadows on the include path): host memory as device memory, synchronous streams, the device-side names over
// the coroutine scheduler of emu_runtime.h. See tools/gpu_emu/README.md.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "emu_runtime.h"
#include "rbee/core/half.h"

#define RBEE_GPU_VENDOR "rbee emulator"
#define RBEE_GPU_BACKEND_NAME "cuda"
#define RBEE_GPU_COLLECTIVE_NAME "nccl"
#define RBEE_GPU_COLLECTIVE_LIBS {"libnccl.so.2", "libnccl.so"}
#ifndef RBEE_DEVICE_WARP_SIZE
#define RBEE_DEVICE_WARP_SIZE 32
#endif

// cuda_fp16.h's storage type and conversions.
struct __half {
  unsigned short x;
};
inline float __half2float(__half h) { return rbee::f16_bits_to_f32(h.x); }
inline __half __float2half_rn(float f) { return __half{rbee::f32_to_f16_bits(f)}; }
inline __half __float2half(float f) { return __float2half_rn(f); }

namespace rbee::gpu {

using Stream = int*;
using Event = int*;
using Status = int;
using Graph = int*;
using GraphExec = int*;
using half = __half;
inline constexpr Status kSuccess = 0;
inline constexpr Status kUnsupported = 1000;

inline const char* status_string(Status s) {
  return s == kUnsupported ? "not available in the emulator" : ::emu::error_string(s);
}
inline Status get_last_error() { return ::emu::last_error(); }
// RBEE_EMU_DEVICES=N (1-8, default 1) emulated devices, all in host memory (so each can reach the others'),
// for tensor and layer splits.
inline Status device_count(int* n) {
  const char* env = std::getenv("RBEE_EMU_DEVICES");
  const int v = env ? std::atoi(env) : 1;
  *n = v >= 1 && v <= 8 ? v : 1;
  return kSuccess;
}
inline Status set_device(int) { return kSuccess; }
inline Status mem_get_info(size_t* free_bytes, size_t* total_bytes) {
  *free_bytes = *total_bytes = (size_t)8 << 30;
  return kSuccess;
}
inline Status device_malloc(void** p, size_t n) {
  *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
  return *p ? kSuccess : 2;
}
inline Status device_free(void* p) {
  std::free(p);
  return kSuccess;
}
inline Status host_malloc_pinned(void** p, size_t n) { return device_malloc(p, n); }
inline Status device_malloc_coherent(void** p, size_t n) { return device_malloc(p, n); }
inline Status can_access_peer(int* can, int, int) {
  *can = 1;
  return kSuccess;
}
inline Status enable_peer_access(int) { return kSuccess; }
inline Status host_free_pinned(void* p) { return device_free(p); }
inline Status memcpy_async(void* dst, const void* src, size_t n, Stream) {
  std::memmove(dst, src, n);
  return kSuccess;
}
inline Status memset_async(void* dst, int value, size_t n, Stream) {
  std::memset(dst, value, n);
  return kSuccess;
}
inline Status stream_create(Stream* s) {
  static int token;
  *s = &token;
  return kSuccess;
}
inline Status stream_destroy(Stream) { return kSuccess; }
inline Status stream_synchronize(Stream) { return kSuccess; }
inline Status event_create(Event*) { return kUnsupported; }  // timing events: none here
// Ordering events (GpuDevice's side stream): every launch runs to its end when issued, so recording and waiting
// have nothing to order; a real event object all the same, so creation and destruction pair up.
inline Status event_create_for_order(Event* e) {
  *e = new int(0);
  return kSuccess;
}
inline Status event_destroy(Event e) {
  delete e;
  return kSuccess;
}
inline Status event_record(Event e, Stream) { return e ? kSuccess : kUnsupported; }
inline Status stream_wait_event(Stream, Event e) { return e ? kSuccess : kUnsupported; }
inline Status event_synchronize(Event) { return kUnsupported; }
inline Status event_elapsed_ms(float*, Event, Event) { return kUnsupported; }
inline Status stream_begin_capture(Stream) { return kUnsupported; }
inline Status stream_end_capture(Stream, Graph*) { return kUnsupported; }
inline Status graph_instantiate(GraphExec*, Graph) { return kUnsupported; }
inline Status graph_launch(GraphExec, Stream) { return kUnsupported; }
inline Status graph_destroy(Graph) { return kUnsupported; }
inline Status graph_exec_destroy(GraphExec) { return kUnsupported; }
// Programmatic dependent launch: launches run one after another here, so an ordinary launch.
template <class... Params, class... Args>
inline Status launch_pdl(void (*kernel)(Params...), ::emu::Dim3 grid, ::emu::Dim3 block, size_t smem, Stream stream,
                         Args&&... args) {
  ::emu::launch_kernel(reinterpret_cast<const void*>(kernel), [&] { kernel(args...); }, grid, block, smem, stream);
  return (Status)::emu::last_error();
}

struct DeviceProps {
  char name[256];
  char arch[32];
  int warp_size;
  int multiprocessors;
  int max_threads_per_block;
  size_t shared_mem_per_block;
  size_t shared_mem_per_block_optin;
  size_t total_memory;
};
inline Status device_props(int, DeviceProps* out) {
  std::snprintf(out->name, sizeof(out->name), "rbee GPU emulator (warp %d)", RBEE_DEVICE_WARP_SIZE);
  std::snprintf(out->arch, sizeof(out->arch), "emu");
  out->warp_size = RBEE_DEVICE_WARP_SIZE;
  out->multiprocessors = 4;
  out->max_threads_per_block = 1024;
  out->shared_mem_per_block = ::emu::kDefaultDynamicSmem;
  out->shared_mem_per_block_optin = ::emu::kMaxDynamicSmemOptin;
  out->total_memory = (size_t)8 << 30;
  return kSuccess;
}

inline Status func_set_max_dynamic_smem(const void* kernel, int bytes) {
  return ::emu::allow_dynamic_smem(kernel, (size_t)bytes);
}
inline Status func_prefer_max_shared(const void*) { return kSuccess; }

// ---- device-side names ----
inline float shfl_xor(float v, int mask, int = RBEE_DEVICE_WARP_SIZE) { return ::emu::exchange_xor(v, mask); }
inline int shfl_xor(int v, int mask, int = RBEE_DEVICE_WARP_SIZE) { return ::emu::exchange_xor(v, mask); }
inline double shfl_xor(double v, int mask, int = RBEE_DEVICE_WARP_SIZE) { return ::emu::exchange_xor(v, mask); }
inline float shfl(float v, int lane, int width = RBEE_DEVICE_WARP_SIZE) { return ::emu::exchange_from(v, lane, width); }
inline float half_to_float(__half h) { return __half2float(h); }
inline __half float_to_half(float f) { return __float2half_rn(f); }
inline int dot4_i8(int a, int b, int c) {
  const signed char* x = reinterpret_cast<const signed char*>(&a);
  const signed char* y = reinterpret_cast<const signed char*>(&b);
  return c + x[0] * y[0] + x[1] * y[1] + x[2] * y[2] + x[3] * y[3];
}
inline void threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
// Coroutines never run at the same time: plain read-modify-write is atomic here.
inline unsigned long long atomic_min_u64(unsigned long long* addr, unsigned long long v) {
  const unsigned long long old = *addr;
  if (v < old) *addr = v;
  return old;
}
inline int atomic_add_i32(int* addr, int v) {
  const int old = *addr;
  *addr = old + v;
  return old;
}
inline void thread_fence() {}
inline unsigned long long shfl_xor(unsigned long long v, int mask, int = RBEE_DEVICE_WARP_SIZE) {
  return ::emu::exchange_xor(v, mask);
}
inline unsigned long long atomic_add_u64(unsigned long long* addr, unsigned long long v) {
  const unsigned long long old = *addr;
  *addr = old + v;
  return old;
}
inline unsigned atomic_add_u32(unsigned* addr, unsigned v) {
  const unsigned old = *addr;
  *addr = old + v;
  return old;
}
inline unsigned long long atomic_max_u64(unsigned long long* addr, unsigned long long v) {
  const unsigned long long old = *addr;
  if (v > old) *addr = v;
  return old;
}
// One rounding per operation; volatile keeps the host compiler from contracting them into an FMA.
inline float mul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}
inline float add_rn(float a, float b) {
  volatile float r = a + b;
  return r;
}
// Programmatic dependent launch, device side: launches never overlap here.
inline void grid_dependency_wait() {}
inline void grid_dependency_trigger() {}
// An L2 prefetch hint: there is no cache to fill. Checks the documented preconditions (16-byte multiples).
inline void prefetch_l2(const void* p, uint32_t bytes) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0 || bytes % 16 != 0) {
    std::fprintf(stderr, "gpu_emu: prefetch_l2(%p, %u): not 16-byte multiples\n", p, bytes);
    std::abort();
  }
}

// ---- warps ----
inline int lane_id() { return ::emu::linear_thread() % RBEE_DEVICE_WARP_SIZE; }
// The emulator has no warps apart from the block: a warp barrier is a block barrier (every thread of the
// block must reach it, which the kernels using it guarantee).
inline void warp_sync() { ::emu::sync_threads(); }

}  // namespace rbee::gpu
