// safetensors model files, read through mmap: single files and sharded checkpoints.
//
// File layout: u64 little-endian N, then N bytes of UTF-8 JSON (an object, possibly padded with trailing
// spaces), then the data section. The JSON maps each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end]} with offsets relative to the data section; the optional "__metadata__" entry maps strings to
// strings. Every entry is checked: known dtype, shape of at most kMaxRank non-negative dims, begin <= end,
// end inside the data section, end - begin == numel * dtype size (with overflow checks), and no two tensors
// overlapping. A malformed file throws Error(Io) naming the source, the byte offset (of the header for JSON
// problems, of the data for range problems), the tensor and the reason.
//
// A sharded checkpoint is a directory with model.safetensors.index.json, whose "weight_map" maps tensor names
// to shard file names in the same directory; Checkpoint opens every shard once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "rbee/core/dtype.h"
#include "rbee/core/shape.h"
#include "rbee/core/tensor.h"

namespace rbee {
class Device;
}

namespace rbee::safetensors {

// Limit on the JSON header (the reference implementation's limit): bigger headers are refused before parsing.
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// The DType a safetensors dtype string loads as: F32, F16, BF16, F64, I64, I32, U32, U8, and BOOL as U8.
// nullopt for the others (I8, I16, U16, U64, F8_*, ...), which are refused with the tensor's name.
std::optional<DType> dtype_from_safetensors(std::string_view name);

struct TensorInfo {
  std::string name;
  std::string file_dtype;  // as written in the header ("BOOL", "BF16", ...)
  Shape shape;             // row-major, as in the header
  DType dtype;
  uint64_t offset = 0;     // from the start of the data section
  uint64_t bytes = 0;
};

class File {
 public:
  // Maps and parses the file. Throws Error(NotFound) for a missing file, Error(Io) for a malformed one,
  // Error(OutOfMemory) when the header does not fit in memory.
  static File open(const std::string& path);
  // Parses a file already in memory (fuzzing, tests). `bytes` must outlive the File and its tensors.
  static File parse(std::span<const uint8_t> bytes, std::string name = "<memory>");

  const std::string& path() const;
  uint64_t data_offset() const;  // 8 + header length
  uint64_t file_size() const;
  // The "__metadata__" entries (empty when absent).
  const std::map<std::string, std::string>& metadata() const;

  // Tensor infos ordered by data offset (the order of the bytes in the file).
  const std::vector<TensorInfo>& tensors() const;
  const TensorInfo* find_tensor(std::string_view name) const;
  std::span<const uint8_t> tensor_bytes(const TensorInfo& info) const;
  // A CPU tensor viewing the mapped bytes (no copy, read-only memory); it keeps the mapping alive. Throws
  // Error(Io) when the data's address is not aligned for the dtype (safetensors does not align tensors).
  Tensor tensor(const TensorInfo& info, Device& cpu) const;
  // Same, by name; Error(NotFound) when there is no such tensor.
  Tensor tensor(std::string_view name, Device& cpu) const;

  struct Impl;  // opaque: defined and filled in src/formats/

 private:
  std::shared_ptr<const Impl> impl_;
};

// A checkpoint: one safetensors file or a sharded set, plus the config.json next to it when there is one.
class Checkpoint {
 public:
  // `path` is a .safetensors file, a model.safetensors.index.json, or a directory holding either
  // model.safetensors.index.json, model.safetensors, or exactly one *.safetensors file. Every weight_map entry
  // must name a shard file (a plain file name in the same directory) that holds that tensor; a tensor that
  // appears in two shards is refused. Throws Error(NotFound) / Error(Io).
  static Checkpoint open(const std::string& path);

  const std::string& directory() const;
  // The shard files, each opened once, in file-name order.
  const std::vector<File>& files() const;
  // Every tensor name, sorted.
  std::vector<std::string> tensor_names() const;
  size_t tensor_count() const;
  const TensorInfo* find_tensor(std::string_view name) const;
  // The file holding a tensor; Error(NotFound) when absent.
  const File& file_of(std::string_view name) const;
  Tensor tensor(std::string_view name, Device& cpu) const;
  // The index's "metadata" object (e.g. total_size); null for a single file.
  const nlohmann::json& index_metadata() const;

  // config.json in the checkpoint's directory.
  bool has_config() const;
  const nlohmann::json& config() const;  // Error(NotFound) when there is no config.json

  struct Impl;  // opaque: defined and filled in src/formats/

 private:
  std::shared_ptr<const Impl> impl_;
};

// Reads and parses a JSON file. Error(NotFound) when missing, Error(Io) naming the byte offset of a syntax
// error.
nlohmann::json read_json_file(const std::string& path);

}  // namespace rbee::safetensors
