#include "rbee/llm/model_files.h"

#include <cmath>
#include <cstring>

#include "llm/models/architecture.h"
#include "rbee/backend/device.h"
#include "rbee/core/error.h"
#include "rbee/core/half.h"
#include "rbee/core/log.h"
#include "rbee/core/thread_pool.h"
#include "rbee/formats/gguf.h"
#include "rbee/formats/gguf_writer.h"
#include "rbee/ops.h"

namespace rbee::llm {

const std::vector<ShapePreset>& shape_presets() {
  // Each architecture lists its own (llm/models/<arch>.cpp).
  static const std::vector<ShapePreset> presets = [] {
    std::vector<ShapePreset> all;
    for (const Architecture* arch : architectures()) {
      for (const ShapePreset& p : arch->shape_presets) {
        RBEE_ASSERT(p.arch == arch->name, "shape preset {} of architecture {} names {}", p.name, arch->name, p.arch);
        all.push_back(p);
      }
    }
    return all;
  }();
  return presets;
}

const ShapePreset& shape_preset(const std::string& name) {
  std::string known;
  for (const auto& p : shape_presets()) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  RBEE_THROW(ErrorCode::NotFound, "no model shape preset '{}' (known: {})", name, known);
}

namespace {

// splitmix64: a fast, seedable generator good enough for benchmark weights.
struct Random {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-a, a).
  float uniform(float a) { return ((float)(next() >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * a; }
};

// Encodes f32 rows [rows, cols] as `dtype` into out (row-major), through the CPU kernels for block types.
void encode_rows(const std::vector<float>& values, int64_t rows, int64_t cols, DType dtype, std::span<uint8_t> out) {
  Device& cpu = Registry::global().cpu();
  const Tensor src = Tensor::wrap(const_cast<float*>(values.data()), {rows, cols}, DType::F32, cpu, nullptr);
  Tensor encoded;
  if (is_quantized(dtype)) encoded = ops::quantize(src, dtype);
  else encoded = dtype == DType::F32 ? src : ops::cast(src, dtype);
  RBEE_ASSERT((size_t)encoded.nbytes() == out.size(), "encoded {} bytes for a {}-byte tensor", encoded.nbytes(),
              out.size());
  std::memcpy(out.data(), encoded.data(), out.size());
}

}  // namespace

void write_random_model(const std::string& preset_name, DType weight_dtype, const std::string& out_path, uint64_t seed,
                        const std::function<void(float)>& progress, int context_length) {
  const ShapePreset& p = shape_preset(preset_name);
  const Architecture& arch = architecture(p.arch);
  const int head_dim = p.head_dim ? p.head_dim : p.hidden / p.heads;
  const int bs = dtype_block_size(weight_dtype);
  RBEE_CHECK(p.hidden % bs == 0 && p.ffn % bs == 0 && (p.heads * head_dim) % bs == 0,
             "preset {} has rows that are not a multiple of {}'s {}-element blocks", p.name, dtype_name(weight_dtype),
             bs);
  gguf::Writer w;
  const std::string a = p.arch + ".";
  w.add_string("general.architecture", p.arch);
  w.add_string("general.name", fmt::format("random {} ({})", p.name, dtype_name(weight_dtype)));
  RBEE_CHECK(context_length >= 0, "random model: context length {} is negative", context_length);
  w.add_u32(a + "context_length", (uint32_t)(context_length > 0 ? context_length : p.context));
  w.add_u32(a + "embedding_length", (uint32_t)p.hidden);
  w.add_u32(a + "block_count", (uint32_t)p.layers);
  w.add_u32(a + "feed_forward_length", (uint32_t)p.ffn);
  w.add_u32(a + "attention.head_count", (uint32_t)p.heads);
  w.add_u32(a + "attention.head_count_kv", (uint32_t)p.kv_heads);
  w.add_u32(a + "attention.key_length", (uint32_t)head_dim);
  w.add_u32(a + "attention.value_length", (uint32_t)head_dim);
  w.add_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  w.add_f32(a + "rope.freq_base", p.rope_theta);
  w.add_u32(a + "rope.dimension_count", (uint32_t)head_dim);
  if (p.sliding_window) w.add_u32(a + "attention.sliding_window", (uint32_t)p.sliding_window);
  // SentencePiece-style vocabulary: <unk> <s> </s>, the 256 byte tokens, then fillers.
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(fmt::format("<0x{:02X}>", b));
    types.push_back(6);
  }
  for (int i = (int)tokens.size(); i < p.vocab; ++i) {
    tokens.push_back(fmt::format("\u2581t{}", i));
    types.push_back(1);
  }
  std::vector<float> scores(tokens.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = -(float)i;
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_strings("tokenizer.ggml.tokens", std::move(tokens));
  w.add_f32s("tokenizer.ggml.scores", std::move(scores));
  w.add_i32s("tokenizer.ggml.token_type", std::move(types));
  w.add_u32("tokenizer.ggml.bos_token_id", 1);
  w.add_u32("tokenizer.ggml.eos_token_id", 2);

  uint64_t tensor_index = 0;
  // A [rows, cols] weight with values uniform in +-sqrt(3/cols) (unit-variance outputs for unit inputs).
  auto weight = [&](const std::string& name, int64_t rows, int64_t cols, DType dtype) {
    const uint64_t s = seed * 1000003ull + tensor_index++;
    w.add_tensor(name, {rows, cols}, dtype, [=](std::span<uint8_t> out) {
      const int64_t chunk_rows = std::max<int64_t>(1, (1 << 22) / cols);
      const size_t row_bytes = (size_t)dtype_row_bytes(dtype, cols);
      const float a = std::sqrt(3.0f / (float)cols);
      // Chunks on the thread pool (each seeded by its first row, so the bytes do not depend on the threads; the
      // quantizer runs serially inside a task): a 70B model is written in seconds, not minutes.
      const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
      ThreadPool::global().run(chunks, [&](int64_t c) {
        const int64_t r0 = c * chunk_rows;
        const int64_t n = std::min(chunk_rows, rows - r0);
        std::vector<float> values((size_t)(n * cols));
        Random rng{s ^ (uint64_t)r0 * 0x2545f4914f6cdd1dull};
        for (auto& v : values) v = rng.uniform(a);
        encode_rows(values, n, cols, dtype, out.subspan((size_t)r0 * row_bytes, (size_t)n * row_bytes));
      });
    });
  };
  auto norm = [&](const std::string& name, int64_t n) {
    w.add_tensor(name, {n}, DType::F32, [=](std::span<uint8_t> out) {
      const std::vector<float> ones((size_t)n, 1.0f);
      std::memcpy(out.data(), ones.data(), out.size());
    });
  };
  const int64_t q_dim = (int64_t)p.heads * head_dim, kv_dim = (int64_t)p.kv_heads * head_dim;
  weight("token_embd.weight", p.vocab, p.hidden, weight_dtype);
  norm("output_norm.weight", p.hidden);
  if (!p.tied_embeddings) weight("output.weight", p.vocab, p.hidden, weight_dtype);
  for (int l = 0; l < p.layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    norm(b + "attn_norm.weight", p.hidden);
    weight(b + "attn_q.weight", q_dim, p.hidden, weight_dtype);
    weight(b + "attn_k.weight", kv_dim, p.hidden, weight_dtype);
    weight(b + "attn_v.weight", kv_dim, p.hidden, weight_dtype);
    for (const LayerVector& v : arch.random_layer_vectors) {
      const int64_t n = v.size == LayerVector::Size::QDim    ? q_dim
                        : v.size == LayerVector::Size::KvDim ? kv_dim
                        : v.size == LayerVector::Size::HeadDim ? (int64_t)head_dim
                                                               : (int64_t)p.hidden;
      norm(b + v.name, n);
    }
    weight(b + "attn_output.weight", p.hidden, q_dim, weight_dtype);
    norm(b + "ffn_norm.weight", p.hidden);
    weight(b + "ffn_gate.weight", p.ffn, p.hidden, weight_dtype);
    weight(b + "ffn_up.weight", p.ffn, p.hidden, weight_dtype);
    weight(b + "ffn_down.weight", p.hidden, p.ffn, weight_dtype);
  }
  w.write(out_path, progress);
}

void quantize_model(const std::string& in_path, const std::string& out_path, DType type,
                    const std::function<void(float)>& progress) {
  RBEE_CHECK(is_quantized(type) || type == DType::F16 || type == DType::BF16 || type == DType::F32,
             "quantize: target type {} is not a weight type", dtype_name(type));
  RBEE_CHECK(type != DType::Q8_1 && type != DType::Q8_K, "quantize: {} is an activation format, not a weight type",
             dtype_name(type));
  auto file = std::make_shared<gguf::File>(gguf::File::open(in_path));
  gguf::Writer w((uint32_t)file->alignment());
  for (const auto& [key, value] : file->metadata()) {
    if (key == "general.alignment") continue;
    w.add_value(key, value);
  }
  Device& cpu = Registry::global().cpu();
  int converted = 0;
  for (const auto& info : file->tensors()) {
    const int64_t cols = info.shape[info.shape.rank() - 1];
    const bool convert = info.shape.rank() == 2 && cols % dtype_block_size(type) == 0 && info.dtype != type;
    if (!convert) {
      w.add_tensor(info.name, info.shape, info.dtype, [file, info](std::span<uint8_t> out) {
        const auto bytes = file->tensor_bytes(info);
        std::memcpy(out.data(), bytes.data(), out.size());
      });
      continue;
    }
    if (is_quantized(info.dtype)) {
      log::warn("quantize: {} is already {}; re-quantizing it to {} loses precision twice", info.name,
                dtype_name(info.dtype), dtype_name(type));
    }
    ++converted;
    w.add_tensor(info.name, info.shape, type, [file, info, type, &cpu](std::span<uint8_t> out) {
      const Tensor src = file->tensor(info, cpu);
      const Tensor f32 = is_quantized(src.dtype()) ? ops::dequantize(src) : ops::cast(src, DType::F32);
      const Tensor dst = is_quantized(type) ? ops::quantize(f32, type) : ops::cast(f32, type);
      std::memcpy(out.data(), dst.data(), out.size());
    });
  }
  log::info("quantize: {} of {} tensors become {}", converted, file->tensors().size(), dtype_name(type));
  w.write(out_path, progress);
}

}  // namespace rbee::llm
