// safetensors reader: the 8-byte header length, the JSON header and every tensor entry are checked against the
// file before any tensor is handed out (see include/rbee/formats/safetensors.h for the contract).
#include "rbee/formats/safetensors.h"

#include <algorithm>
#include <limits>
#include <new>
#include <set>

#include "formats/byte_reader.h"
#include "formats/json_header.h"
#include "formats/mapped_tensor.h"
#include "formats/mmap_file.h"
#include "rbee/core/error.h"

namespace rbee::safetensors {

using nlohmann::json;

struct File::Impl {
  std::shared_ptr<const formats::MappedFile> mapping;  // null for File::parse
  std::span<const uint8_t> bytes;
  std::string path;
  uint64_t data_offset = 0;
  std::map<std::string, std::string> metadata;
  std::vector<TensorInfo> tensors;  // by data offset
  std::map<std::string, size_t, std::less<>> index;
};

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  if (name == "F32") return DType::F32;
  if (name == "F16") return DType::F16;
  if (name == "BF16") return DType::BF16;
  if (name == "F64") return DType::F64;
  if (name == "I64") return DType::I64;
  if (name == "I32") return DType::I32;
  if (name == "U32") return DType::U32;
  if (name == "U8" || name == "BOOL") return DType::U8;
  return std::nullopt;
}

namespace {

constexpr uint64_t kLengthBytes = 8;

// Text from the file quoted in a message, cut short so a hostile header cannot make a huge message.
std::string clip(std::string text) {
  constexpr size_t kShown = 64;
  if (text.size() > kShown) text = text.substr(0, kShown) + fmt::format("... ({} bytes)", text.size());
  return text;
}

// Reads one tensor entry of the header. `r` only formats errors here (at the header's offset).
TensorInfo read_entry(const formats::ByteReader& r, const std::string& name, const json& entry, uint64_t data_offset,
                      uint64_t data_size) {
  constexpr uint64_t at = kLengthBytes;  // JSON problems are reported at the start of the header
  if (!entry.is_object()) r.fail(at, fmt::format("entry is {}, not an object", entry.type_name()));
  TensorInfo info;
  info.name = name;

  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) r.fail(at, "\"dtype\" is missing or not a string");
  info.file_dtype = dtype_it->get<std::string>();
  const std::optional<DType> dtype = dtype_from_safetensors(info.file_dtype);
  if (!dtype) r.fail(at, fmt::format("unsupported dtype '{}'", clip(info.file_dtype)));
  info.dtype = *dtype;

  auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array()) r.fail(at, "\"shape\" is missing or not an array");
  if (shape_it->size() > (size_t)kMaxRank)
    r.fail(at, fmt::format("shape has {} dimensions; at most {} are supported", shape_it->size(), kMaxRank));
  // The product of the non-zero dims must fit in int64 even when another dim is 0: shape code multiplies dims
  // in any order.
  uint64_t nonzero_product = 1;
  bool any_zero = false;
  for (const json& d : *shape_it) {
    if (!d.is_number_unsigned()) r.fail(at, fmt::format("shape dimension {} is not a non-negative integer", clip(d.dump())));
    const uint64_t v = d.get<uint64_t>();
    if (v > (uint64_t)std::numeric_limits<int64_t>::max())
      r.fail(at, fmt::format("shape dimension {} is too large", v));
    info.shape.push_back((int64_t)v);
    if (v == 0) {
      any_zero = true;
      continue;
    }
    if (nonzero_product > (uint64_t)std::numeric_limits<int64_t>::max() / v)
      r.fail(at, fmt::format("element count of shape {} overflows int64", shape_it->dump()));
    nonzero_product *= v;
  }
  const uint64_t numel = any_zero ? 0 : nonzero_product;
  const uint64_t elem = (uint64_t)dtype_type_size(info.dtype);
  if (numel > std::numeric_limits<uint64_t>::max() / elem)
    r.fail(at, fmt::format("byte size of shape {} overflows", shape_it->dump()));
  const uint64_t expected = numel * elem;

  auto off_it = entry.find("data_offsets");
  if (off_it == entry.end() || !off_it->is_array() || off_it->size() != 2 || !(*off_it)[0].is_number_unsigned() ||
      !(*off_it)[1].is_number_unsigned())
    r.fail(at, "\"data_offsets\" is missing or not two non-negative integers");
  const uint64_t begin = (*off_it)[0].get<uint64_t>();
  const uint64_t end = (*off_it)[1].get<uint64_t>();
  if (begin > end) r.fail(at, fmt::format("data_offsets [{}, {}] end before they begin", begin, end));
  if (end > data_size)
    r.fail(data_offset + std::min(begin, data_size),
           fmt::format("data_offsets [{}, {}] run past the end of the data section ({} bytes)", begin, end, data_size));
  if (end - begin != expected)
    r.fail(at, fmt::format("data_offsets [{}, {}] hold {} bytes but shape {} of {} needs {}", begin, end, end - begin,
                           shape_it->dump(), clip(info.file_dtype), expected));
  info.offset = begin;
  info.bytes = end - begin;
  return info;
}

void read_metadata(const formats::ByteReader& r, const json& meta, std::map<std::string, std::string>& out) {
  if (!meta.is_object()) r.fail(kLengthBytes, fmt::format("__metadata__ is {}, not an object", meta.type_name()));
  for (auto it = meta.begin(); it != meta.end(); ++it) {
    if (!it->is_string())
      r.fail(kLengthBytes,
             fmt::format("__metadata__ value of '{}' is {}, not a string", clip(it.key()), it->type_name()));
    out.emplace(it.key(), it->get<std::string>());
  }
}

void parse_into(File::Impl& impl) {
  formats::ByteReader r(impl.bytes, impl.path);
  r.set_context("header");
  const uint64_t n = r.read<uint64_t>("header length");
  if (n > kMaxHeaderBytes) r.fail(0, fmt::format("header length {} exceeds the limit of {}", n, kMaxHeaderBytes));
  if (n > r.remaining())
    r.fail(0, fmt::format("header length {} runs past the end of the file ({} bytes remain)", n, r.remaining()));
  if (n < 2) r.fail(0, fmt::format("header length {} cannot hold a JSON object", n));
  const auto text = r.read_bytes(n, "header");
  if (text[0] != '{') r.fail(kLengthBytes, fmt::format("header starts with byte 0x{:02x}, not '{{'", text[0]));
  impl.data_offset = kLengthBytes + n;
  const uint64_t data_size = impl.bytes.size() - impl.data_offset;

  const json header = formats::parse_json_strict(
      std::string_view(reinterpret_cast<const char*>(text.data()), text.size()), impl.path, kLengthBytes);

  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      r.set_context("__metadata__");
      read_metadata(r, *it, impl.metadata);
      continue;
    }
    r.set_context(fmt::format("tensor '{}'", clip(it.key())));
    impl.tensors.push_back(read_entry(r, it.key(), *it, impl.data_offset, data_size));
  }

  // Byte order, then overlap: each non-empty tensor must start at or after the furthest end seen so far.
  std::stable_sort(impl.tensors.begin(), impl.tensors.end(),
                   [](const TensorInfo& a, const TensorInfo& b) { return a.offset < b.offset; });
  uint64_t furthest_end = 0;
  const TensorInfo* furthest = nullptr;
  for (const TensorInfo& t : impl.tensors) {
    if (t.bytes == 0) continue;
    if (furthest && t.offset < furthest_end) {
      r.set_context(fmt::format("tensor '{}'", clip(t.name)));
      r.fail(impl.data_offset + t.offset, fmt::format("data [{}, {}) overlaps tensor '{}' at [{}, {})", t.offset,
                                                      t.offset + t.bytes, furthest->name, furthest->offset,
                                                      furthest_end));
    }
    if (!furthest || t.offset + t.bytes > furthest_end) {
      furthest_end = t.offset + t.bytes;
      furthest = &t;
    }
  }
  for (size_t i = 0; i < impl.tensors.size(); ++i) impl.index.emplace(impl.tensors[i].name, i);
}

// A header of up to kMaxHeaderBytes of JSON may not fit in memory as a DOM: OutOfMemory, not a crash.
void parse_checked(File::Impl& impl) {
  try {
    parse_into(impl);
  } catch (const std::bad_alloc&) {
    RBEE_THROW(ErrorCode::OutOfMemory, "{}: not enough memory to parse the header", impl.path);
  }
}

}  // namespace

File File::open(const std::string& path) {
  auto mapping = formats::MappedFile::open(path);
  auto impl = std::make_shared<Impl>();
  impl->mapping = mapping;
  impl->bytes = mapping->bytes();
  impl->path = path;
  parse_checked(*impl);
  File f;
  f.impl_ = std::move(impl);
  return f;
}

File File::parse(std::span<const uint8_t> bytes, std::string name) {
  auto impl = std::make_shared<Impl>();
  impl->bytes = bytes;
  impl->path = std::move(name);
  parse_checked(*impl);
  File f;
  f.impl_ = std::move(impl);
  return f;
}

const std::string& File::path() const { return impl_->path; }
uint64_t File::data_offset() const { return impl_->data_offset; }
uint64_t File::file_size() const { return impl_->bytes.size(); }
const std::map<std::string, std::string>& File::metadata() const { return impl_->metadata; }
const std::vector<TensorInfo>& File::tensors() const { return impl_->tensors; }

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = impl_->index.find(name);
  return it == impl_->index.end() ? nullptr : &impl_->tensors[it->second];
}

std::span<const uint8_t> File::tensor_bytes(const TensorInfo& info) const {
  return formats::data_section_bytes(impl_->bytes, impl_->data_offset, info.offset, info.bytes,
                                     "safetensors", impl_->path, info.name);
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

}  // namespace rbee::safetensors
