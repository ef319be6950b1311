// Writing model files: random-weight models at real architecture shapes (so speed can be measured where
// real weights cannot be copied) and re-quantizing a GGUF model to a block type (`rbee quantize`).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rbee/core/dtype.h"

namespace rbee::llm {

// The shape of a real model, enough to write a random-weight GGUF of the same size and cost.
struct ShapePreset {
  std::string name;   // "llama2-7b", "llama2-70b", "llama3-8b", "llama3.2-1b", "qwen2.5-1.5b", and small "tiny-*" ones
  std::string arch;   // GGUF general.architecture
  int vocab, hidden, layers, heads, kv_heads, ffn, context;
  int head_dim;       // 0: hidden / heads
  float rope_theta;
  bool tied_embeddings;
  int sliding_window;  // gemma3 local layers
};
const std::vector<ShapePreset>& shape_presets();
const ShapePreset& shape_preset(const std::string& name);  // throws NotFound listing the names

// Writes a GGUF model of the preset's shape with random weights in `weight_dtype` (F32, F16, BF16 or a block
// type; norms stay F32), a SentencePiece-style vocabulary of byte tokens and fillers, seeded. context_length > 0
// replaces the preset's context length in the file (e.g. the 70B shape at 65536 positions, more than one card holds).
void write_random_model(const std::string& preset, DType weight_dtype, const std::string& out_path, uint64_t seed,
                        const std::function<void(float)>& progress = {}, int context_length = 0);

// Copies a GGUF model, converting every 2-D weight whose rows fit the block size to `type` (1-D tensors
// and non-fitting rows are kept as they are). Metadata is copied unchanged.
void quantize_model(const std::string& in_path, const std::string& out_path, DType type,
                    const std::function<void(float)>& progress = {});

}  // namespace rbee::llm
