#include "formats/mapped_tensor.h"

#include <algorithm>

#include "rbee/core/device.h"
#include "rbee/core/error.h"

namespace rbee::formats {

uint64_t required_address_alignment(DType dtype) {
  if (!is_quantized(dtype)) return (uint64_t)dtype_type_size(dtype);
  return dtype == DType::Q8_K ? 4 : 2;
}

std::span<const uint8_t> data_section_bytes(std::span<const uint8_t> file, uint64_t data_offset, uint64_t offset,
                                            uint64_t size, std::string_view format, std::string_view path,
                                            std::string_view name) {
  const uint64_t data_size = file.size() - std::min<uint64_t>(data_offset, file.size());
  RBEE_CHECK(offset <= data_size && size <= data_size - offset,
             "{} {}: tensor '{}' [{}, +{}) is not inside this file's data section", format, path, name, offset, size);
  return file.subspan(data_offset + offset, size);
}

Tensor view_mapped_tensor(std::span<const uint8_t> bytes, const Shape& shape, DType dtype, Device& device,
                          std::shared_ptr<const void> keepalive, std::string_view source, uint64_t file_offset,
                          std::string_view name) {
  RBEE_CHECK(device.host_accessible(), "{}: tensor '{}': a mapped tensor needs a host device, not {}", source, name,
             device.id());
  RBEE_ASSERT((int64_t)bytes.size() == dtype_row_bytes(dtype, shape.numel()), "tensor '{}' has {} bytes for {} {}",
              name, bytes.size(), shape.to_string(), dtype_name(dtype));
  const uint64_t need = required_address_alignment(dtype);
  const auto address = reinterpret_cast<uintptr_t>(bytes.data());
  RBEE_CHECK_CODE(bytes.empty() || address % need == 0, ErrorCode::Io,
                  "{}: byte {}: tensor '{}': {} data is not aligned to {} bytes in memory", source, file_offset, name,
                  dtype_name(dtype), need);
  // The const_cast only satisfies Tensor::wrap: the mapping is read-only and tensors of it must not be written.
  return Tensor::wrap(const_cast<uint8_t*>(bytes.data()), shape, dtype, device, std::move(keepalive));
}

}  // namespace rbee::formats
