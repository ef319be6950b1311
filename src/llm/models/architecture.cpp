#include "llm/models/architecture.h"

#include "rbee/core/error.h"

namespace rbee::llm {

const std::vector<const Architecture*>& architectures() {
  // The one list of architectures. Adding one: its file (see llama.cpp), its declaration in architecture.h,
  // and its line here.
  static const std::vector<const Architecture*> all = {
      &llama_architecture(), &mistral_architecture(), &qwen2_architecture(),  &phi3_architecture(),
      &gemma_architecture(), &gemma2_architecture(),  &gemma3_architecture(),
  };
  return all;
}

const Architecture* find_architecture(const std::string& name) {
  for (const Architecture* a : architectures()) {
    if (name == a->name) return a;
  }
  return nullptr;
}

const Architecture* find_hf_architecture(const std::string& model_type) {
  for (const Architecture* a : architectures()) {
    for (const std::string& t : a->hf_model_types) {
      if (model_type == t) return a;
    }
  }
  return nullptr;
}

const Architecture& architecture(const std::string& name) {
  const Architecture* a = find_architecture(name);
  RBEE_CHECK_CODE(a != nullptr, ErrorCode::Unsupported, "architecture '{}' is not supported ({})", name,
                  architecture_names());
  return *a;
}

std::string architecture_names() {
  std::string out;
  for (const Architecture* a : architectures()) out += (out.empty() ? "" : ", ") + std::string(a->name);
  return out;
}

std::string hf_model_type_names() {
  std::string out;
  for (const Architecture* a : architectures()) {
    for (const std::string& t : a->hf_model_types) out += (out.empty() ? "" : ", ") + t;
  }
  return out;
}

int hf_int(const nlohmann::json& j, const char* key, int fallback) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : it->get<int>();
}

double hf_float(const nlohmann::json& j, const char* key, double fallback) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : it->get<double>();
}

void hf_read_sliding_window(const HfConfig& config, ModelConfig& c) {
  c.sliding_window = hf_int(config.json, "sliding_window", 0);
}

std::vector<std::pair<std::string, std::string>> llama_like_hf_names() {
  return {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
}

}  // namespace rbee::llm
