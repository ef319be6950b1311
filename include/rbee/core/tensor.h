// Tensor: a shape, strides (in elements), a dtype and a shared Buffer on one device.
//
// A tensor either owns its memory (made by empty/from_host/an op) or is a view of another tensor's memory
// (reshape of a contiguous tensor, transpose, narrow, slice, expand, wrap of external memory): is_view()
// tells which. Views never copy. Quantized tensors are row-major; views of them may only cut whole rows or
// whole blocks along the last dimension.
//
// Element data lives where the device keeps it: for a GPU tensor, data() is a device address. Use
// to(device), copy_to_host() or to_vector<T>() to read it from the CPU.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rbee/core/buffer.h"
#include "rbee/core/dtype.h"
#include "rbee/core/error.h"
#include "rbee/core/shape.h"

namespace rbee {

class Device;

class Tensor {
 public:
  Tensor() = default;

  // Uninitialized contiguous tensor.
  static Tensor empty(const Shape& shape, DType dtype, Device& device);
  // Same, in memory of exactly its size that goes back to the device (not its cache) when freed
  // (Device::allocate_exact): for long-lived tensors such as weights and the KV cache.
  static Tensor empty_exact(const Shape& shape, DType dtype, Device& device);
  // Contiguous tensor holding a copy of `bytes` host bytes (must equal the tensor's size in bytes).
  static Tensor from_host(const void* data, size_t bytes, const Shape& shape, DType dtype, Device& device);
  template <class T>
  static Tensor from_vector(std::span<const T> values, const Shape& shape, Device& device) {
    return from_host(values.data(), values.size_bytes(), shape, dtype_v<T>, device);
  }
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device& device) {
    return from_vector(std::span<const T>(values), shape, device);
  }
  // A view of memory owned elsewhere (an mmap'd file, a caller's array). `keepalive` keeps it alive.
  static Tensor wrap(void* data, const Shape& shape, DType dtype, Device& device,
                     std::shared_ptr<const void> keepalive);

  bool defined() const { return buffer_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  DType dtype() const { return dtype_; }
  int rank() const { return shape_.rank(); }
  int64_t numel() const { return shape_.numel(); }
  int64_t dim(int axis) const { return shape_.at(axis); }
  int64_t stride(int axis) const { return strides_.at(axis); }
  Device& device() const;
  bool is_view() const { return is_view_; }
  bool is_contiguous() const;
  // Offset of element 0 from the buffer start, in elements.
  int64_t offset() const { return offset_; }
  // Address of element 0 (a device address for device tensors).
  void* data() const;
  template <class T>
  T* data_ptr() const {
    RBEE_CHECK(dtype_ == dtype_v<T>, "tensor holds {}, not {}", dtype_name(dtype_), dtype_name(dtype_v<T>));
    return static_cast<T*>(data());
  }
  // Bytes of a contiguous tensor with this shape and dtype.
  int64_t nbytes() const { return dtype_row_bytes(dtype_, numel()); }
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }

  // ---- views (no copy) ----
  // Same elements, new shape; one dimension may be -1. A view when contiguous, else a contiguous copy.
  Tensor reshape(const Shape& shape) const;
  // Like reshape but never copies: throws InvalidArgument when the tensor is not contiguous.
  Tensor view(const Shape& shape) const;
  Tensor transpose(int axis0, int axis1) const;
  Tensor permute(std::span<const int> axes) const;
  Tensor permute(std::initializer_list<int> axes) const { return permute(std::span<const int>(axes)); }
  Tensor narrow(int axis, int64_t start, int64_t length) const;
  Tensor slice(int axis, int64_t start, int64_t end, int64_t step = 1) const;
  // Picks one index along `axis` and drops that axis.
  Tensor select(int axis, int64_t index) const;
  Tensor unsqueeze(int axis) const;
  Tensor squeeze(int axis) const;
  // Broadcast view to `shape` (size-1 dims stretch with stride 0; new leading dims are added).
  Tensor expand(const Shape& shape) const;
  Tensor as_strided(const Shape& shape, const Strides& strides, int64_t offset) const;

  // ---- copies ----
  Tensor contiguous() const;  // *this when already contiguous
  Tensor clone() const;       // always a new contiguous tensor
  Tensor to(Device& device) const;  // *this when already there
  Tensor to(DType dtype) const;     // cast; *this when already that dtype
  // Copies all elements, in row-major order, into `bytes` bytes of host memory.
  void copy_to_host(void* dst, size_t bytes) const;
  template <class T>
  std::vector<T> to_vector() const {
    RBEE_CHECK(dtype_ == dtype_v<T>, "tensor holds {}, not {}", dtype_name(dtype_), dtype_name(dtype_v<T>));
    std::vector<T> out((size_t)numel());
    copy_to_host(out.data(), out.size() * sizeof(T));
    return out;
  }
  // Writes src's elements into this tensor (same shape and dtype; any devices, any strides).
  void copy_from(const Tensor& src) const;

  // "Tensor(f32 [2, 3] on cpu:0, strides [3, 1])"
  std::string to_string() const;

 private:
  static Tensor empty_exact_or_cached(const Shape& shape, DType dtype, Device& device, bool exact);
  Tensor make_view(const Shape& shape, const Strides& strides, int64_t offset) const;
  void check_quantized_view(const Strides& strides, int64_t offset, const Shape& shape) const;

  std::shared_ptr<Buffer> buffer_;
  Shape shape_;
  Strides strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::F32;
  bool is_view_ = false;
};

}  // namespace rbee
