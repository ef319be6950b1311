#include "rbee/formats/gguf_writer.h"

#include <cstdio>
#include <cstring>
#include <memory>

#include "rbee/core/error.h"

namespace rbee::gguf {

namespace {

// GGUF value type ids.
enum : uint32_t { kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9, kU64 = 10 };

class FileOut {
 public:
  explicit FileOut(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "wb")) {
    RBEE_CHECK_CODE(f_ != nullptr, ErrorCode::Io, "cannot create '{}': {}", path, std::strerror(errno));
  }
  ~FileOut() {
    if (f_) std::fclose(f_);
  }
  void bytes(const void* p, size_t n) {
    RBEE_CHECK_CODE(std::fwrite(p, 1, n, f_) == n, ErrorCode::Io, "writing '{}' failed: {}", path_,
                    std::strerror(errno));
    offset_ += n;
  }
  template <class T> void pod(T v) { bytes(&v, sizeof(T)); }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void pad_to(uint64_t alignment) {
    static const char zeros[64] = {};
    while (offset_ % alignment) bytes(zeros, std::min<uint64_t>(alignment - offset_ % alignment, sizeof(zeros)));
  }
  void close() {
    RBEE_CHECK_CODE(std::fclose(f_) == 0, ErrorCode::Io, "closing '{}' failed: {}", path_, std::strerror(errno));
    f_ = nullptr;
  }
  uint64_t offset() const { return offset_; }

  // Any metadata value, recursively, in its own GGUF type.
  void value(const Value& v) {
    pod<uint32_t>((uint32_t)v.type());
    value_body(v);
  }
  void value_body(const Value& v) {
    switch (v.type()) {
      case ValueType::U8: pod<uint8_t>((uint8_t)v.as_uint()); break;
      case ValueType::I8: pod<int8_t>((int8_t)v.as_int()); break;
      case ValueType::U16: pod<uint16_t>((uint16_t)v.as_uint()); break;
      case ValueType::I16: pod<int16_t>((int16_t)v.as_int()); break;
      case ValueType::U32: pod<uint32_t>((uint32_t)v.as_uint()); break;
      case ValueType::I32: pod<int32_t>((int32_t)v.as_int()); break;
      case ValueType::U64: pod<uint64_t>(v.as_uint()); break;
      case ValueType::I64: pod<int64_t>(v.as_int()); break;
      case ValueType::F32: pod<float>((float)v.as_float()); break;
      case ValueType::F64: pod<double>(v.as_float()); break;
      case ValueType::Bool: pod<uint8_t>(v.as_bool() ? 1 : 0); break;
      case ValueType::String: str(v.as_string()); break;
      case ValueType::Array: {
        pod<uint32_t>((uint32_t)v.array_type());
        const std::vector<Value> items = v.as_array();
        pod<uint64_t>(items.size());
        for (const auto& item : items) value_body(item);
        break;
      }
    }
  }

 private:
  std::string path_;
  std::FILE* f_;
  uint64_t offset_ = 0;
};

}  // namespace

Writer::Writer(uint32_t alignment) : alignment_(alignment) {
  RBEE_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "gguf alignment {} is not a power of two",
             alignment);
  if (alignment != 32) add_u32("general.alignment", alignment);
}

void Writer::add_u32(const std::string& key, uint32_t v) { metadata_.push_back({key, v}); }
void Writer::add_i32(const std::string& key, int32_t v) { metadata_.push_back({key, v}); }
void Writer::add_u64(const std::string& key, uint64_t v) { metadata_.push_back({key, v}); }
void Writer::add_f32(const std::string& key, float v) { metadata_.push_back({key, v}); }
void Writer::add_bool(const std::string& key, bool v) { metadata_.push_back({key, v}); }
void Writer::add_string(const std::string& key, const std::string& v) { metadata_.push_back({key, v}); }
void Writer::add_strings(const std::string& key, std::vector<std::string> v) {
  metadata_.push_back({key, std::move(v)});
}
void Writer::add_i32s(const std::string& key, std::vector<int32_t> v) { metadata_.push_back({key, std::move(v)}); }
void Writer::add_f32s(const std::string& key, std::vector<float> v) { metadata_.push_back({key, std::move(v)}); }
void Writer::add_value(const std::string& key, const Value& v) { metadata_.push_back({key, v}); }

void Writer::add_tensor(const std::string& name, const Shape& shape, DType dtype, Producer produce) {
  RBEE_CHECK(dtype_info(dtype).ggml_type >= 0, "gguf: {} has no GGUF type", dtype_name(dtype));
  RBEE_CHECK(shape.rank() >= 1, "gguf: tensor {} needs at least one dimension", name);
  const int64_t row = shape[shape.rank() - 1];
  const uint64_t bytes = (uint64_t)dtype_row_bytes(dtype, row) * (uint64_t)(shape.numel() / std::max<int64_t>(row, 1));
  tensors_.push_back({name, shape, dtype, bytes, std::move(produce)});
}

void Writer::write(const std::string& path, const std::function<void(float)>& progress) const {
  FileOut out(path);
  out.bytes("GGUF", 4);
  out.pod<uint32_t>(3);
  out.pod<uint64_t>(tensors_.size());
  out.pod<uint64_t>(metadata_.size());
  for (const auto& kv : metadata_) {
    out.str(kv.key);
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, uint32_t>) { out.pod<uint32_t>(kU32); out.pod(v); }
          else if constexpr (std::is_same_v<V, int32_t>) { out.pod<uint32_t>(kI32); out.pod(v); }
          else if constexpr (std::is_same_v<V, uint64_t>) { out.pod<uint32_t>(kU64); out.pod(v); }
          else if constexpr (std::is_same_v<V, float>) { out.pod<uint32_t>(kF32); out.pod(v); }
          else if constexpr (std::is_same_v<V, bool>) { out.pod<uint32_t>(kBool); out.pod<uint8_t>(v ? 1 : 0); }
          else if constexpr (std::is_same_v<V, std::string>) { out.pod<uint32_t>(kString); out.str(v); }
          else if constexpr (std::is_same_v<V, Value>) { out.value(v); }
          else {
            out.pod<uint32_t>(kArray);
            using E = typename V::value_type;
            out.pod<uint32_t>(std::is_same_v<E, std::string> ? kString : std::is_same_v<E, int32_t> ? kI32 : kF32);
            out.pod<uint64_t>(v.size());
            for (const auto& e : v) {
              if constexpr (std::is_same_v<E, std::string>) out.str(e);
              else out.pod(e);
            }
          }
        },
        kv.value);
  }
  uint64_t data_offset = 0;
  for (const auto& t : tensors_) {
    out.str(t.name);
    out.pod<uint32_t>((uint32_t)t.shape.rank());
    for (int d = t.shape.rank() - 1; d >= 0; --d) out.pod<uint64_t>((uint64_t)t.shape[d]);
    out.pod<uint32_t>((uint32_t)dtype_info(t.dtype).ggml_type);
    out.pod<uint64_t>(data_offset);
    data_offset += (t.bytes + alignment_ - 1) / alignment_ * alignment_;
  }
  out.pad_to(alignment_);
  std::vector<uint8_t> buffer;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    buffer.assign(t.bytes, 0);
    RBEE_WITH_CONTEXT(fmt::format("producing tensor {}", t.name), t.produce(std::span<uint8_t>(buffer)));
    out.bytes(buffer.data(), buffer.size());
    out.pad_to(alignment_);
    if (progress) progress((float)(i + 1) / (float)tensors_.size());
  }
  out.close();
}

}  // namespace rbee::gguf
