// Turns bytes of a mapped model file into a CPU Tensor view, shared by the GGUF and safetensors readers.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "rbee/core/tensor.h"

namespace rbee::formats {

// Address alignment that element or block reads of `dtype` need (ggml block structs start with f16 scales,
// Q8_K with an f32).
uint64_t required_address_alignment(DType dtype);

// Bytes [offset, offset + size) of a model file's data section, which starts `data_offset` bytes into `file`.
// Throws InvalidArgument naming the `format` ("gguf"), the file's `path` and the tensor `name` when the range does
// not lie inside the section (a TensorInfo of another file, or a corrupt one).
std::span<const uint8_t> data_section_bytes(std::span<const uint8_t> file, uint64_t data_offset, uint64_t offset,
                                            uint64_t size, std::string_view format, std::string_view path,
                                            std::string_view name);

// A tensor viewing `bytes` (exactly shape x dtype bytes) on a host-accessible device; `keepalive` owns the
// mapping. The memory is read-only. Throws InvalidArgument for a non-host device and Error(Io) naming
// `source`, `file_offset` and `name` when the address is not aligned for the dtype.
Tensor view_mapped_tensor(std::span<const uint8_t> bytes, const Shape& shape, DType dtype, Device& device,
                          std::shared_ptr<const void> keepalive, std::string_view source, uint64_t file_offset,
                          std::string_view name);

}  // namespace rbee::formats
