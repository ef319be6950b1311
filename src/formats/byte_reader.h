// ByteReader: bounds-checked little-endian reads from a byte span, for parsing untrusted model files.
//
// Every read checks the remaining length first. Failures throw Error(Io) with the message
// "<source>: byte <offset>: <context>: <reason>", where the context (set by the parser as it goes: "key
// 'general.name'", "tensor 'output.weight'") says which part of the file was being read.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "rbee/core/error.h"

namespace rbee::formats {

static_assert(std::endian::native == std::endian::little, "the model readers assume a little-endian host");

class ByteReader {
 public:
  // `source` names the file in error messages.
  ByteReader(std::span<const uint8_t> bytes, std::string source) : bytes_(bytes), source_(std::move(source)) {}

  uint64_t offset() const { return pos_; }
  uint64_t size() const { return bytes_.size(); }
  uint64_t remaining() const { return bytes_.size() - pos_; }
  const std::string& source() const { return source_; }
  void set_context(std::string context) { context_ = std::move(context); }
  const std::string& context() const { return context_; }

  // Throws Error(Io) for the byte at `offset`.
  [[noreturn]] void fail(uint64_t offset, std::string_view reason) const {
    if (context_.empty()) RBEE_THROW(ErrorCode::Io, "{}: byte {}: {}", source_, offset, reason);
    RBEE_THROW(ErrorCode::Io, "{}: byte {}: {}: {}", source_, offset, context_, reason);
  }

  // Throws if fewer than `n` bytes remain; `what` says what the bytes were for.
  void require(uint64_t n, std::string_view what) const {
    if (n > remaining())
      fail(pos_, fmt::format("truncated: {} needs {} bytes but only {} remain in the file", what, n, remaining()));
  }

  template <class T>
  T read(std::string_view what) {
    static_assert(std::is_trivially_copyable_v<T>);
    require(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // The next `n` bytes as a view into the underlying span.
  std::span<const uint8_t> read_bytes(uint64_t n, std::string_view what) {
    require(n, what);
    auto out = bytes_.subspan(pos_, n);
    pos_ += n;
    return out;
  }

 private:
  std::span<const uint8_t> bytes_;
  std::string source_;
  std::string context_;
  uint64_t pos_ = 0;
};

}  // namespace rbee::formats
