// Model::load: opens the model's files (ModelSource: config, tokenizer, mapped weights) and builds the
// Transformer over the placement asked for (one device unless LoadOptions::placement names several).
#include <filesystem>

#include "llm/models/model_source.h"
#include "llm/models/transformer.h"
#include "rbee/backend/device.h"
#include "rbee/core/log.h"
#include "rbee/formats/gguf.h"

namespace rbee::llm {

ModelSource open_gguf_source(const std::string& path) {
  auto file = std::make_shared<gguf::File>(gguf::File::open(path));
  ModelSource source;
  source.config = config_from_gguf(*file);
  Device& cpu = Registry::global().cpu();
  source.lookup = [file, &cpu](const std::string& name) {
    const gguf::TensorInfo* info = file->find_tensor(name);
    return info ? file->tensor(*info, cpu) : Tensor();
  };
  source.make_tokenizer = [file] { return Tokenizer::from_gguf(*file); };
  source.keepalive = file;
  return source;
}

ModelSource open_model_source(const std::string& path) {
  std::error_code ec;
  RBEE_CHECK_CODE(std::filesystem::exists(path, ec), ErrorCode::NotFound, "model path '{}' does not exist", path);
  ModelSource source;
  RBEE_WITH_CONTEXT(fmt::format("reading model {}", path), {
    source = std::filesystem::is_directory(path, ec) ? open_safetensors_source(path) : open_gguf_source(path);
  });
  return source;
}

std::unique_ptr<Model> Model::load(const std::string& path, const LoadOptions& options) {
  std::unique_ptr<Model> model;
  ModelSource source = open_model_source(path);
  RBEE_WITH_CONTEXT(fmt::format("loading model {}", path), {
    log::info("model: {}", source.config.summary());
    Placement placement = options.placement;
    if (placement.devices.empty()) {
      placement = single_device(options.device ? *options.device : Registry::global().cpu(), source.config);
    }
    placement.validate(source.config);
    if (!placement.single()) log::info("placement: {}", placement.describe());
    model = std::make_unique<Transformer>(std::move(source.config), source.make_tokenizer(), placement,
                                          source.lookup, options.progress, source.keepalive);
  });
  model->set_decode_graphs(options.decode_graphs);
  return model;
}

}  // namespace rbee::llm
