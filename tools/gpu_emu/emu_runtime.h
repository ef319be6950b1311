// A CPU emulator of the GPU execution model, for running the GPU kernel source (src/backends/gpu/) through the
// conformance suite on a machine without a GPU. Development tool only: see tools/gpu_emu/README.md.
//
// A launch runs its blocks one after another; the threads of a block are coroutines (ucontext) on the calling
// thread, switched at __syncthreads() and at shuffles, so shared memory is an ordinary buffer (static locals for
// __shared__ arrays, one per kernel instantiation) and every barrier is checked: a barrier reached while some
// threads of the block have already returned is reported as an error (the kernel's barriers are not uniform).
// Dynamic shared memory is followed by a guard area that is checked after each block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

namespace emu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  Dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

Dim3 thread_index();
Dim3 block_index();
Dim3 block_dim();
Dim3 grid_dim();
void sync_threads();
unsigned char* dynamic_smem();
// The calling coroutine's linear thread index within its block.
int linear_thread();

// Runs body once per thread of every block of kernel `fn`. Launch errors (too many threads, more dynamic shared
// memory than fn was allowed, a grid dimension out of range, broken barriers, a corrupted guard) become the sticky
// error read by last_error().
void launch_impl(const void* fn, Dim3 grid, Dim3 block, size_t smem, const std::function<void()>& body);
template <class F, class G, class B, class S = int>
void launch_kernel(const void* fn, F body, G grid, B block, size_t smem = 0, S = S{}) {
  auto dim = [](auto v) {
    if constexpr (std::is_same_v<decltype(v), Dim3>) return v;
    else return Dim3((unsigned)v);
  };
  launch_impl(fn, dim(grid), dim(block), smem, std::function<void()>(body));
}
// Dynamic shared memory a kernel may take: 48 KiB, or what allow_dynamic_smem granted it (the emulated
// cudaFuncSetAttribute(MaxDynamicSharedMemorySize)), at most kMaxDynamicSmemOptin.
inline constexpr size_t kDefaultDynamicSmem = 48 << 10;
inline constexpr size_t kMaxDynamicSmemOptin = 227 << 10;  // H100's
int allow_dynamic_smem(const void* fn, size_t bytes);
// 0: no error; otherwise an error number whose text is error_string(). Reading clears it.
int last_error();
const char* error_string(int code);
// Errors that device-side emulations (platform wrappers) report from inside a kernel; the first one of a launch
// becomes its sticky error, like the scheduler's own.
enum KernelError { kMmaMisaligned = 100, kMmaTileChanged = 101, kAsyncCopyMisaligned = 102 };
void fail(int code);

// Per-thread slots of the block's exchanges.
unsigned long long* exchange_slots();

// Exchanges v between the threads of a block: thread t gets the value of thread t ^ mask. Every thread of the
// block must call it (the kernels using shuffles keep them uniform).
template <class T>
T exchange_xor(T v, int mask) {
  static_assert(sizeof(T) <= 8);
  unsigned long long bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  exchange_slots()[linear_thread()] = bits;
  sync_threads();
  bits = exchange_slots()[linear_thread() ^ mask];
  sync_threads();
  T r;
  std::memcpy(&r, &bits, sizeof(T));
  return r;
}
template <class T>
T exchange_from(T v, int lane, int width) {
  static_assert(sizeof(T) <= 8);
  unsigned long long bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  exchange_slots()[linear_thread()] = bits;
  sync_threads();
  bits = exchange_slots()[linear_thread() / width * width + lane];
  sync_threads();
  T r;
  std::memcpy(&r, &bits, sizeof(T));
  return r;
}

}  // namespace emu
