// MappedFile: an RAII read-only memory mapping of a whole file, shared by the GGUF and safetensors readers.
//
// The mapping is PROT_READ: tensors that view it must never be written. An empty file maps to an empty span
// (mmap cannot map zero bytes). Instances are held through shared_ptr so tensor views can keep them alive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace rbee::formats {

class MappedFile {
 public:
  // Throws Error(NotFound) when the path does not exist, Error(Io) when it is not a regular file or cannot be
  // opened or mapped (the message names the path and the system's reason).
  static std::shared_ptr<const MappedFile> open(const std::string& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  std::span<const uint8_t> bytes() const { return {static_cast<const uint8_t*>(addr_), size_}; }
  size_t size() const { return size_; }

 private:
  MappedFile(std::string path, void* addr, size_t size) : path_(std::move(path)), addr_(addr), size_(size) {}
  std::string path_;
  void* addr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace rbee::formats
