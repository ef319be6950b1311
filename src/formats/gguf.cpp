// GGUF reader: parses the header, metadata and tensor infos of a mapped file and checks them against the file
// before anything is trusted (see include/rbee/formats/gguf.h for the layout and the error contract).
#include "rbee/formats/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <new>
#include <map>
#include <numeric>

#include "formats/byte_reader.h"
#include "formats/mapped_tensor.h"
#include "formats/mmap_file.h"
#include "rbee/core/error.h"

namespace rbee::gguf {

struct File::Impl {
  std::shared_ptr<const formats::MappedFile> mapping;  // null for File::parse
  std::span<const uint8_t> bytes;
  std::string path;
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;
  std::vector<std::pair<std::string, Value>> metadata;
  std::map<std::string, size_t, std::less<>> key_index;
  std::vector<TensorInfo> tensors;
  std::map<std::string, size_t, std::less<>> tensor_index;
};

namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;
// Smallest encodings, used to refuse counts the remaining bytes cannot possibly hold before allocating.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;          // empty key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // empty name, n_dims = 0, type, offset
constexpr uint64_t kReserveLimit = 4096;  // most entries reserved up front from a count read from the file

// Names of the ggml tensor types, for messages about the ones we refuse.
const char* ggml_type_name(uint32_t t) {
  static constexpr const char* kNames[] = {
      "f32",      "f16",      "q4_0",       "q4_1",       "q4_2 (removed)", "q4_3 (removed)", "q5_0",    "q5_1",
      "q8_0",     "q8_1",     "q2_k",       "q3_k",       "q4_k",           "q5_k",           "q6_k",    "q8_k",
      "iq2_xxs",  "iq2_xs",   "iq3_xxs",    "iq1_s",      "iq4_nl",         "iq3_s",          "iq2_s",   "iq4_xs",
      "i8",       "i16",      "i32",        "i64",        "f64",            "iq1_m",          "bf16",    "q4_0_4_4",
      "q4_0_4_8", "q4_0_8_8", "tq1_0",      "tq2_0",      "iq4_nl_4_4",     "iq4_nl_4_8",     "iq4_nl_8_8", "mxfp4",
      "nvfp4",    "q1_0",
  };
  return t < std::size(kNames) ? kNames[t] : "unknown";
}

// Bytes a value of a fixed-size type takes; 0 for String and Array.
uint64_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::Bool: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    default: return 0;
  }
}

bool valid_value_type(uint32_t t) { return t <= (uint32_t)ValueType::F64; }

}  // namespace

// Reads one file front to back. Friend of Value so it can fill values in place.
class Parser {
 public:
  Parser(std::span<const uint8_t> bytes, std::string source) : r_(bytes, std::move(source)) {}

  void parse(File::Impl& out) {
    read_header(out);
    read_metadata(out);
    read_alignment(out);
    read_tensor_infos(out);
    place_data(out);
  }

  // Parses impl.bytes into impl. Every count is checked against the bytes present, but a huge file can still
  // hold more metadata than memory takes (array elements are stored widened): that is an OutOfMemory error,
  // not a crash.
  static void parse_checked(File::Impl& impl) {
    try {
      Parser(impl.bytes, impl.path).parse(impl);
    } catch (const std::bad_alloc&) {
      RBEE_THROW(ErrorCode::OutOfMemory, "{}: not enough memory for the metadata of this {}-byte file", impl.path,
                 impl.bytes.size());
    }
  }

 private:
  struct TensorSite {
    uint64_t info_offset;    // where the tensor info starts
    uint64_t offset_field;   // where its data offset field is
  };

  void read_header(File::Impl& out) {
    r_.set_context("header");
    auto magic = r_.read_bytes(4, "magic");
    if (std::memcmp(magic.data(), "GGUF", 4) != 0) {
      if (std::memcmp(magic.data(), "FUGG", 4) == 0) r_.fail(0, "big-endian GGUF files are not supported");
      r_.fail(0, fmt::format("not a GGUF file: magic is {:02x} {:02x} {:02x} {:02x}, expected 47 47 55 46 (\"GGUF\")",
                             magic[0], magic[1], magic[2], magic[3]));
    }
    const uint64_t version_at = r_.offset();
    const uint32_t version = r_.read<uint32_t>("version");
    if (version == 1) r_.fail(version_at, "GGUF version 1 is not supported (only versions 2 and 3)");
    if (version != 2 && version != 3) {
      const uint32_t swapped = __builtin_bswap32(version);
      if (swapped >= 1 && swapped <= 3)
        r_.fail(version_at, fmt::format("big-endian GGUF files are not supported (version reads as {} swapped)",
                                        swapped));
      r_.fail(version_at, fmt::format("unsupported GGUF version {} (only versions 2 and 3)", version));
    }
    out.version = version;
    tensors_at_ = r_.offset();
    tensor_count_ = r_.read<uint64_t>("tensor count");
    kv_at_ = r_.offset();
    kv_count_ = r_.read<uint64_t>("metadata count");
    if (kv_count_ > r_.remaining() / kMinKvBytes)
      r_.fail(kv_at_, fmt::format("metadata count {} is impossible: only {} bytes remain", kv_count_, r_.remaining()));
    if (tensor_count_ > r_.remaining() / kMinTensorInfoBytes)
      r_.fail(tensors_at_,
              fmt::format("tensor count {} is impossible: only {} bytes remain", tensor_count_, r_.remaining()));
  }

  void read_metadata(File::Impl& out) {
    // Counts are only bounded by the file size here: reserve a little and let real entries grow the vectors.
    out.metadata.reserve(std::min<uint64_t>(kv_count_, kReserveLimit));
    kv_offsets_.reserve(std::min<uint64_t>(kv_count_, kReserveLimit));
    for (uint64_t i = 0; i < kv_count_; ++i) {
      const uint64_t kv_at = r_.offset();
      r_.set_context(fmt::format("metadata pair #{}", i));
      std::string key = read_string("key", kMaxKeyLength);
      r_.set_context(fmt::format("key '{}'", key));
      if (out.key_index.count(key)) r_.fail(kv_at, "duplicate metadata key");
      Value value;
      read_value(value, read_type("value type"), 0);
      out.key_index.emplace(key, out.metadata.size());
      out.metadata.emplace_back(std::move(key), std::move(value));
      kv_offsets_.push_back(kv_at);
    }
  }

  void read_alignment(File::Impl& out) {
    out.alignment = kDefaultAlignment;
    auto it = out.key_index.find("general.alignment");
    if (it == out.key_index.end()) return;
    r_.set_context("key 'general.alignment'");
    const uint64_t at = kv_offsets_[it->second];
    const Value& v = out.metadata[it->second].second;
    // The spec (and gguf-py's reader) fix the type to u32.
    if (v.type() != ValueType::U32)
      r_.fail(at, fmt::format("general.alignment must be u32, not {}", value_type_name(v.type())));
    const uint64_t a = v.as_uint();
    if (a == 0 || !std::has_single_bit(a) || a > kMaxAlignment)
      r_.fail(at, fmt::format("alignment {} is not a power of two between 1 and {}", a, kMaxAlignment));
    out.alignment = a;
  }

  void read_tensor_infos(File::Impl& out) {
    out.tensors.reserve(std::min<uint64_t>(tensor_count_, kReserveLimit));
    sites_.reserve(std::min<uint64_t>(tensor_count_, kReserveLimit));
    for (uint64_t i = 0; i < tensor_count_; ++i) {
      TensorSite site{r_.offset(), 0};
      r_.set_context(fmt::format("tensor info #{}", i));
      TensorInfo info;
      info.name = read_string("tensor name", kMaxKeyLength);
      r_.set_context(fmt::format("tensor '{}'", info.name));
      if (out.tensor_index.count(info.name)) r_.fail(site.info_offset, "duplicate tensor name");

      const uint64_t dims_at = r_.offset();
      const uint32_t n_dims = r_.read<uint32_t>("dimension count");
      if (n_dims > (uint32_t)kMaxDims)
        r_.fail(dims_at, fmt::format("{} dimensions; at most {} are allowed", n_dims, kMaxDims));
      uint64_t ne[kMaxDims] = {1, 1, 1, 1};  // innermost first, as stored
      // The product of the non-zero dims must fit in int64 even when another dim is 0: shape code multiplies
      // dims in any order.
      uint64_t nonzero_product = 1;
      bool any_zero = false;
      for (uint32_t d = 0; d < n_dims; ++d) {
        const uint64_t at = r_.offset();
        ne[d] = r_.read<uint64_t>("dimension");
        if (ne[d] > (uint64_t)std::numeric_limits<int64_t>::max())
          r_.fail(at, fmt::format("dimension {} is {}, larger than int64", d, ne[d]));
        if (ne[d] == 0) {
          any_zero = true;
          continue;
        }
        if (nonzero_product > (uint64_t)std::numeric_limits<int64_t>::max() / ne[d])
          r_.fail(at, fmt::format("element count overflows int64 at dimension {} ({})", d, ne[d]));
        nonzero_product *= ne[d];
      }
      const uint64_t numel = any_zero ? 0 : nonzero_product;
      const uint64_t type_at = r_.offset();
      const uint32_t ggml_type = r_.read<uint32_t>("ggml type");
      const std::optional<DType> dtype = dtype_from_ggml_type(ggml_type);
      if (!dtype)
        r_.fail(type_at, fmt::format("unsupported ggml type {} ({})", ggml_type, ggml_type_name(ggml_type)));
      info.dtype = *dtype;
      const DTypeInfo& dt = dtype_info(info.dtype);
      if (ne[0] % (uint64_t)dt.block_size != 0)
        r_.fail(type_at, fmt::format("row length {} is not a multiple of the {} block size {}", ne[0], dt.name,
                                     dt.block_size));
      const uint64_t blocks = numel / (uint64_t)dt.block_size;
      if (blocks > (uint64_t)std::numeric_limits<int64_t>::max() / (uint64_t)dt.type_size)
        r_.fail(type_at, fmt::format("byte size of {} {} elements overflows", numel, dt.name));
      info.bytes = blocks * (uint64_t)dt.type_size;

      site.offset_field = r_.offset();
      info.offset = r_.read<uint64_t>("data offset");
      if (info.offset % out.alignment != 0)
        r_.fail(site.offset_field,
                fmt::format("data offset {} is not a multiple of the alignment {}", info.offset, out.alignment));

      std::vector<int64_t> dims(n_dims);
      for (uint32_t d = 0; d < n_dims; ++d) dims[d] = (int64_t)ne[n_dims - 1 - d];  // row-major: outermost first
      info.shape = Shape(std::span<const int64_t>(dims));

      out.tensor_index.emplace(info.name, out.tensors.size());
      out.tensors.push_back(std::move(info));
      sites_.push_back(site);
    }
  }

  // Fixes the data section and checks that every tensor lies inside it without overlapping another.
  void place_data(File::Impl& out) {
    r_.set_context("data section");
    const uint64_t infos_end = r_.offset();
    const uint64_t pad = (out.alignment - infos_end % out.alignment) % out.alignment;
    out.data_offset = infos_end + pad;  // infos_end <= file size, so no overflow
    const uint64_t file_size = r_.size();
    if (out.data_offset > file_size && !out.tensors.empty())
      r_.fail(infos_end, fmt::format("data section would start at byte {} (alignment {}), past the end of the file "
                                     "({} bytes)", out.data_offset, out.alignment, file_size));
    const uint64_t data_size = file_size > out.data_offset ? file_size - out.data_offset : 0;

    for (size_t i = 0; i < out.tensors.size(); ++i) {
      const TensorInfo& t = out.tensors[i];
      if (t.offset > data_size || t.bytes > data_size - t.offset) {
        r_.set_context(fmt::format("tensor '{}'", t.name));
        r_.fail(sites_[i].offset_field,
                fmt::format("data [{}, {}+{}) runs past the end of the data section ({} bytes from byte {})", t.offset,
                            t.offset, t.bytes, data_size, out.data_offset));
      }
    }
    // Overlap: in offset order, each non-empty tensor must start at or after the furthest end seen so far.
    std::vector<size_t> order(out.tensors.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return out.tensors[a].offset < out.tensors[b].offset; });
    uint64_t furthest_end = 0;
    size_t furthest = 0;
    bool any = false;
    for (size_t i : order) {
      const TensorInfo& t = out.tensors[i];
      if (t.bytes == 0) continue;
      if (any && t.offset < furthest_end) {
        r_.set_context(fmt::format("tensor '{}'", t.name));
        r_.fail(sites_[i].offset_field,
                fmt::format("data [{}, {}) overlaps tensor '{}' at [{}, {})", t.offset, t.offset + t.bytes,
                            out.tensors[furthest].name, out.tensors[furthest].offset, furthest_end));
      }
      if (!any || t.offset + t.bytes > furthest_end) {
        furthest_end = t.offset + t.bytes;
        furthest = i;
      }
      any = true;
    }
  }

  ValueType read_type(std::string_view what) {
    const uint64_t at = r_.offset();
    const uint32_t t = r_.read<uint32_t>(what);
    if (!valid_value_type(t)) r_.fail(at, fmt::format("unknown {} {}", what, t));
    return (ValueType)t;
  }

  std::string read_string(std::string_view what, uint64_t max_length) {
    const uint64_t at = r_.offset();
    const uint64_t n = r_.read<uint64_t>(fmt::format("{} length", what));
    if (n > r_.remaining())
      r_.fail(at, fmt::format("{} length {} runs past the end of the file ({} bytes remain)", what, n, r_.remaining()));
    if (n > max_length) r_.fail(at, fmt::format("{} length {} exceeds the limit of {}", what, n, max_length));
    auto bytes = r_.read_bytes(n, what);
    return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }

  // Reads the payload of a value whose type tag was already read. `depth` counts enclosing arrays.
  void read_value(Value& v, ValueType type, int depth) {
    v.type_ = type;
    switch (type) {
      case ValueType::U8: v.u_ = r_.read<uint8_t>("u8 value"); break;
      case ValueType::I8: v.i_ = r_.read<int8_t>("i8 value"); break;
      case ValueType::U16: v.u_ = r_.read<uint16_t>("u16 value"); break;
      case ValueType::I16: v.i_ = r_.read<int16_t>("i16 value"); break;
      case ValueType::U32: v.u_ = r_.read<uint32_t>("u32 value"); break;
      case ValueType::I32: v.i_ = r_.read<int32_t>("i32 value"); break;
      case ValueType::U64: v.u_ = r_.read<uint64_t>("u64 value"); break;
      case ValueType::I64: v.i_ = r_.read<int64_t>("i64 value"); break;
      case ValueType::F32: v.f_ = r_.read<float>("f32 value"); break;
      case ValueType::F64: v.f_ = r_.read<double>("f64 value"); break;
      case ValueType::Bool: v.i_ = read_bool(); break;
      case ValueType::String: v.s_ = read_string("string value", std::numeric_limits<uint64_t>::max()); break;
      case ValueType::Array: read_array(v, depth + 1); break;
    }
  }

  bool read_bool() {
    const uint64_t at = r_.offset();
    const uint8_t b = r_.read<uint8_t>("bool value");
    if (b > 1) r_.fail(at, fmt::format("bool value is {}, not 0 or 1", b));
    return b != 0;
  }

  void read_array(Value& v, int depth) {
    const uint64_t at = r_.offset();
    if (depth > kMaxArrayNesting) r_.fail(at, fmt::format("arrays nested deeper than {} levels", kMaxArrayNesting));
    const ValueType et = read_type("array element type");
    v.array_type_ = et;
    const uint64_t count_at = r_.offset();
    const uint64_t count = r_.read<uint64_t>("array length");
    const uint64_t min_element = et == ValueType::String ? 8 : et == ValueType::Array ? 12 : scalar_size(et);
    if (count > r_.remaining() / min_element)
      r_.fail(count_at, fmt::format("array of {} {} elements needs at least {} bytes per element but only {} bytes "
                                    "remain", count, value_type_name(et), min_element, r_.remaining()));
    switch (et) {
      case ValueType::String:
        v.strings_.reserve(count);
        for (uint64_t i = 0; i < count; ++i)
          v.strings_.push_back(read_string("string element", std::numeric_limits<uint64_t>::max()));
        break;
      case ValueType::Array:
        v.values_.resize(count);
        for (uint64_t i = 0; i < count; ++i) {
          v.values_[i].type_ = ValueType::Array;
          read_array(v.values_[i], depth + 1);
        }
        break;
      case ValueType::F32:
      case ValueType::F64: {
        v.floats_.resize(count);
        for (uint64_t i = 0; i < count; ++i)
          v.floats_[i] = et == ValueType::F32 ? (double)r_.read<float>("f32 element") : r_.read<double>("f64 element");
        break;
      }
      default: {
        v.ints_.resize(count);
        Value e;
        for (uint64_t i = 0; i < count; ++i) {
          read_value(e, et, depth);
          v.ints_[i] = et == ValueType::U8 || et == ValueType::U16 || et == ValueType::U32 || et == ValueType::U64
                           ? (int64_t)e.u_
                           : e.i_;
        }
        break;
      }
    }
  }

  formats::ByteReader r_;
  uint64_t tensor_count_ = 0, kv_count_ = 0;
  uint64_t tensors_at_ = 0, kv_at_ = 0;
  std::vector<uint64_t> kv_offsets_;  // byte offset of each metadata pair
  std::vector<TensorSite> sites_;     // per tensor info
};

// ---- File ----------------------------------------------------------------------------------------


File File::open(const std::string& path) {
  auto mapping = formats::MappedFile::open(path);
  auto impl = std::make_shared<Impl>();
  impl->mapping = mapping;
  impl->bytes = mapping->bytes();
  impl->path = path;
  Parser::parse_checked(*impl);
  File f;
  f.impl_ = std::move(impl);
  return f;
}

File File::parse(std::span<const uint8_t> bytes, std::string name) {
  auto impl = std::make_shared<Impl>();
  impl->bytes = bytes;
  impl->path = std::move(name);
  Parser::parse_checked(*impl);
  File f;
  f.impl_ = std::move(impl);
  return f;
}

const std::string& File::path() const { return impl_->path; }
uint32_t File::version() const { return impl_->version; }
uint64_t File::alignment() const { return impl_->alignment; }
uint64_t File::data_offset() const { return impl_->data_offset; }
uint64_t File::file_size() const { return impl_->bytes.size(); }

const std::vector<std::pair<std::string, Value>>& File::metadata() const { return impl_->metadata; }

const Value* File::find(std::string_view key) const {
  auto it = impl_->key_index.find(key);
  return it == impl_->key_index.end() ? nullptr : &impl_->metadata[it->second].second;
}

namespace {
template <class F>
auto with_key(std::string_view key, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (Error& e) {
    e.add_context(fmt::format("gguf key '{}'", key));
    throw;
  }
}
}  // namespace

std::optional<std::string> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  return with_key(key, [&] { return v->as_string(); });
}
std::optional<int64_t> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  return with_key(key, [&] { return v->as_int(); });
}
std::optional<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  return with_key(key, [&] { return v->as_float(); });
}
std::optional<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  return with_key(key, [&] { return v->as_bool(); });
}
std::vector<std::string> File::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return {};
  return with_key(key, [&] { return v->as_string_array(); });
}
std::vector<int64_t> File::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return {};
  return with_key(key, [&] { return v->as_int_array(); });
}
std::vector<double> File::get_float_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return {};
  return with_key(key, [&] { return v->as_float_array(); });
}

const std::vector<TensorInfo>& File::tensors() const { return impl_->tensors; }

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

std::span<const uint8_t> File::tensor_bytes(const TensorInfo& info) const {
  // Bounds were checked at parse time for infos of this file; re-check so a foreign TensorInfo cannot escape.
  return formats::data_section_bytes(impl_->bytes, impl_->data_offset, info.offset, info.bytes,
                                     "gguf", impl_->path, info.name);
}

Tensor File::tensor(const TensorInfo& info, Device& cpu) const {
  return formats::view_mapped_tensor(tensor_bytes(info), info.shape, info.dtype, cpu, impl_, impl_->path,
                                     impl_->data_offset + info.offset, info.name);
}

Tensor File::tensor(std::string_view name, Device& cpu) const {
  const TensorInfo* info = find_tensor(name);
  RBEE_CHECK_CODE(info != nullptr, ErrorCode::NotFound, "{}: no tensor named '{}'", impl_->path, name);
  return tensor(*info, cpu);
}

}  // namespace rbee::gguf
