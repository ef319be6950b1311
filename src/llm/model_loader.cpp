// Model::load: recognizes the file layout, reads the config and tokenizer, and builds the Transformer.
#include <filesystem>

#include "llm/models/transformer.h"
#include "rbee/backend/device.h"
#include "rbee/core/log.h"
#include "rbee/formats/gguf.h"

namespace rbee::llm {

namespace {

std::unique_ptr<Model> load_gguf(const std::string& path, const LoadOptions& options, Device& device) {
  auto file = std::make_shared<gguf::File>(gguf::File::open(path));
  ModelConfig config = config_from_gguf(*file);
  log::info("model: {}", config.summary());
  auto tokenizer = Tokenizer::from_gguf(*file);
  Device& cpu = Registry::global().cpu();
  TensorLookup lookup = [file, &cpu](const std::string& name) {
    const gguf::TensorInfo* info = file->find_tensor(name);
    return info ? file->tensor(*info, cpu) : Tensor();
  };
  return std::make_unique<Transformer>(std::move(config), std::move(tokenizer), device, lookup, options.progress,
                                       file);
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, const LoadOptions& options) {
  Device& device = options.device ? *options.device : Registry::global().cpu();
  std::error_code ec;
  RBEE_CHECK_CODE(std::filesystem::exists(path, ec), ErrorCode::NotFound, "model path '{}' does not exist", path);
  std::unique_ptr<Model> model;
  RBEE_WITH_CONTEXT(fmt::format("loading model {}", path), {
    if (std::filesystem::is_directory(path, ec)) {
      model = load_safetensors_dir(path, options, device);
    } else {
      model = load_gguf(path, options, device);
    }
  });
  model->set_decode_graphs(options.decode_graphs);
  return model;
}

}  // namespace rbee::llm
