// Dims: a small fixed-capacity list of int64 used for shapes and strides (rank <= kMaxRank).
// Strides are in elements, not bytes. Broadcasting follows NumPy: align right, 1 stretches.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace rbee {

inline constexpr int kMaxRank = 8;

class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<int64_t> values);
  explicit Dims(std::span<const int64_t> values);
  static Dims filled(int rank, int64_t value);

  int rank() const { return rank_; }
  bool empty() const { return rank_ == 0; }
  int64_t operator[](int i) const { return v_[i]; }
  int64_t& operator[](int i) { return v_[i]; }
  // Python-style index: -1 is the last dimension. Throws InvalidArgument when out of range.
  int64_t at(int i) const { return v_[normalize_axis(i)]; }
  int normalize_axis(int axis) const;

  const int64_t* begin() const { return v_; }
  const int64_t* end() const { return v_ + rank_; }
  int64_t* begin() { return v_; }
  int64_t* end() { return v_ + rank_; }
  std::span<const int64_t> span() const { return {v_, (size_t)rank_}; }
  std::vector<int64_t> to_vector() const { return {begin(), end()}; }

  void push_back(int64_t value);
  void insert(int pos, int64_t value);
  void erase(int pos);

  // Product of all dims (1 for rank 0).
  int64_t numel() const;
  // Row-major strides of a contiguous tensor of this shape.
  Dims contiguous_strides() const;
  std::string to_string() const;  // "[2, 3, 4]"

  friend bool operator==(const Dims& a, const Dims& b);
  friend bool operator!=(const Dims& a, const Dims& b) { return !(a == b); }

 private:
  int64_t v_[kMaxRank] = {};
  int rank_ = 0;
};

using Shape = Dims;
using Strides = Dims;

// NumPy broadcasting of two shapes; throws InvalidArgument naming both shapes when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace rbee
