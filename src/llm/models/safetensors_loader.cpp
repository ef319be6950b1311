// Loading a Hugging Face model directory: config.json, safetensors (single or sharded), tokenizer.json, and
// the chat template from tokenizer_config.json or chat_template.jinja. Tensor names are mapped from the
// Hugging Face names onto the canonical (GGUF) names the Transformer asks for.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "llm/models/architecture.h"
#include "llm/models/model_source.h"
#include "rbee/backend/device.h"
#include "rbee/core/log.h"
#include "rbee/formats/safetensors.h"

namespace rbee::llm {

namespace {

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The chat template: chat_template.jinja, else tokenizer_config.json's "chat_template" (a string, or a list of
// {name, template} from which "default" is taken).
std::string read_chat_template(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir / "chat_template.jinja", ec)) return read_text_file(dir / "chat_template.jinja");
  if (!std::filesystem::exists(dir / "tokenizer_config.json", ec)) return "";
  const nlohmann::json cfg = safetensors::read_json_file((dir / "tokenizer_config.json").string());
  const auto it = cfg.find("chat_template");
  if (it == cfg.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const auto& entry : *it) {
      if (entry.value("name", "") == "default") return entry.value("template", "");
    }
  }
  return "";
}

}  // namespace

ModelSource open_safetensors_source(const std::string& dir_path) {
  const std::filesystem::path dir(dir_path);
  std::error_code ec;
  RBEE_CHECK_CODE(std::filesystem::exists(dir / "config.json", ec), ErrorCode::NotFound,
                  "{} has no config.json (expected a Hugging Face model directory)", dir_path);
  ModelConfig config = config_from_hf(safetensors::read_json_file((dir / "config.json").string()));
  config.chat_template = read_chat_template(dir);
  RBEE_CHECK_CODE(std::filesystem::exists(dir / "tokenizer.json", ec), ErrorCode::NotFound,
                  "{} has no tokenizer.json", dir_path);
  const std::string tokenizer_path = (dir / "tokenizer.json").string();
  auto checkpoint = std::make_shared<safetensors::Checkpoint>(safetensors::Checkpoint::open(dir_path));

  // canonical name -> Hugging Face name
  const Architecture& arch = architecture(config.arch);
  std::string prefix = "model.";
  for (const char* p : {"model.", "model.language_model.", "language_model.model."}) {
    if (checkpoint->find_tensor(std::string(p) + "embed_tokens.weight")) {
      prefix = p;
      break;
    }
  }
  std::unordered_map<std::string, std::string> names = {
      {"token_embd.weight", prefix + "embed_tokens.weight"},
      {"output_norm.weight", prefix + "norm.weight"},
      {"output.weight", "lm_head.weight"},
  };
  for (int l = 0; l < config.n_layers; ++l) {
    for (const auto& [hf, canonical] : arch.hf_layer_names) {
      names[fmt::format("blk.{}.{}", l, canonical)] = fmt::format("{}layers.{}.{}", prefix, l, hf);
    }
  }
  Device& cpu = Registry::global().cpu();
  TensorLookup lookup = [checkpoint, names = std::move(names), &cpu](const std::string& canonical) {
    const auto it = names.find(canonical);
    if (it == names.end() || !checkpoint->find_tensor(it->second)) return Tensor();
    return checkpoint->tensor(it->second, cpu);
  };
  ModelSource source;
  source.config = std::move(config);
  source.lookup = std::move(lookup);
  source.make_tokenizer = [tokenizer_path] { return Tokenizer::from_hf_json(tokenizer_path); };
  source.keepalive = checkpoint;
  return source;
}

}  // namespace rbee::llm
