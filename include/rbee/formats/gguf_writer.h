// Writing GGUF v3 files: metadata key/values, tensor infos, aligned tensor data. Tensor bytes are produced
// on demand while the file is written, so a multi-gigabyte model never has to sit in memory at once.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "rbee/core/dtype.h"
#include "rbee/formats/gguf.h"
#include "rbee/core/shape.h"

namespace rbee::gguf {

class Writer {
 public:
  explicit Writer(uint32_t alignment = 32);

  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_u64(const std::string& key, uint64_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_string(const std::string& key, const std::string& v);
  void add_strings(const std::string& key, std::vector<std::string> v);
  void add_i32s(const std::string& key, std::vector<int32_t> v);
  void add_f32s(const std::string& key, std::vector<float> v);
  // A value read from another GGUF file, of any type (nested arrays included), written as it was.
  void add_value(const std::string& key, const Value& v);

  // Fills exactly dtype_row_bytes(dtype, last dim) * rows bytes of the tensor's data.
  using Producer = std::function<void(std::span<uint8_t> out)>;
  // shape is row-major (outermost first), as rbee uses it; the file stores it innermost first.
  void add_tensor(const std::string& name, const Shape& shape, DType dtype, Producer produce);

  // Writes the file; throws Error(Io) naming the path when it cannot. `progress` (0..1) per tensor.
  void write(const std::string& path, const std::function<void(float)>& progress = {}) const;

 private:
  struct KeyValue {
    std::string key;
    std::variant<uint32_t, int32_t, uint64_t, float, bool, std::string, std::vector<std::string>,
                 std::vector<int32_t>, std::vector<float>, Value>
        value;
  };
  struct TensorEntry {
    std::string name;
    Shape shape;
    DType dtype;
    uint64_t bytes;
    Producer produce;
  };
  uint32_t alignment_;
  std::vector<KeyValue> metadata_;
  std::vector<TensorEntry> tensors_;
};

}  // namespace rbee::gguf
