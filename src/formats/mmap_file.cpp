#include "formats/mmap_file.h"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/mapped_fault.h"
#include "rbee/core/error.h"

namespace rbee::formats {

namespace {
// Closes the descriptor on every path out of open(); the mapping stays valid after close.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    RBEE_CHECK_CODE(err != ENOENT, ErrorCode::NotFound, "model file '{}' does not exist", path);
    RBEE_THROW(ErrorCode::Io, "cannot open '{}': {}", path, std::strerror(err));
  }
  FdGuard guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) RBEE_THROW(ErrorCode::Io, "cannot stat '{}': {}", path, std::strerror(errno));
  RBEE_CHECK_CODE(S_ISREG(st.st_mode), ErrorCode::Io, "'{}' is not a regular file", path);
  const size_t size = (size_t)st.st_size;
  void* addr = nullptr;
  if (size > 0) {
    addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED)
      RBEE_THROW(ErrorCode::Io, "cannot map '{}' ({} bytes): {}", path, size, std::strerror(errno));
  }
  register_mapping(addr, size, path.c_str());  // a file truncated later gets a clear message, not a silent SIGBUS
  return std::shared_ptr<const MappedFile>(new MappedFile(path, addr, size));
}

MappedFile::~MappedFile() {
  if (addr_ != nullptr) {
    unregister_mapping(addr_);
    ::munmap(addr_, size_);
  }
}

}  // namespace rbee::formats
