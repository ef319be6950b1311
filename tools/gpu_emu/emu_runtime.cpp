// The emulator's scheduler: blocks in order, the threads of a block as ucontext coroutines (see emu_runtime.h).
#include "emu_runtime.h"

#include <ucontext.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

namespace emu {

namespace {

constexpr size_t kStackBytes = 128 << 10;
constexpr size_t kMaxThreads = 1024;
constexpr size_t kGuardBytes = 4096;
constexpr unsigned char kGuard = 0xA5;

struct Coroutine {
  ucontext_t ctx;
  std::unique_ptr<char[]> stack;
  Dim3 idx;
  int linear = 0;
  bool done = false, waiting = false;
};

struct State {
  ucontext_t scheduler;
  std::vector<Coroutine> threads;
  Coroutine* current = nullptr;
  const std::function<void()>* body = nullptr;
  Dim3 grid, block, block_idx;
  std::vector<unsigned char> smem;
  std::vector<unsigned long long> slots;
  std::map<const void*, size_t> smem_allowed;  // kernels granted more than kDefaultDynamicSmem
  int error = 0;
};

// One scheduler per OS thread: launches from different threads (the ranks of a tensor split over emulated
// devices) run side by side.
State& state() {
  static thread_local State s;
  return s;
}

enum Error { kOk = 0, kTooManyThreads, kTooMuchSmem, kGridTooLarge, kBrokenBarrier, kSmemOverflow, kNested };

void set_error(int e) {
  if (state().error == kOk) state().error = e;
}

void entry() {
  State& s = state();
  (*s.body)();
  s.current->done = true;
  // Returning resumes the scheduler through uc_link.
}

}  // namespace

Dim3 thread_index() { return state().current->idx; }
Dim3 block_index() { return state().block_idx; }
Dim3 block_dim() { return state().block; }
Dim3 grid_dim() { return state().grid; }
int linear_thread() { return state().current->linear; }
unsigned char* dynamic_smem() { return state().smem.data(); }
unsigned long long* exchange_slots() { return state().slots.data(); }

void sync_threads() {
  State& s = state();
  s.current->waiting = true;
  swapcontext(&s.current->ctx, &s.scheduler);
}

int allow_dynamic_smem(const void* fn, size_t bytes) {
  if (bytes > kMaxDynamicSmemOptin) return kTooMuchSmem;
  state().smem_allowed[fn] = bytes;
  return kOk;
}

void launch_impl(const void* fn, Dim3 grid, Dim3 block, size_t smem, const std::function<void()>& body) {
  State& s = state();
  if (s.current) return set_error(kNested);
  const size_t nthreads = (size_t)block.x * block.y * block.z;
  if (nthreads == 0 || nthreads > kMaxThreads || block.z > 64) return set_error(kTooManyThreads);
  const auto granted = s.smem_allowed.find(fn);
  if (smem > (granted == s.smem_allowed.end() ? kDefaultDynamicSmem : std::max(kDefaultDynamicSmem, granted->second))) {
    return set_error(kTooMuchSmem);
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) return set_error(kGridTooLarge);
  s.grid = grid;
  s.block = block;
  s.body = &body;
  if (s.threads.size() < nthreads) s.threads.resize(nthreads);
  s.slots.assign(nthreads, 0);
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        s.block_idx = Dim3(bx, by, bz);
        // Shared memory starts as junk, as on a GPU; the guard area after it must survive the block.
        s.smem.assign(smem + kGuardBytes, 0xCD);
        std::memset(s.smem.data() + smem, kGuard, kGuardBytes);
        for (size_t t = 0; t < nthreads; ++t) {
          Coroutine& c = s.threads[t];
          if (!c.stack) c.stack.reset(new char[kStackBytes]);
          c.linear = (int)t;
          c.idx = Dim3((unsigned)(t % block.x), (unsigned)(t / block.x % block.y), (unsigned)(t / (block.x * block.y)));
          c.done = c.waiting = false;
          getcontext(&c.ctx);
          c.ctx.uc_stack.ss_sp = c.stack.get();
          c.ctx.uc_stack.ss_size = kStackBytes;
          c.ctx.uc_link = &s.scheduler;
          makecontext(&c.ctx, entry, 0);
        }
        for (;;) {
          for (size_t t = 0; t < nthreads; ++t) {
            Coroutine& c = s.threads[t];
            if (c.done || c.waiting) continue;
            s.current = &c;
            swapcontext(&s.scheduler, &c.ctx);
            s.current = nullptr;
          }
          size_t done = 0, waiting = 0;
          for (size_t t = 0; t < nthreads; ++t) {
            done += s.threads[t].done;
            waiting += s.threads[t].waiting;
          }
          if (done == nthreads) break;
          if (done > 0 && waiting > 0) {
            std::fprintf(stderr, "gpu_emu: barrier reached by %zu threads after %zu returned (block %u,%u,%u)\n",
                         waiting, done, bx, by, bz);
            set_error(kBrokenBarrier);
          }
          for (size_t t = 0; t < nthreads; ++t) s.threads[t].waiting = false;
        }
        for (size_t i = 0; i < kGuardBytes; ++i) {
          if (s.smem[smem + i] != kGuard) {
            std::fprintf(stderr, "gpu_emu: dynamic shared memory written past its %zu bytes (block %u,%u,%u)\n",
                         smem, bx, by, bz);
            set_error(kSmemOverflow);
            break;
          }
        }
      }
    }
  }
  s.body = nullptr;
}

void fail(int code) { set_error(code); }

int last_error() {
  const int e = state().error;
  state().error = kOk;
  return e;
}

const char* error_string(int code) {
  switch (code) {
    case kOk: return "no error";
    case kTooManyThreads: return "emulated launch: invalid block size";
    case kTooMuchSmem:
      return "emulated launch: more dynamic shared memory than the kernel was allowed (48 KiB unless raised)";
    case kGridTooLarge: return "emulated launch: grid dimension out of range";
    case kBrokenBarrier: return "emulated launch: __syncthreads reached after some threads returned";
    case kSmemOverflow: return "emulated launch: dynamic shared memory overflow";
    case kNested: return "emulated launch: launch from inside a kernel";
    case kMmaMisaligned: return "emulated mma_i8: tile address or row stride not a multiple of 16 bytes";
    case kMmaTileChanged: return "emulated mma_i8: shared-memory tile changed between fragment load and mma";
    case kAsyncCopyMisaligned: return "emulated copy_async_16: source or destination not 16-byte aligned";
  }
  return "emulated launch: unknown error";
}

}  // namespace emu
