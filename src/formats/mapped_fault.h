// What happens when a mapped model file shrinks under the process (truncated, or rewritten in place by a download
// or a copy): the next read of a page past the new end raises SIGBUS, which by default kills the worker without a
// word. mapped_fault keeps a table of the live mappings and a SIGBUS handler that, for an address inside one of
// them, writes a clear message naming the file and the offset and exits with kMappedFileLostExit (EX_TEMPFAIL),
// so a supervisor restarts the worker and the log says why. The process cannot go on: the weights it reads are gone.
// Faults at other addresses go to the handler installed before (sanitizers) or the default action.
#pragma once

#include <cstddef>

namespace rbee::formats {

inline constexpr int kMappedFileLostExit = 75;

// Registers [addr, addr + size) as a mapping of `path` (installs the handler on first use). Thread-safe; the table
// holds 64 mappings, beyond which a mapping is served without the message.
void register_mapping(const void* addr, size_t size, const char* path);
void unregister_mapping(const void* addr);

}  // namespace rbee::formats
