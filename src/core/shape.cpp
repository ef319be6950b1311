#include "rbee/core/shape.h"

#include <algorithm>

#include "rbee/core/error.h"

namespace rbee {

Dims::Dims(std::initializer_list<int64_t> values) : Dims(std::span<const int64_t>(values.begin(), values.size())) {}

Dims::Dims(std::span<const int64_t> values) {
  RBEE_CHECK(values.size() <= (size_t)kMaxRank, "rank {} exceeds the maximum of {}", values.size(), kMaxRank);
  rank_ = (int)values.size();
  std::copy(values.begin(), values.end(), v_);
}

Dims Dims::filled(int rank, int64_t value) {
  RBEE_CHECK(rank >= 0 && rank <= kMaxRank, "rank {} out of range", rank);
  Dims d;
  d.rank_ = rank;
  std::fill(d.v_, d.v_ + rank, value);
  return d;
}

int Dims::normalize_axis(int axis) const {
  const int a = axis < 0 ? axis + rank_ : axis;
  RBEE_CHECK(a >= 0 && a < rank_, "axis {} is out of range for rank {}", axis, rank_);
  return a;
}

void Dims::push_back(int64_t value) {
  RBEE_CHECK(rank_ < kMaxRank, "rank would exceed the maximum of {}", kMaxRank);
  v_[rank_++] = value;
}

void Dims::insert(int pos, int64_t value) {
  RBEE_CHECK(rank_ < kMaxRank, "rank would exceed the maximum of {}", kMaxRank);
  RBEE_CHECK(pos >= 0 && pos <= rank_, "insert position {} out of range for rank {}", pos, rank_);
  for (int i = rank_; i > pos; --i) v_[i] = v_[i - 1];
  v_[pos] = value;
  ++rank_;
}

void Dims::erase(int pos) {
  RBEE_CHECK(pos >= 0 && pos < rank_, "erase position {} out of range for rank {}", pos, rank_);
  for (int i = pos; i + 1 < rank_; ++i) v_[i] = v_[i + 1];
  --rank_;
}

int64_t Dims::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= v_[i];
  return n;
}

Dims Dims::contiguous_strides() const {
  Dims s = Dims::filled(rank_, 1);
  int64_t acc = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    s.v_[i] = acc;
    acc *= std::max<int64_t>(v_[i], 1);
  }
  return s;
}

std::string Dims::to_string() const {
  std::string out = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) out += ", ";
    out += std::to_string(v_[i]);
  }
  return out + "]";
}

bool operator==(const Dims& a, const Dims& b) {
  if (a.rank_ != b.rank_) return false;
  for (int i = 0; i < a.rank_; ++i) {
    if (a.v_[i] != b.v_[i]) return false;
  }
  return true;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  Shape out = Shape::filled(rank, 1);
  for (int i = 0; i < rank; ++i) {
    const int ia = a.rank() - rank + i, ib = b.rank() - rank + i;
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    RBEE_CHECK(da == db || da == 1 || db == 1, "shapes {} and {} cannot be broadcast together (dimension {}: {} vs {})",
               a.to_string(), b.to_string(), i, da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace rbee
