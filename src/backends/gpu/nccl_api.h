// The subset of NCCL's C API (nccl.h) rbee calls, declared here so that nothing needs nccl.h to build: the
// library (libnccl.so.2 on CUDA, RCCL's librccl.so.1 on ROCm, which exports the same names) is opened at run
// time by backends/gpu/collective.cu, like rocBLAS. Values and signatures as nccl.h documents them (NCCL 2.x,
// RCCL 2.x); only stable, long-standing entry points.
#pragma once

#include <cstddef>

#include "backends/gpu/platform.h"

namespace rbee::gpu::nccl {

using Comm = struct ncclComm*;  // ncclComm_t
using Result = int;             // ncclResult_t
constexpr Result kSuccess = 0;  // ncclSuccess
constexpr int kFloat32 = 7;     // ncclFloat32 (ncclDataType_t)
constexpr int kSum = 0;         // ncclSum (ncclRedOp_t)

// ncclCommInitAll: one communicator per device of `devices` (ranks in that order), from one thread.
using CommInitAllFn = Result (*)(Comm* comms, int ndev, const int* devices);
using CommDestroyFn = Result (*)(Comm comm);
using CommAbortFn = Result (*)(Comm comm);
// ncclAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream): in place when sendbuff == recvbuff.
using AllReduceFn = Result (*)(const void* send, void* recv, size_t count, int datatype, int op, Comm comm,
                               Stream stream);
using GetErrorStringFn = const char* (*)(Result result);
using GetVersionFn = Result (*)(int* version);

// The library and its entry points; null members when it could not be opened.
struct Api {
  void* lib = nullptr;
  CommInitAllFn comm_init_all = nullptr;
  CommDestroyFn comm_destroy = nullptr;
  CommAbortFn comm_abort = nullptr;
  AllReduceFn all_reduce = nullptr;
  GetErrorStringFn error_string = nullptr;
  int version = 0;
};

// Opens the platform's collective library (RBEE_GPU_COLLECTIVE_LIBS) once per process; `why` says what happened.
// Returns nullptr when it is absent or lacks an entry point. RBEE_NCCL=off skips it (tests of the fallbacks).
const Api* open_api(std::string* why);

}  // namespace rbee::gpu::nccl
