// ModelSource: a model's files opened and their metadata read, but no weight read yet: the config, a lookup of
// the mapped weights by canonical name, and the tokenizer on demand. Model::load builds the Transformer from it;
// describe_model (the memory plan) reads only shapes and dtypes through it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "llm/models/weight_layout.h"
#include "rbee/llm/model_config.h"
#include "rbee/llm/tokenizer.h"

namespace rbee::llm {

struct ModelSource {
  ModelConfig config;
  TensorLookup lookup;
  std::function<std::unique_ptr<Tokenizer>()> make_tokenizer;
  std::shared_ptr<const void> keepalive;  // the mapped files
};

// A .gguf file or a Hugging Face directory (config.json, *.safetensors or an index, tokenizer.json).
ModelSource open_model_source(const std::string& path);
ModelSource open_gguf_source(const std::string& path);
ModelSource open_safetensors_source(const std::string& dir);

}  // namespace rbee::llm
