// ModelConfig from GGUF metadata (llama.cpp's key names) and from Hugging Face config.json: the keys every
// architecture shares. What differs per architecture comes from its registry entry (llm/models/architecture.h).
#include "rbee/llm/model_config.h"

#include <cmath>

#include "llm/models/architecture.h"
#include "rbee/core/error.h"
#include "rbee/formats/gguf.h"

namespace rbee::llm {

namespace {

// Which layers use the sliding window: the architecture's pattern (default: every layer).
std::vector<bool> local_layer_pattern(const Architecture& arch, int n_layers, int sliding_window, int pattern) {
  std::vector<bool> local((size_t)n_layers, false);
  if (sliding_window <= 0) return local;
  for (int i = 0; i < n_layers; ++i) local[(size_t)i] = arch.layer_slides ? arch.layer_slides(i, pattern) : true;
  return local;
}

// {arch}.attention.sliding_window_pattern as llama.cpp writes it: a per-layer array (true = sliding), or a
// period n where layer i slides when i % n < n - 1 (n = 0: every layer slides).
std::vector<bool> gguf_layer_pattern(const gguf::Value& v, int n_layers, const std::string& path) {
  std::vector<bool> local((size_t)n_layers, false);
  if (v.type() == gguf::ValueType::Array) {
    const auto items = v.as_array();
    RBEE_CHECK_CODE((int)items.size() == n_layers, ErrorCode::Io,
                    "{}: attention.sliding_window_pattern has {} entries for {} layers", path, items.size(), n_layers);
    for (int i = 0; i < n_layers; ++i) {
      const gguf::Value& e = items[(size_t)i];
      local[(size_t)i] = e.type() == gguf::ValueType::Bool ? e.as_bool() : e.as_int() != 0;
    }
    return local;
  }
  const int64_t n = v.as_int();
  RBEE_CHECK_CODE(n >= 0, ErrorCode::Io, "{}: attention.sliding_window_pattern {} is negative", path, n);
  for (int i = 0; i < n_layers; ++i) local[(size_t)i] = n == 0 || i % n < n - 1;
  return local;
}

// The architecture's fixed traits, then the defaults that follow from the sizes.
void apply_arch_defaults(const Architecture& arch, ModelConfig& c) {
  if (arch.traits) arch.traits(c);
  if (c.rotary_dim == 0) c.rotary_dim = c.head_dim;
  if (c.attn_scale == 0.0f) c.attn_scale = 1.0f / std::sqrt((float)c.head_dim);
}

}  // namespace

void ModelConfig::validate() const {
  RBEE_CHECK(!arch.empty(), "model config: architecture is missing");
  RBEE_CHECK(vocab_size > 0, "model config: vocab_size must be positive, got {}", vocab_size);
  RBEE_CHECK(hidden_size > 0 && n_layers > 0 && intermediate_size > 0,
             "model config: hidden_size {}, n_layers {}, intermediate_size {} must be positive", hidden_size, n_layers,
             intermediate_size);
  RBEE_CHECK(n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0,
             "model config: {} attention heads are not a multiple of {} kv heads", n_heads, n_kv_heads);
  RBEE_CHECK(head_dim > 0 && head_dim % 2 == 0, "model config: head_dim {} must be positive and even", head_dim);
  RBEE_CHECK(rotary_dim > 0 && rotary_dim <= head_dim && rotary_dim % 2 == 0,
             "model config: rotary_dim {} must be even and within head_dim {}", rotary_dim, head_dim);
  RBEE_CHECK((int)layer_is_local.size() == n_layers, "model config: layer pattern has {} entries for {} layers",
             layer_is_local.size(), n_layers);
  RBEE_CHECK(n_layers <= 4096 && hidden_size <= (1 << 20) && n_heads <= 4096 && vocab_size <= (1 << 24),
             "model config: implausible sizes (layers {}, hidden {}, heads {}, vocab {})", n_layers, hidden_size,
             n_heads, vocab_size);
}

std::string ModelConfig::summary() const {
  return fmt::format("{} '{}': {} layers, hidden {}, ffn {}, heads {}/{} x {}, vocab {}, ctx {}, rope {} theta {}{}",
                     arch, name, n_layers, hidden_size, intermediate_size, n_heads, n_kv_heads, head_dim, vocab_size,
                     max_positions, rope_mode == RopeMode::Neox ? "neox" : "normal", rope_theta,
                     sliding_window ? fmt::format(", window {}", sliding_window) : "");
}

ModelConfig config_from_gguf(const gguf::File& f) {
  ModelConfig c;
  // A GGUF model is llama.cpp's format: its rope follows llama.cpp's angle arithmetic (where unscaled).
  c.rope_llamacpp_angles = true;
  const auto arch = f.get_string("general.architecture");
  RBEE_CHECK_CODE(arch.has_value(), ErrorCode::Io, "{}: general.architecture is missing", f.path());
  c.arch = *arch;
  const Architecture* entry = find_architecture(c.arch);
  RBEE_CHECK_CODE(entry != nullptr, ErrorCode::Unsupported, "{}: architecture '{}' is not supported ({})", f.path(),
                  c.arch, architecture_names());
  c.name = f.get_string("general.name").value_or(c.arch);
  const std::string a = c.arch + ".";
  auto need_int = [&](const std::string& key) {
    const auto v = f.get_int(key);
    RBEE_CHECK_CODE(v.has_value(), ErrorCode::Io, "{}: metadata key {} is missing", f.path(), key);
    return (int)*v;
  };
  c.hidden_size = need_int(a + "embedding_length");
  c.n_layers = need_int(a + "block_count");
  c.intermediate_size = need_int(a + "feed_forward_length");
  c.n_heads = need_int(a + "attention.head_count");
  c.n_kv_heads = (int)f.get_int(a + "attention.head_count_kv").value_or(c.n_heads);
  c.max_positions = (int)f.get_int(a + "context_length").value_or(4096);
  c.head_dim = (int)f.get_int(a + "attention.key_length").value_or(c.n_heads ? c.hidden_size / c.n_heads : 0);
  c.norm_eps = (float)f.get_float(a + "attention.layer_norm_rms_epsilon").value_or(1e-5);
  c.rope_theta = (float)f.get_float(a + "rope.freq_base").value_or(10000.0);
  c.rotary_dim = (int)f.get_int(a + "rope.dimension_count").value_or(c.head_dim);
  // llama.cpp permutes some families' q and k weights so that rotation pairs are adjacent ("normal" mode);
  // the others keep the Hugging Face (neox) layout.
  c.rope_mode = entry->gguf_rope_mode;
  if (const auto type = f.get_string(a + "rope.scaling.type")) {
    const float factor = (float)f.get_float(a + "rope.scaling.factor").value_or(1.0);
    if (*type == "linear") {
      c.rope_scaling.kind = ops::RopeScaling::Kind::Linear;
      c.rope_scaling.factor = factor;
    } else if (*type == "yarn") {
      c.rope_scaling.kind = ops::RopeScaling::Kind::Yarn;
      c.rope_scaling.factor = factor;
      c.rope_scaling.original_max_position =
          (int)f.get_int(a + "rope.scaling.original_context_length").value_or(c.max_positions);
      c.rope_attn_factor = 0.1f * std::log(factor) + 1.0f;
    } else if (*type != "none") {
      RBEE_THROW(ErrorCode::Unsupported, "{}: rope scaling '{}' is not supported", f.path(), *type);
    }
  }
  c.sliding_window = (int)f.get_int(a + "attention.sliding_window").value_or(0);
  c.attn_softcap = (float)f.get_float(a + "attn_logit_softcapping").value_or(0.0);
  c.final_softcap = (float)f.get_float(a + "final_logit_softcapping").value_or(0.0);
  if (entry->read_gguf) entry->read_gguf(f, a, c);
  // Vocabulary: the metadata value, else the token list, else the embedding's rows.
  if (const auto v = f.get_int(a + "vocab_size")) c.vocab_size = (int)*v;
  else if (const auto* tok = f.find("tokenizer.ggml.tokens")) c.vocab_size = (int)tok->array_size();
  else if (const auto* t = f.find_tensor("token_embd.weight")) c.vocab_size = (int)t->shape[0];
  c.tie_embeddings = f.find_tensor("output.weight") == nullptr;
  c.chat_template = f.get_string("tokenizer.chat_template").value_or("");
  c.pooling_type = (int)f.get_int(a + "pooling_type").value_or(-1);
  apply_arch_defaults(*entry, c);
  // norm_weight_plus_one stays false: where a family's norms multiply by (1 + w), llama.cpp's converter stored 1 + w.
  c.layer_is_local = local_layer_pattern(*entry, c.n_layers, c.sliding_window, 6);
  if (const gguf::Value* pattern = f.find(a + "attention.sliding_window_pattern"); pattern && c.sliding_window > 0) {
    c.layer_is_local = gguf_layer_pattern(*pattern, c.n_layers, f.path());
  }
  c.validate();
  return c;
}

ModelConfig config_from_hf(const nlohmann::json& j) {
  auto get_int = [&](const char* key, int fallback) { return hf_int(j, key, fallback); };
  auto get_float = [&](const char* key, double fallback) { return hf_float(j, key, fallback); };
  ModelConfig c;
  try {
    RBEE_CHECK(j.contains("model_type"), "config.json: model_type is missing");
    const std::string type = j.at("model_type").get<std::string>();
    const Architecture* entry = find_hf_architecture(type);
    RBEE_CHECK_CODE(entry != nullptr, ErrorCode::Unsupported, "config.json: model_type '{}' is not supported ({})",
                    type, hf_model_type_names());
    c.arch = entry->name;
    // A multimodal config holding the text model's config: read that one, as the text model type.
    const std::string& text_type = entry->hf_model_types.front();
    if (entry->hf_nested_text_config && type != text_type && j.contains("text_config")) {
      nlohmann::json text = j.at("text_config");
      text["model_type"] = text_type;
      return config_from_hf(text);
    }
    c.name = j.value("_name_or_path", c.arch);
    c.vocab_size = get_int("vocab_size", 0);
    c.hidden_size = get_int("hidden_size", 0);
    c.intermediate_size = get_int("intermediate_size", 0);
    c.n_layers = get_int("num_hidden_layers", 0);
    c.n_heads = get_int("num_attention_heads", 0);
    c.n_kv_heads = get_int("num_key_value_heads", c.n_heads);
    c.head_dim = get_int("head_dim", c.n_heads ? c.hidden_size / c.n_heads : 0);
    c.max_positions = get_int("max_position_embeddings", 4096);
    c.norm_eps = (float)get_float("rms_norm_eps", 1e-5);
    c.rope_theta = (float)get_float("rope_theta", 10000.0);
    c.rope_mode = RopeMode::Neox;  // Hugging Face layout
    c.rotary_dim = (int)std::lround(c.head_dim * get_float("partial_rotary_factor", 1.0));
    c.rotary_dim -= c.rotary_dim % 2;
    c.tie_embeddings = j.value("tie_word_embeddings", false);  // families that always tie say so in their traits
    c.attn_softcap = (float)get_float("attn_logit_softcapping", 0.0);
    c.final_softcap = (float)get_float("final_logit_softcapping", 0.0);
    if (j.contains("query_pre_attn_scalar") && !j["query_pre_attn_scalar"].is_null()) {
      c.attn_scale = 1.0f / std::sqrt((float)get_float("query_pre_attn_scalar", c.head_dim));
    }
    // Rotary settings. transformers < 5 writes rope_theta, rope_scaling and (Gemma 3) rope_local_base_freq;
    // transformers >= 5 writes one rope_parameters object {rope_type, rope_theta, factor, ...}, or for models
    // with two kinds of layers one per kind: {"full_attention": {...}, "sliding_attention": {...}}.
    const nlohmann::json* rope_global = nullptr;
    const nlohmann::json* rope_local = nullptr;
    if (const auto it = j.find("rope_parameters"); it != j.end() && it->is_object()) {
      if (it->contains("full_attention")) {
        rope_global = &it->at("full_attention");
        if (it->contains("sliding_attention")) rope_local = &it->at("sliding_attention");
      } else {
        rope_global = &*it;
      }
    }
    if (rope_global && rope_global->contains("rope_theta")) c.rope_theta = rope_global->at("rope_theta").get<float>();
    if (rope_global && rope_global->contains("partial_rotary_factor")) {
      c.rotary_dim = (int)std::lround(c.head_dim * rope_global->at("partial_rotary_factor").get<double>());
      c.rotary_dim -= c.rotary_dim % 2;
    }
    const nlohmann::json* scaling = nullptr;
    if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) scaling = &j["rope_scaling"];
    else if (rope_global) scaling = rope_global;
    if (scaling) {
      const auto& rs = *scaling;
      const std::string kind = rs.value("rope_type", rs.value("type", std::string("default")));
      const float factor = rs.value("factor", 1.0f);
      if (kind == "linear") {
        c.rope_scaling.kind = ops::RopeScaling::Kind::Linear;
        c.rope_scaling.factor = factor;
      } else if (kind == "llama3") {
        c.rope_scaling.kind = ops::RopeScaling::Kind::Llama3;
        c.rope_scaling.factor = factor;
        c.rope_scaling.low_freq_factor = rs.value("low_freq_factor", 1.0f);
        c.rope_scaling.high_freq_factor = rs.value("high_freq_factor", 4.0f);
        c.rope_scaling.original_max_position = rs.value("original_max_position_embeddings", 8192);
      } else if (kind == "yarn") {
        c.rope_scaling.kind = ops::RopeScaling::Kind::Yarn;
        c.rope_scaling.factor = factor;
        c.rope_scaling.original_max_position = rs.value("original_max_position_embeddings", c.max_positions);
        c.rope_scaling.beta_fast = rs.value("beta_fast", 32.0f);
        c.rope_scaling.beta_slow = rs.value("beta_slow", 1.0f);
        c.rope_attn_factor = rs.contains("attention_factor") && !rs["attention_factor"].is_null()
                                 ? rs["attention_factor"].get<float>()
                                 : 0.1f * std::log(factor) + 1.0f;
      } else if (kind != "default") {
        RBEE_THROW(ErrorCode::Unsupported, "config.json: rope_scaling type '{}' is not supported", kind);
      }
    }
    // The architecture's own keys (sliding window, local rope base), then its traits.
    if (entry->read_hf) entry->read_hf(HfConfig{j, rope_local}, c);
    apply_arch_defaults(*entry, c);
    c.norm_weight_plus_one = entry->hf_norm_weight_plus_one;
    if (j.contains("attention_bias")) c.qkv_bias = c.qkv_bias || j.value("attention_bias", false);
    const int pattern = get_int("sliding_window_pattern", 6);
    c.layer_is_local = local_layer_pattern(*entry, c.n_layers, c.sliding_window, pattern);
    if (j.contains("layer_types") && j["layer_types"].is_array() && (int)j["layer_types"].size() == c.n_layers) {
      for (int i = 0; i < c.n_layers; ++i) {
        c.layer_is_local[(size_t)i] = c.sliding_window > 0 && j["layer_types"][i] == "sliding_attention";
      }
    }
  } catch (const nlohmann::json::exception& e) {
    RBEE_THROW(ErrorCode::InvalidArgument, "config.json: {}", e.what());
  }
  c.validate();
  return c;
}

}  // namespace rbee::llm
