// The emulator's asynchronous global -> shared copies (shadows src/backends/cuda/cuda_async_copy.h, whose contract
// it implements). A copy lands only when its thread calls copy_async_wait_all; until then its destination holds
// junk (0xEE bytes), so a kernel that reads a stage before waiting for it, or that overwrites a stage other threads
// still read, computes with junk and fails its conformance cases.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "emu_runtime.h"

namespace rbee::gpu {

struct EmuPendingCopy {
  unsigned char* dst;
  unsigned char bytes[16];
  uint64_t group;  // the issuing thread's commit count when it was issued
};
// Pending copies per thread of the running block (coroutines run one at a time: no locking).
inline std::vector<std::vector<EmuPendingCopy>>& emu_pending_copies() {
  static std::vector<std::vector<EmuPendingCopy>> pending;
  return pending;
}

// Commits per thread of the running block (copy_async_wait_pending lands the groups older than the N newest).
inline std::vector<uint64_t>& emu_copy_commits() {
  static std::vector<uint64_t> commits;
  return commits;
}

inline void copy_async_16(void* dst, const void* src, bool valid) {
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0 || (valid && reinterpret_cast<uintptr_t>(src) % 16 != 0)) {
    return ::emu::fail(::emu::kAsyncCopyMisaligned);
  }
  auto& all = emu_pending_copies();
  const size_t t = (size_t)::emu::linear_thread();
  if (all.size() <= t) all.resize(t + 1);
  EmuPendingCopy c;
  c.dst = static_cast<unsigned char*>(dst);
  auto& commits = emu_copy_commits();
  if (commits.size() <= t) commits.resize(t + 1, 0);
  c.group = commits[t];
  if (valid) std::memcpy(c.bytes, src, 16);
  else std::memset(c.bytes, 0, 16);
  std::memset(dst, 0xEE, 16);
  all[t].push_back(c);
}
inline void copy_async_16_l1(void* dst, const void* src, bool valid) { copy_async_16(dst, src, valid); }
inline void copy_async_commit() {
  auto& commits = emu_copy_commits();
  const size_t t = (size_t)::emu::linear_thread();
  if (commits.size() <= t) commits.resize(t + 1, 0);
  ++commits[t];
}
inline void copy_async_wait_all() {
  auto& all = emu_pending_copies();
  const size_t t = (size_t)::emu::linear_thread();
  if (t >= all.size()) return;
  for (const EmuPendingCopy& c : all[t]) std::memcpy(c.dst, c.bytes, 16);
  all[t].clear();
}

// Lands this thread's copies of committed groups older than the N most recent commits; later ones stay junk.
template <int N>
inline void copy_async_wait_pending() {
  auto& all = emu_pending_copies();
  auto& commits = emu_copy_commits();
  const size_t t = (size_t)::emu::linear_thread();
  if (t >= all.size()) return;
  const uint64_t done = t < commits.size() ? commits[t] : 0;
  std::vector<EmuPendingCopy> keep;
  for (const EmuPendingCopy& c : all[t]) {
    if (c.group + N < done) std::memcpy(c.dst, c.bytes, 16);
    else keep.push_back(c);
  }
  all[t].swap(keep);
}

}  // namespace rbee::gpu
