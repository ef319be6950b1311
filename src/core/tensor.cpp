#include "rbee/core/tensor.h"

#include <algorithm>
#include <vector>

#include "rbee/core/device.h"

namespace rbee {

Device& Tensor::device() const {
  RBEE_CHECK(defined(), "use of an undefined tensor");
  return buffer_->device();
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device& device) {
  return empty_exact_or_cached(shape, dtype, device, false);
}

Tensor Tensor::empty_exact(const Shape& shape, DType dtype, Device& device) {
  return empty_exact_or_cached(shape, dtype, device, true);
}

Tensor Tensor::empty_exact_or_cached(const Shape& shape, DType dtype, Device& device, bool exact) {
  for (int64_t d : shape) RBEE_CHECK(d >= 0, "negative dimension in shape {}", shape.to_string());
  if (is_quantized(dtype)) {
    RBEE_CHECK(shape.rank() >= 1, "a {} tensor needs at least one dimension", dtype_name(dtype));
  }
  Tensor t;
  t.shape_ = shape;
  t.strides_ = shape.contiguous_strides();
  t.dtype_ = dtype;
  const int64_t bytes = is_quantized(dtype) ? dtype_row_bytes(dtype, shape[shape.rank() - 1]) *
                                                  (shape.numel() / std::max<int64_t>(shape[shape.rank() - 1], 1))
                                            : shape.numel() * dtype_type_size(dtype);
  const size_t n = (size_t)std::max<int64_t>(bytes, 1);
  t.buffer_ = exact ? device.allocate_exact(n) : device.allocate(n);
  return t;
}

Tensor Tensor::from_host(const void* data, size_t bytes, const Shape& shape, DType dtype, Device& device) {
  Tensor t = empty(shape, dtype, device);
  RBEE_CHECK((int64_t)bytes == t.nbytes(), "{} host bytes given for a {} {} tensor of {} bytes", bytes,
             dtype_name(dtype), shape.to_string(), t.nbytes());
  if (bytes) device.copy_from_host(t.data(), data, bytes);
  return t;
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, Device& device,
                    std::shared_ptr<const void> keepalive) {
  Tensor t;
  t.shape_ = shape;
  t.strides_ = shape.contiguous_strides();
  t.dtype_ = dtype;
  t.is_view_ = true;
  t.buffer_ = std::make_shared<Buffer>(device, data, (size_t)t.nbytes(), std::move(keepalive));
  return t;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::data() const {
  RBEE_CHECK(defined(), "use of an undefined tensor");
  const DTypeInfo& info = dtype_info(dtype_);
  const int64_t byte_offset = offset_ / info.block_size * info.type_size;
  return static_cast<char*>(buffer_->data()) + byte_offset;
}

void Tensor::check_quantized_view(const Strides& strides, int64_t offset, const Shape& shape) const {
  if (!is_quantized(dtype_)) return;
  const int bs = dtype_block_size(dtype_);
  const int r = shape.rank();
  RBEE_CHECK(r >= 1 && (shape[r - 1] <= 1 || strides[r - 1] == 1),
             "a view of a {} tensor must keep its last dimension contiguous", dtype_name(dtype_));
  RBEE_CHECK(offset % bs == 0 && shape[r - 1] % bs == 0,
             "a view of a {} tensor must cut whole {}-element blocks", dtype_name(dtype_), bs);
  for (int i = 0; i + 1 < r; ++i) {
    RBEE_CHECK(strides[i] % bs == 0, "a view of a {} tensor must keep whole rows", dtype_name(dtype_));
  }
}

Tensor Tensor::make_view(const Shape& shape, const Strides& strides, int64_t offset) const {
  RBEE_CHECK(defined(), "view of an undefined tensor");
  check_quantized_view(strides, offset, shape);
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = strides;
  t.offset_ = offset;
  t.is_view_ = true;
  return t;
}

Tensor Tensor::view(const Shape& requested) const {
  RBEE_CHECK(is_contiguous(), "view {} of a non-contiguous tensor {}; use reshape or contiguous()",
             requested.to_string(), to_string());
  Shape shape = requested;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < shape.rank(); ++i) {
    if (shape[i] == -1) {
      RBEE_CHECK(infer < 0, "only one dimension may be -1 in {}", requested.to_string());
      infer = i;
    } else {
      RBEE_CHECK(shape[i] >= 0, "negative dimension in {}", requested.to_string());
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    RBEE_CHECK(known > 0 && numel() % known == 0, "cannot infer -1 in {} for {} elements", requested.to_string(),
               numel());
    shape[infer] = numel() / known;
  }
  RBEE_CHECK(shape.numel() == numel(), "cannot view {} elements of shape {} as {}", numel(), shape_.to_string(),
             shape.to_string());
  return make_view(shape, shape.contiguous_strides(), offset_);
}

Tensor Tensor::reshape(const Shape& shape) const { return is_contiguous() ? view(shape) : contiguous().view(shape); }

Tensor Tensor::transpose(int axis0, int axis1) const {
  const int a = shape_.normalize_axis(axis0), b = shape_.normalize_axis(axis1);
  Shape shape = shape_;
  Strides strides = strides_;
  std::swap(shape[a], shape[b]);
  std::swap(strides[a], strides[b]);
  return make_view(shape, strides, offset_);
}

Tensor Tensor::permute(std::span<const int> axes) const {
  RBEE_CHECK((int)axes.size() == rank(), "permute needs {} axes, got {}", rank(), axes.size());
  std::vector<bool> seen(rank(), false);
  Shape shape = shape_;
  Strides strides = strides_;
  for (int i = 0; i < rank(); ++i) {
    const int a = shape_.normalize_axis(axes[i]);
    RBEE_CHECK(!seen[a], "permute repeats axis {}", a);
    seen[a] = true;
    shape[i] = shape_[a];
    strides[i] = strides_[a];
  }
  return make_view(shape, strides, offset_);
}

Tensor Tensor::narrow(int axis, int64_t start, int64_t length) const {
  const int a = shape_.normalize_axis(axis);
  RBEE_CHECK(start >= 0 && length >= 0 && start + length <= shape_[a],
             "narrow({}, {}, {}) is out of range for dimension of size {}", axis, start, length, shape_[a]);
  Shape shape = shape_;
  shape[a] = length;
  return make_view(shape, strides_, offset_ + start * strides_[a]);
}

Tensor Tensor::slice(int axis, int64_t start, int64_t end, int64_t step) const {
  const int a = shape_.normalize_axis(axis);
  RBEE_CHECK(step >= 1, "slice step must be positive, got {}", step);
  const int64_t n = shape_[a];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape shape = shape_;
  Strides strides = strides_;
  shape[a] = (end - start + step - 1) / step;
  strides[a] = strides_[a] * step;
  return make_view(shape, strides, offset_ + start * strides_[a]);
}

Tensor Tensor::select(int axis, int64_t index) const {
  const int a = shape_.normalize_axis(axis);
  RBEE_CHECK(index >= -shape_[a] && index < shape_[a], "index {} is out of range for dimension {} of size {}", index,
             a, shape_[a]);
  if (index < 0) index += shape_[a];
  Shape shape = shape_;
  Strides strides = strides_;
  shape.erase(a);
  strides.erase(a);
  return make_view(shape, strides, offset_ + index * strides_[a]);
}

Tensor Tensor::unsqueeze(int axis) const {
  const int a = axis < 0 ? axis + rank() + 1 : axis;
  RBEE_CHECK(a >= 0 && a <= rank(), "unsqueeze axis {} out of range for rank {}", axis, rank());
  Shape shape = shape_;
  Strides strides = strides_;
  const int64_t stride = a < rank() ? strides_[a] * shape_[a] : 1;
  shape.insert(a, 1);
  strides.insert(a, stride);
  return make_view(shape, strides, offset_);
}

Tensor Tensor::squeeze(int axis) const {
  const int a = shape_.normalize_axis(axis);
  RBEE_CHECK(shape_[a] == 1, "cannot squeeze dimension {} of size {}", a, shape_[a]);
  Shape shape = shape_;
  Strides strides = strides_;
  shape.erase(a);
  strides.erase(a);
  return make_view(shape, strides, offset_);
}

Tensor Tensor::expand(const Shape& target) const {
  RBEE_CHECK(target.rank() >= rank(), "cannot expand {} to the lower rank {}", shape_.to_string(),
             target.to_string());
  Strides strides = Strides::filled(target.rank(), 0);
  const int lead = target.rank() - rank();
  for (int i = 0; i < rank(); ++i) {
    const int64_t want = target[lead + i];
    if (shape_[i] == want) {
      strides[lead + i] = strides_[i];
    } else {
      RBEE_CHECK(shape_[i] == 1, "cannot expand {} to {}: dimension {} is {} not 1", shape_.to_string(),
                 target.to_string(), i, shape_[i]);
    }
  }
  return make_view(target, strides, offset_);
}

Tensor Tensor::as_strided(const Shape& shape, const Strides& strides, int64_t offset) const {
  RBEE_CHECK(shape.rank() == strides.rank(), "as_strided: shape {} and strides {} differ in rank", shape.to_string(),
             strides.to_string());
  // The view must stay inside the buffer.
  int64_t lo = offset, hi = offset;
  for (int i = 0; i < shape.rank(); ++i) {
    if (shape[i] == 0) return make_view(shape, strides, offset);
    const int64_t span = (shape[i] - 1) * strides[i];
    (span < 0 ? lo : hi) += span;
  }
  const int64_t capacity_elems =
      (int64_t)buffer_->size() / dtype_type_size(dtype_) * dtype_block_size(dtype_);
  RBEE_CHECK(lo >= 0 && hi < capacity_elems, "as_strided view reaches outside its buffer ({} elements)",
             capacity_elems);
  return make_view(shape, strides, offset);
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape_, dtype_, device());
  device().copy_elements(*this, out);
  return out;
}

Tensor Tensor::to(Device& target) const {
  Device& source = device();
  if (&source == &target) return *this;
  const Tensor src = contiguous();
  Tensor out = empty(shape_, dtype_, target);
  const size_t bytes = (size_t)src.nbytes();
  if (bytes == 0) return out;
  if (source.host_accessible()) {
    target.copy_from_host(out.data(), src.data(), bytes);
  } else if (target.host_accessible()) {
    source.copy_to_host(out.data(), src.data(), bytes);
  } else {
    std::vector<char> staging(bytes);
    source.copy_to_host(staging.data(), src.data(), bytes);
    target.copy_from_host(out.data(), staging.data(), bytes);
  }
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  RBEE_CHECK(!is_quantized(dtype) && !is_quantized(dtype_),
             "to({}) from {}: use quantize/dequantize for block types", dtype_name(dtype), dtype_name(dtype_));
  Tensor out = empty(shape_, dtype, device());
  device().copy_elements(*this, out);
  return out;
}

void Tensor::copy_to_host(void* dst, size_t bytes) const {
  RBEE_CHECK((int64_t)bytes == nbytes(), "copy_to_host of {} into {} bytes (needs {})", to_string(), bytes,
             nbytes());
  if (bytes == 0) return;
  const Tensor src = contiguous();
  src.device().copy_to_host(dst, src.data(), bytes);
}

void Tensor::copy_from(const Tensor& src) const {
  RBEE_CHECK(src.shape() == shape_ && src.dtype() == dtype_, "copy_from: {} into {}", src.to_string(), to_string());
  Tensor dst = *this;
  const Tensor local = src.to(device());
  device().copy_elements(local, dst);
}

std::string Tensor::to_string() const {
  if (!defined()) return "Tensor(undefined)";
  return fmt::format("Tensor({} {} on {}, strides {}{})", dtype_name(dtype_), shape_.to_string(), device().id(),
                     strides_.to_string(), offset_ ? fmt::format(", offset {}", offset_) : "");
}

}  // namespace rbee
