// CLIP text transformer (rbee/sd/clip_text_model.h).
#include "rbee/sd/clip_text_model.h"

#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "sd/nn.h"

namespace rbee::sd {

ClipTextConfig ClipTextConfig::from_json(const nlohmann::json& c) {
  RBEE_CHECK(c.is_object(), "clip text config: expected a JSON object");
  auto integer = [&](const char* key, int64_t lo, int64_t hi) {
    RBEE_CHECK(c.contains(key) && c[key].is_number_integer(), "clip text config: '{}' must be an integer", key);
    int64_t v = c[key].get<int64_t>();
    RBEE_CHECK(v >= lo && v <= hi, "clip text config: '{}' = {} outside [{}, {}]", key, v, lo, hi);
    return v;
  };
  ClipTextConfig cfg;
  cfg.vocab_size = integer("vocab_size", 1, 1 << 22);
  cfg.hidden_size = integer("hidden_size", 1, 1 << 16);
  cfg.intermediate_size = integer("intermediate_size", 1, 1 << 18);
  cfg.num_layers = (int)integer("num_hidden_layers", 1, 256);
  cfg.num_heads = (int)integer("num_attention_heads", 1, 1024);
  cfg.max_positions = integer("max_position_embeddings", 1, 1 << 16);
  RBEE_CHECK(cfg.hidden_size % cfg.num_heads == 0, "clip text config: hidden_size {} not divisible by {} heads",
             cfg.hidden_size, cfg.num_heads);
  if (c.contains("layer_norm_eps") && c["layer_norm_eps"].is_number()) cfg.layer_norm_eps = c["layer_norm_eps"].get<float>();
  std::string act = c.value("hidden_act", std::string("quick_gelu"));
  RBEE_CHECK(act == "quick_gelu" || act == "gelu", "clip text config: unsupported hidden_act '{}'", act);
  cfg.quick_gelu = act == "quick_gelu";
  if (c.contains("projection_dim") && c["projection_dim"].is_number_integer())
    cfg.projection_dim = c["projection_dim"].get<int64_t>();
  if (c.contains("architectures") && c["architectures"].is_array())
    for (const auto& a : c["architectures"])
      if (a == "CLIPTextModelWithProjection") cfg.with_projection = true;
  RBEE_CHECK(!cfg.with_projection || (cfg.projection_dim >= 1 && cfg.projection_dim <= (1 << 16)),
             "clip text config: CLIPTextModelWithProjection needs 'projection_dim' in [1, 65536], got {}",
             cfg.projection_dim);
  return cfg;
}

namespace {
struct Layer {
  nn::Norm ln1, ln2;
  nn::Linear q, k, v, o, fc1, fc2;
};
}  // namespace

struct ClipTextModel::Impl {
  ClipTextConfig cfg;
  Tensor token_embedding;     // [vocab, hidden] F32
  Tensor position_embedding;  // [max_positions, hidden] F32
  std::vector<Layer> layers;
  nn::Norm final_ln;
  nn::Linear projection;  // defined when projection_dim > 0 and the checkpoint has text_projection
  bool has_projection = false;
};

ClipTextModel ClipTextModel::load(const Weights& weights, const ClipTextConfig& cfg) {
  auto impl = std::make_shared<Impl>();
  impl->cfg = cfg;
  const int64_t h = cfg.hidden_size;
  // transformers before 5.0 saved CLIPTextModel under "text_model."; newer versions save the same names bare.
  Weights m = weights.has("text_model.embeddings.token_embedding.weight") ? weights.sub("text_model.") : weights;
  impl->token_embedding = m.get_f32("embeddings.token_embedding.weight", {cfg.vocab_size, h});
  impl->position_embedding = m.get_f32("embeddings.position_embedding.weight", {cfg.max_positions, h});
  for (int i = 0; i < cfg.num_layers; ++i) {
    Weights l = m.sub("encoder.layers." + std::to_string(i) + ".");
    Layer L;
    L.ln1 = nn::Norm::layer(l, "layer_norm1", h, cfg.layer_norm_eps);
    L.ln2 = nn::Norm::layer(l, "layer_norm2", h, cfg.layer_norm_eps);
    L.q = nn::Linear::load(l, "self_attn.q_proj", h, h);
    L.k = nn::Linear::load(l, "self_attn.k_proj", h, h);
    L.v = nn::Linear::load(l, "self_attn.v_proj", h, h);
    L.o = nn::Linear::load(l, "self_attn.out_proj", h, h);
    L.fc1 = nn::Linear::load(l, "mlp.fc1", h, cfg.intermediate_size);
    L.fc2 = nn::Linear::load(l, "mlp.fc2", cfg.intermediate_size, h);
    impl->layers.push_back(std::move(L));
  }
  impl->final_ln = nn::Norm::layer(m, "final_layer_norm", h, cfg.layer_norm_eps);
  if (cfg.with_projection || (cfg.projection_dim > 0 && weights.has("text_projection.weight"))) {
    impl->projection = nn::Linear::load(weights, "text_projection", h, cfg.projection_dim, false);
    impl->has_projection = true;
  }
  ClipTextModel model;
  model.impl_ = std::move(impl);
  return model;
}

const ClipTextConfig& ClipTextModel::config() const { return impl_->cfg; }

ClipTextOutput ClipTextModel::forward(const std::vector<std::vector<int32_t>>& ids) const {
  const ClipTextConfig& cfg = impl_->cfg;
  RBEE_CHECK(!ids.empty(), "clip text model: no input rows");
  const int64_t B = (int64_t)ids.size(), T = (int64_t)ids[0].size();
  RBEE_CHECK(T >= 1 && T <= cfg.max_positions, "clip text model: {} tokens per row, expected 1..{}", T,
             cfg.max_positions);
  std::vector<int32_t> flat;
  std::vector<int64_t> eos_pos;
  for (const auto& row : ids) {
    RBEE_CHECK((int64_t)row.size() == T, "clip text model: rows differ in length ({} vs {})", row.size(), T);
    int64_t best = 0;
    for (int64_t t = 0; t < T; ++t) {
      RBEE_CHECK(row[(size_t)t] >= 0 && row[(size_t)t] < cfg.vocab_size, "clip text model: token id {} outside [0, {})",
                 row[(size_t)t], cfg.vocab_size);
      if (row[(size_t)t] > row[(size_t)best]) best = t;
    }
    eos_pos.push_back(best);
    flat.insert(flat.end(), row.begin(), row.end());
  }
  Device& dev = impl_->token_embedding.device();
  Tensor id_t = Tensor::from_vector(flat, {B * T}, dev);
  Tensor x = ops::index_select(impl_->token_embedding, id_t, 0).view({B, T, cfg.hidden_size});
  x = ops::add(x, impl_->position_embedding.narrow(0, 0, T));
  ClipTextOutput out;
  for (size_t i = 0; i < impl_->layers.size(); ++i) {
    const Layer& L = impl_->layers[i];
    if ((int)i == cfg.num_layers - 1) out.penultimate = x;
    Tensor h = L.ln1(x);
    Tensor a = nn::mha(L.q(h), L.k(h), L.v(h), cfg.num_heads, /*causal=*/true);
    x = ops::add(x, L.o(a));
    h = L.fc1(L.ln2(x));
    h = cfg.quick_gelu ? nn::quick_gelu(h) : ops::gelu(h, /*tanh_approximation=*/false);
    x = ops::add(x, L.fc2(h));
  }
  out.last_hidden = impl_->final_ln(x);
  Tensor pooled = Tensor::empty({B, cfg.hidden_size}, DType::F32, dev);
  for (int64_t b = 0; b < B; ++b) pooled.select(0, b).copy_from(out.last_hidden.select(0, b).select(0, eos_pos[(size_t)b]));
  out.pooled = impl_->has_projection ? impl_->projection(pooled) : pooled;
  return out;
}

}  // namespace rbee::sd
