// SD UNet (rbee/sd/unet.h).
#include "rbee/sd/unet.h"

#include <cmath>
#include <set>
#include <span>

#include "rbee/backend/device.h"
#include "rbee/core/env.h"
#include "rbee/core/error.h"
#include "rbee/core/log.h"
#include "rbee/ops.h"
#include "sd/unet_blocks.h"
#include "sd/unet_time_projections.h"

namespace rbee::sd {

namespace {

// unet/config.json keys that diffusers' UNet2DConditionModel reads and that have no effect on inference with the
// blocks supported here (dropout; attention upcasting, which is always on: softmax sums in f32; options of the
// Simple* blocks and of the "text" addition embedding) or that are metadata.
const char* const kNoEffectKeys[] = {"_class_name", "_diffusers_version", "_name_or_path", "dropout",
                                     "upcast_attention", "resnet_skip_time_act", "resnet_out_scale_factor",
                                     "mid_block_only_cross_attention", "cross_attention_norm",
                                     "addition_embed_type_num_heads", "class_embeddings_concat", "_use_default_values"};

bool is_null_or_absent(const nlohmann::json& c, const char* key) { return !c.contains(key) || c[key].is_null(); }

// A bool-or-list-of-bools field (only_cross_attention) that is false everywhere.
bool all_false(const nlohmann::json& v) {
  if (v.is_null()) return true;
  if (v.is_boolean()) return !v.get<bool>();
  if (!v.is_array()) return false;
  for (const auto& x : v)
    if (!x.is_boolean() || x.get<bool>()) return false;
  return true;
}

// An int-or-list field that diffusers allows per level; rbee takes one value for all levels (a list of equal values
// is that value).
int64_t one_value(const nlohmann::json& c, const char* key, int64_t fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  const nlohmann::json& v = c[key];
  if (v.is_array()) {
    RBEE_CHECK(!v.empty() && v[0].is_number_integer(), "unet config: '{}' must be an integer or a list of integers", key);
    for (const auto& x : v)
      RBEE_CHECK_CODE(x == v[0], ErrorCode::Unsupported,
                      "unet config: '{}' = {} differs between levels, which is not supported", key, v.dump());
    return v[0].get<int64_t>();
  }
  RBEE_CHECK(v.is_number_integer(), "unet config: '{}' must be an integer", key);
  return v.get<int64_t>();
}

}  // namespace

UNetConfig UNetConfig::from_json(const nlohmann::json& c) {
  RBEE_CHECK(c.is_object(), "unet config: expected a JSON object");
  UNetConfig u;
  std::set<std::string> used(std::begin(kNoEffectKeys), std::end(kNoEffectKeys));
  auto mark = [&](const char* key) {
    used.insert(key);
    return c.contains(key) && !c[key].is_null();
  };
  auto integer = [&](const char* key, int64_t fallback, int64_t lo, int64_t hi) {
    if (!mark(key)) return fallback;
    RBEE_CHECK(c[key].is_number_integer(), "unet config: '{}' must be an integer", key);
    int64_t v = c[key].get<int64_t>();
    RBEE_CHECK(v >= lo && v <= hi, "unet config: '{}' = {} outside [{}, {}]", key, v, lo, hi);
    return v;
  };
  auto boolean = [&](const char* key, bool fallback) {
    if (!mark(key)) return fallback;
    RBEE_CHECK(c[key].is_boolean(), "unet config: '{}' must be true or false", key);
    return c[key].get<bool>();
  };
  auto number = [&](const char* key, double fallback) {
    if (!mark(key)) return fallback;
    RBEE_CHECK(c[key].is_number() && std::isfinite(c[key].get<double>()), "unet config: '{}' must be a number", key);
    return c[key].get<double>();
  };
  auto string = [&](const char* key, const char* fallback) -> std::string {
    if (!mark(key)) return fallback;
    RBEE_CHECK(c[key].is_string(), "unet config: '{}' must be a string", key);
    return c[key].get<std::string>();
  };
  // A field that must keep its default value (a feature not implemented): refused otherwise.
  auto refuse_unless = [&](const char* key, bool is_default, const char* what) {
    used.insert(key);
    RBEE_CHECK_CODE(is_default, ErrorCode::Unsupported, "unet config: {} {} ({}) is not supported", key,
                    c.contains(key) ? c[key].dump() : "", what);
  };

  u.in_channels = integer("in_channels", 4, 1, 64);
  u.out_channels = integer("out_channels", 4, 1, 64);
  used.insert("block_out_channels");
  RBEE_CHECK(c.contains("block_out_channels") && c["block_out_channels"].is_array() &&
                 !c["block_out_channels"].empty() && c["block_out_channels"].size() <= 8,
             "unet config: 'block_out_channels' must be a list of 1..8 integers");
  u.block_out_channels.clear();
  for (const auto& v : c["block_out_channels"]) {
    RBEE_CHECK(v.is_number_integer() && v.get<int64_t>() > 0 && v.get<int64_t>() <= 8192,
               "unet config: bad block_out_channels entry {}", v.dump());
    u.block_out_channels.push_back(v.get<int64_t>());
  }
  const size_t levels = u.block_out_channels.size();
  auto types = [&](const char* key, const char* cross, const char* plain) {
    used.insert(key);
    RBEE_CHECK(c.contains(key) && c[key].is_array() && c[key].size() == levels,
               "unet config: '{}' must list {} block types", key, levels);
    std::vector<bool> out;
    for (const auto& v : c[key]) {
      std::string t = v.is_string() ? v.get<std::string>() : v.dump();
      RBEE_CHECK_CODE(t == cross || t == plain, ErrorCode::Unsupported, "unet config: unsupported {} entry '{}'", key,
                      t);
      out.push_back(t == cross);
    }
    return out;
  };
  u.down_cross_attn = types("down_block_types", "CrossAttnDownBlock2D", "DownBlock2D");
  u.up_cross_attn = types("up_block_types", "CrossAttnUpBlock2D", "UpBlock2D");
  // diffusers: "At the moment it is not possible to define the number of attention heads via num_attention_heads"
  // (attention_head_dim holds the head counts, the legacy naming).
  refuse_unless("num_attention_heads", is_null_or_absent(c, "num_attention_heads"),
                "diffusers refuses it too; attention_head_dim holds the head counts");
  used.insert("attention_head_dim");
  u.heads.assign(levels, 8);
  if (c.contains("attention_head_dim") && c["attention_head_dim"].is_array()) {
    RBEE_CHECK(c["attention_head_dim"].size() == levels, "unet config: 'attention_head_dim' must have {} entries",
               levels);
    for (size_t i = 0; i < levels; ++i) {
      RBEE_CHECK(c["attention_head_dim"][i].is_number_integer(), "unet config: 'attention_head_dim' entries must be "
                 "integers");
      u.heads[i] = c["attention_head_dim"][i].get<int64_t>();
    }
  } else if (c.contains("attention_head_dim") && c["attention_head_dim"].is_number_integer()) {
    u.heads.assign(levels, c["attention_head_dim"].get<int64_t>());
  }
  for (size_t i = 0; i < levels; ++i)
    RBEE_CHECK(u.heads[i] > 0 && u.block_out_channels[i] % u.heads[i] == 0,
               "unet config: level {} has {} channels, not divisible by {} heads", i, u.block_out_channels[i],
               u.heads[i]);
  used.insert("layers_per_block");
  u.layers_per_block = (int)one_value(c, "layers_per_block", 2);
  RBEE_CHECK(u.layers_per_block >= 1 && u.layers_per_block <= 16, "unet config: 'layers_per_block' = {} outside "
             "[1, 16]", u.layers_per_block);
  if (mark("transformer_layers_per_block")) {
    const nlohmann::json& t = c["transformer_layers_per_block"];
    auto depth = [](const nlohmann::json& v) {
      RBEE_CHECK(v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= 64,
                 "unet config: transformer_layers_per_block entry {} must be an integer in [1, 64]", v.dump());
      return v.get<int>();
    };
    if (t.is_array()) {
      RBEE_CHECK(t.size() == levels, "unet config: 'transformer_layers_per_block' must have {} entries, has {}",
                 levels, t.size());
      for (const auto& v : t) {
        RBEE_CHECK_CODE(!v.is_array(), ErrorCode::Unsupported,
                        "unet config: per-resnet transformer_layers_per_block lists are not supported");
        u.transformer_layers_per_level.push_back(depth(v));
      }
    } else {
      u.transformer_layers = depth(t);
    }
  }
  refuse_unless("reverse_transformer_layers_per_block", is_null_or_absent(c, "reverse_transformer_layers_per_block"),
                "separate up-block transformer depths");
  used.insert("cross_attention_dim");
  RBEE_CHECK(c.contains("cross_attention_dim") && !c["cross_attention_dim"].is_null(),
             "unet config: 'cross_attention_dim' must be an integer");
  u.cross_attention_dim = one_value(c, "cross_attention_dim", 768);
  RBEE_CHECK(u.cross_attention_dim >= 1 && u.cross_attention_dim <= (1 << 16),
             "unet config: 'cross_attention_dim' = {} outside [1, 65536]", u.cross_attention_dim);
  used.insert("norm_num_groups");
  RBEE_CHECK_CODE(!c.contains("norm_num_groups") || !c["norm_num_groups"].is_null(), ErrorCode::Unsupported,
                  "unet config: norm_num_groups null (no output norm) is not supported");
  u.norm_num_groups = (int)integer("norm_num_groups", 32, 1, 1024);
  u.norm_eps = (float)number("norm_eps", 1e-5);
  u.use_linear_projection = boolean("use_linear_projection", false);
  u.flip_sin_to_cos = boolean("flip_sin_to_cos", true);
  u.freq_shift = number("freq_shift", 0.0);
  u.downsample_padding = (int)integer("downsample_padding", 1, 0, 1);
  // An [h, w] sample_size is not what the SD pipelines multiply by the VAE scale: no default size then.
  if (c.contains("sample_size") && c["sample_size"].is_array()) used.insert("sample_size");
  else u.sample_size = integer("sample_size", 0, 1, 1 << 16);
  u.center_input_sample = boolean("center_input_sample", false);
  u.mid_block_scale_factor = number("mid_block_scale_factor", 1.0);
  RBEE_CHECK(u.mid_block_scale_factor > 0, "unet config: mid_block_scale_factor must be positive");
  u.conv_in_kernel = (int)integer("conv_in_kernel", 3, 1, 15);
  u.conv_out_kernel = (int)integer("conv_out_kernel", 3, 1, 15);
  RBEE_CHECK(u.conv_in_kernel % 2 == 1 && u.conv_out_kernel % 2 == 1,
             "unet config: conv_in_kernel / conv_out_kernel must be odd (diffusers pads (k - 1) / 2)");
  u.time_embedding_dim = integer("time_embedding_dim", 0, 1, 1 << 16);

  used.insert("mid_block_type");
  if (!c.contains("mid_block_type")) {
    u.mid_block = MidBlock::CrossAttn;  // diffusers' default
  } else if (c["mid_block_type"].is_null()) {
    u.mid_block = MidBlock::None;
  } else {
    const std::string t = c["mid_block_type"].is_string() ? c["mid_block_type"].get<std::string>() : "";
    RBEE_CHECK_CODE(t == "UNetMidBlock2DCrossAttn" || t == "UNetMidBlock2D", ErrorCode::Unsupported,
                    "unet config: mid_block_type {} is not supported", c["mid_block_type"].dump());
    u.mid_block = t == "UNetMidBlock2D" ? MidBlock::Plain : MidBlock::CrossAttn;
  }
  const std::string shift = string("resnet_time_scale_shift", "default");
  RBEE_CHECK_CODE(shift == "default" || shift == "scale_shift", ErrorCode::Unsupported,
                  "unet config: resnet_time_scale_shift '{}' is not supported (default, scale_shift)", shift);
  u.time_scale_shift = shift == "scale_shift";
  const std::string temb_type = string("time_embedding_type", "positional");
  RBEE_CHECK_CODE(temb_type == "positional", ErrorCode::Unsupported,
                  "unet config: time_embedding_type '{}' is not supported (only positional)", temb_type);
  const std::string act = string("act_fn", "silu");
  RBEE_CHECK_CODE(act == "silu", ErrorCode::Unsupported, "unet config: act_fn '{}' is not supported", act);
  const std::string attn_type = string("attention_type", "default");
  RBEE_CHECK_CODE(attn_type == "default", ErrorCode::Unsupported,
                  "unet config: attention_type '{}' is not supported (only default)", attn_type);

  if (mark("addition_embed_type")) {
    RBEE_CHECK_CODE(c["addition_embed_type"] == "text_time", ErrorCode::Unsupported,
                    "unet config: addition_embed_type {} is not supported (only \"text_time\")",
                    c["addition_embed_type"].dump());
    u.text_time = true;
    RBEE_CHECK(c.contains("addition_time_embed_dim") && c["addition_time_embed_dim"].is_number_integer(),
               "unet config: text_time needs an integer 'addition_time_embed_dim'");
    u.addition_time_embed_dim = integer("addition_time_embed_dim", 0, 2, 1 << 16);
    RBEE_CHECK(u.addition_time_embed_dim % 2 == 0, "unet config: addition_time_embed_dim {} must be even",
               u.addition_time_embed_dim);
    RBEE_CHECK(c.contains("projection_class_embeddings_input_dim") &&
                   c["projection_class_embeddings_input_dim"].is_number_integer(),
               "unet config: text_time needs an integer 'projection_class_embeddings_input_dim'");
    u.projection_class_embeddings_input_dim = integer("projection_class_embeddings_input_dim", 0, 1, 1 << 20);
  }
  used.insert("addition_time_embed_dim");
  used.insert("projection_class_embeddings_input_dim");  // read by text_time (and by class embeddings, refused)
  refuse_unless("only_cross_attention", !c.contains("only_cross_attention") || all_false(c["only_cross_attention"]),
                "self-attention layers that attend to the text");
  refuse_unless("dual_cross_attention", !c.contains("dual_cross_attention") || all_false(c["dual_cross_attention"]),
                "two cross-attention transformers");
  for (const char* key : {"encoder_hid_dim", "encoder_hid_dim_type"})
    refuse_unless(key, is_null_or_absent(c, key), "a projection of the text embeddings");
  for (const char* key : {"class_embed_type", "num_class_embeds"})
    refuse_unless(key, is_null_or_absent(c, key), "class-label conditioning");
  refuse_unless("time_embedding_act_fn", is_null_or_absent(c, "time_embedding_act_fn"),
                "an activation after the timestep embedding");
  refuse_unless("timestep_post_act", is_null_or_absent(c, "timestep_post_act"),
                "an activation inside the timestep embedding");
  refuse_unless("time_cond_proj_dim", is_null_or_absent(c, "time_cond_proj_dim"),
                "LCM's guidance embedding");

  std::string ignored;
  for (auto it = c.begin(); it != c.end(); ++it)
    if (!used.count(it.key())) ignored += (ignored.empty() ? "" : ", ") + it.key();
  if (!ignored.empty()) log::warn("unet config: fields diffusers does not read either, ignored: {}", ignored);
  return u;
}

int UNetConfig::transformer_depth(size_t level) const {
  if (transformer_layers_per_level.empty()) return transformer_layers;
  RBEE_CHECK(level < transformer_layers_per_level.size(), "unet config: no transformer depth for level {} of {}", level,
             transformer_layers_per_level.size());
  return transformer_layers_per_level[level];
}

namespace {

// diffusers' get_timestep_embedding of one value: [cos | sin] (flip_sin_to_cos) or [sin | cos] of value * freq_i,
// freq_i = exp(-ln(10000) * i / (dim / 2 - shift)), i < dim / 2, in f32; `out` receives dim values.
void sinusoid(double value, int64_t dim, bool flip, double shift, float* out) {
  const int64_t half = dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    float freq = std::exp(-std::log(10000.0f) * (float)i / (float)((double)half - shift));
    float arg = (float)value * freq;
    float s = std::sin(arg), c = std::cos(arg);
    out[i] = flip ? c : s;
    out[half + i] = flip ? s : c;
  }
  if (dim % 2) out[dim - 1] = 0.0f;  // odd widths pad one zero, as diffusers does
}

struct Level {
  std::vector<blocks::Resnet> resnets;
  std::vector<blocks::SpatialTransformer> attentions;  // empty for blocks without cross-attention
  bool has_down = false, has_up = false;
  blocks::Downsample down;
  blocks::Upsample up;
};

}  // namespace

struct UNet::Impl {
  UNetConfig cfg;
  nn::Linear time1, time2;
  nn::Linear add1, add2;  // text_time add_embedding
  nn::Conv2d conv_in, conv_out;
  nn::Norm norm_out;
  std::vector<Level> down, up;
  blocks::Resnet mid_res0, mid_res1;
  blocks::SpatialTransformer mid_attn;
  // Activations NHWC between conv_in and conv_out (nn::channels_last_for): the sample is permuted once on the way
  // in and the prediction once on the way out.
  bool channels_last = false;
  // Transformer blocks over all spatial transformers (the length of ContextProjections' lists).
  size_t cross_blocks = 0;
  // The resnets' time projections as one product (defined unless RBEE_SD_TIME_PROJ_FUSED=0 or the weights could
  // not be concatenated): its outputs are in resnets() order.
  FusedTimeProjections time_projs;

  // The resnets in the order denoise() runs them: down levels, mid block, up levels.
  std::vector<blocks::Resnet*> resnets() {
    std::vector<blocks::Resnet*> out;
    for (Level& L : down)
      for (blocks::Resnet& r : L.resnets) out.push_back(&r);
    if (cfg.mid_block != UNetConfig::MidBlock::None) out.push_back(&mid_res0);
    if (cfg.mid_block == UNetConfig::MidBlock::CrossAttn) out.push_back(&mid_res1);
    for (Level& L : up)
      for (blocks::Resnet& r : L.resnets) out.push_back(&r);
    return out;
  }

  // The spatial transformers in the order denoise() runs them: down levels, mid block, up levels.
  std::vector<const blocks::SpatialTransformer*> transformers() const {
    std::vector<const blocks::SpatialTransformer*> out;
    for (const Level& L : down)
      for (const blocks::SpatialTransformer& t : L.attentions) out.push_back(&t);
    if (cfg.mid_block == UNetConfig::MidBlock::CrossAttn) out.push_back(&mid_attn);
    for (const Level& L : up)
      for (const blocks::SpatialTransformer& t : L.attentions) out.push_back(&t);
    return out;
  }

  void to_channels_last() {
    conv_in.to_channels_last();
    conv_out.to_channels_last();
    norm_out.channels_last = true;
    for (std::vector<Level>* levels : {&down, &up})
      for (Level& L : *levels) {
        for (blocks::Resnet& r : L.resnets) r.to_channels_last();
        for (blocks::SpatialTransformer& t : L.attentions) t.to_channels_last();
        if (L.has_down) L.down.to_channels_last();
        if (L.has_up) L.up.to_channels_last();
      }
    if (cfg.mid_block != UNetConfig::MidBlock::None) mid_res0.to_channels_last();
    if (cfg.mid_block == UNetConfig::MidBlock::CrossAttn) {
      mid_attn.to_channels_last();
      mid_res1.to_channels_last();
    }
    channels_last = true;
  }
};

UNet UNet::load(const Weights& w, const UNetConfig& cfg) {
  auto impl = std::make_shared<Impl>();
  impl->cfg = cfg;
  const auto& ch = cfg.block_out_channels;
  const int levels = (int)ch.size();
  const int64_t temb = cfg.time_embedding_dim > 0 ? cfg.time_embedding_dim : ch[0] * 4;
  const int g = cfg.norm_num_groups;
  const float eps = cfg.norm_eps;
  impl->time1 = nn::Linear::load(w, "time_embedding.linear_1", ch[0], temb);
  impl->time2 = nn::Linear::load(w, "time_embedding.linear_2", temb, temb);
  if (cfg.text_time) {
    impl->add1 = nn::Linear::load(w, "add_embedding.linear_1", cfg.projection_class_embeddings_input_dim, temb);
    impl->add2 = nn::Linear::load(w, "add_embedding.linear_2", temb, temb);
  }
  impl->conv_in = nn::Conv2d::load(w, "conv_in", cfg.in_channels, ch[0], cfg.conv_in_kernel);
  auto resnet = [&](const Weights& b, int64_t in, int64_t out, double output_scale = 1.0) {
    return blocks::Resnet::load(b, in, out, temb, g, eps, cfg.time_scale_shift, output_scale);
  };
  auto transformer = [&](const Weights& b, int64_t c, int64_t heads, int depth) {
    return blocks::SpatialTransformer::load(b, c, heads, cfg.cross_attention_dim, depth, g, cfg.use_linear_projection);
  };
  int64_t out_ch = ch[0];
  for (int i = 0; i < levels; ++i) {
    Weights b = w.sub("down_blocks." + std::to_string(i) + ".");
    int64_t in_ch = out_ch;
    out_ch = ch[(size_t)i];
    Level L;
    for (int j = 0; j < cfg.layers_per_block; ++j) {
      L.resnets.push_back(resnet(b.sub("resnets." + std::to_string(j) + "."), j == 0 ? in_ch : out_ch, out_ch));
      if (cfg.down_cross_attn[(size_t)i])
        L.attentions.push_back(transformer(b.sub("attentions." + std::to_string(j) + "."), out_ch, cfg.heads[(size_t)i],
                                           cfg.transformer_depth((size_t)i)));
    }
    if (i < levels - 1) {
      L.down = blocks::Downsample::load(b.sub("downsamplers.0."), out_ch, cfg.downsample_padding);
      L.has_down = true;
    }
    impl->down.push_back(std::move(L));
  }
  const int64_t top = ch.back();
  const double mid_scale = cfg.mid_block_scale_factor;
  if (cfg.mid_block != UNetConfig::MidBlock::None)
    impl->mid_res0 = resnet(w.sub("mid_block.resnets.0."), top, top, mid_scale);
  if (cfg.mid_block == UNetConfig::MidBlock::CrossAttn) {
    impl->mid_attn = transformer(w.sub("mid_block.attentions.0."), top, cfg.heads.back(),
                                 cfg.transformer_depth((size_t)levels - 1));
    impl->mid_res1 = resnet(w.sub("mid_block.resnets.1."), top, top, mid_scale);
  }
  out_ch = top;
  for (int i = 0; i < levels; ++i) {
    Weights b = w.sub("up_blocks." + std::to_string(i) + ".");
    const size_t rev = (size_t)(levels - 1 - i);
    int64_t prev = out_ch;
    out_ch = ch[rev];
    int64_t in_ch = ch[(size_t)std::max(0, levels - 2 - i)];
    Level L;
    for (int j = 0; j <= cfg.layers_per_block; ++j) {
      int64_t skip = j == cfg.layers_per_block ? in_ch : out_ch;
      int64_t res_in = j == 0 ? prev : out_ch;
      L.resnets.push_back(resnet(b.sub("resnets." + std::to_string(j) + "."), res_in + skip, out_ch));
      if (cfg.up_cross_attn[(size_t)i])
        L.attentions.push_back(
            transformer(b.sub("attentions." + std::to_string(j) + "."), out_ch, cfg.heads[rev], cfg.transformer_depth(rev)));
    }
    if (i < levels - 1) {
      L.up = blocks::Upsample::load(b.sub("upsamplers.0."), out_ch);
      L.has_up = true;
    }
    impl->up.push_back(std::move(L));
  }
  impl->norm_out = nn::Norm::group(w, "conv_norm_out", ch[0], g, eps);
  impl->conv_out = nn::Conv2d::load(w, "conv_out", ch[0], cfg.out_channels, cfg.conv_out_kernel);
  for (const blocks::SpatialTransformer* t : impl->transformers()) impl->cross_blocks += t->blocks.size();
  if (env::flag_or("RBEE_SD_TIME_PROJ_FUSED", true)) impl->time_projs = FusedTimeProjections::build(impl->resnets());
  if (nn::channels_last_for(impl->conv_in.w.device())) {
    impl->to_channels_last();
    log::debug("unet: activations channels last (NHWC) on {}", impl->conv_in.w.device().id());
  }
  UNet u;
  u.impl_ = std::move(impl);
  return u;
}

const UNetConfig& UNet::config() const { return impl_->cfg; }

Tensor UNet::forward(const Tensor& sample, double timestep, const Tensor& context) const {
  RBEE_CHECK(!impl_->cfg.text_time, "unet: this UNet (addition_embed_type text_time, SDXL) needs text_embeds and time_ids");
  return forward(sample, timestep, context, AddedConditions{});
}

Tensor UNet::forward(const Tensor& sample, double timestep, const Tensor& context, const AddedConditions& added) const {
  RBEE_CHECK(sample.rank() == 4, "unet: sample must be [B, {}, H, W], got {}", impl_->cfg.in_channels,
             sample.shape().to_string());
  return denoise(sample, condition(sample.dim(0), timestep, added, sample.device()), context);
}

UNet::Conditioning UNet::condition(int64_t B, double timestep, const AddedConditions& added, Device& dev) const {
  const Impl& m = *impl_;
  const UNetConfig& cfg = m.cfg;
  RBEE_CHECK(B > 0, "unet: batch {} must be positive", B);
  RBEE_CHECK(std::isfinite(timestep), "unet: timestep must be finite");
  // Sinusoidal timestep embedding [B, ch0]: [cos | sin] when flip_sin_to_cos, frequencies
  // exp(-ln(10000) * i / (half - freq_shift)), computed in f32 as diffusers does.
  const int64_t ch0 = cfg.block_out_channels[0];
  std::vector<float> emb((size_t)ch0, 0.0f);
  sinusoid(timestep, ch0, cfg.flip_sin_to_cos, cfg.freq_shift, emb.data());
  // Activations in the conv weights' dtype (nn::act_dtype: 16-bit on GPUs with 16-bit weights); the embeddings are
  // computed in f32 and then cast, and the prediction comes back in F32, as diffusers does in fp16.
  const DType act = m.conv_in.w.dtype();
  auto to_act = [&](const Tensor& v) { return v.dtype() == act ? v : ops::cast(v, act); };
  Conditioning c;
  c.t = to_act(Tensor::from_vector(emb, {1, ch0}, dev).expand({B, ch0}).contiguous());
  if (cfg.text_time) {
    // SDXL: add_embedding(concat(text_embeds, sinusoid of each time id)) joins the timestep embedding.
    const Tensor& te = added.text_embeds;
    const Tensor& ids = added.time_ids;
    RBEE_CHECK(ids.defined() && ids.rank() == 2 && ids.dim(0) == B && ids.dim(1) >= 1,
               "unet: time_ids must be [{}, N], got {}", B, ids.defined() ? ids.shape().to_string() : "none");
    const int64_t n = ids.dim(1), d = cfg.addition_time_embed_dim;
    const int64_t text_dim = cfg.projection_class_embeddings_input_dim - n * d;
    RBEE_CHECK(text_dim >= 1 && te.defined() && te.rank() == 2 && te.dim(0) == B && te.dim(1) == text_dim,
               "unet: text_embeds must be [{}, {}] (projection_class_embeddings_input_dim {} - {} time ids x {}), got {}",
               B, text_dim, cfg.projection_class_embeddings_input_dim, n, d,
               te.defined() ? te.shape().to_string() : "none");
    RBEE_CHECK(ids.dtype() == DType::F32 && te.dtype() == DType::F32, "unet: text_embeds and time_ids must be f32");
    std::vector<float> host = ids.to(Registry::global().cpu()).contiguous().to_vector<float>();
    std::vector<float> temb_ids((size_t)(B * n * d));
    for (size_t k = 0; k < host.size(); ++k) {
      RBEE_CHECK(std::isfinite(host[k]), "unet: time_ids[{}] is not finite", k);
      sinusoid(host[k], d, cfg.flip_sin_to_cos, cfg.freq_shift, temb_ids.data() + k * (size_t)d);
    }
    Tensor time_emb = Tensor::from_vector(temb_ids, {B, n * d}, dev);
    c.add_in = to_act(nn::concat(te.to(dev).contiguous(), time_emb, 1));
  }
  return c;
}

UNet::ContextProjections UNet::project_context(const Tensor& context) const {
  const Impl& m = *impl_;
  RBEE_CHECK(context.defined() && context.rank() == 3 && context.dim(2) == m.cfg.cross_attention_dim,
             "unet: context must be [B, S, {}], got {}", m.cfg.cross_attention_dim,
             context.defined() ? context.shape().to_string() : "none");
  const DType act = m.conv_in.w.dtype();
  const Tensor ctx = context.dtype() == act ? context : ops::cast(context, act);
  ContextProjections kv;
  kv.keys.reserve(m.cross_blocks);
  kv.values.reserve(m.cross_blocks);
  for (const blocks::SpatialTransformer* t : m.transformers()) t->project_context(ctx, kv.keys, kv.values);
  return kv;
}

Tensor UNet::denoise(const Tensor& sample, const Conditioning& cond, const Tensor& context) const {
  RBEE_CHECK(sample.rank() == 4 && context.rank() == 3 && context.dim(0) == sample.dim(0),
             "unet: context must be [{}, S, {}], got {}", sample.rank() == 4 ? sample.dim(0) : 0,
             impl_->cfg.cross_attention_dim, context.shape().to_string());
  return denoise(sample, cond, project_context(context));
}

Tensor UNet::denoise(const Tensor& sample, const Conditioning& cond, const ContextProjections& kv) const {
  const Impl& m = *impl_;
  const UNetConfig& cfg = m.cfg;
  RBEE_CHECK(sample.rank() == 4 && sample.dim(1) == cfg.in_channels,
             "unet: sample must be [B, {}, H, W], got {}", cfg.in_channels, sample.shape().to_string());
  RBEE_CHECK(sample.dim(2) > 0 && sample.dim(3) > 0, "unet: latent size {}x{} must be positive", sample.dim(2),
             sample.dim(3));
  RBEE_CHECK(kv.keys.size() == m.cross_blocks && kv.values.size() == m.cross_blocks,
             "unet: {} context keys and {} values for {} transformer blocks", kv.keys.size(), kv.values.size(),
             m.cross_blocks);
  for (size_t i = 0; i < m.cross_blocks; ++i)
    RBEE_CHECK(kv.keys[i].rank() == 3 && kv.keys[i].dim(0) == sample.dim(0) && kv.values[i].rank() == 3 &&
                   kv.values[i].dim(0) == sample.dim(0),
               "unet: context projection {} must have one row per sample ({}), got {}", i, sample.dim(0),
               kv.keys[i].shape().to_string());
  RBEE_CHECK(cond.t.defined() && cond.t.rank() == 2 && cond.t.dim(0) == sample.dim(0),
             "unet: the timestep conditioning must have one row per sample ({})", sample.dim(0));
  RBEE_CHECK(!cfg.text_time || cond.add_in.defined(), "unet: a text_time UNet needs its added conditioning");
  const DType act = m.conv_in.w.dtype();
  auto to_act = [&](const Tensor& v) { return v.dtype() == act ? v : ops::cast(v, act); };
  Tensor temb = m.time2(ops::silu(m.time1(cond.t)));
  if (cfg.text_time) temb = ops::add(temb, m.add2(ops::silu(m.add1(cond.add_in))));
  // The resnets take their time projections, and the transformers their blocks' context keys and values, in run
  // order.
  const std::vector<Tensor> time_proj = m.time_projs.defined() ? m.time_projs(temb) : std::vector<Tensor>();
  size_t next_resnet = 0;
  auto resnet = [&](const blocks::Resnet& r, const Tensor& h) {
    const size_t at = next_resnet++;
    return m.time_projs.defined() ? r.with_time(h, time_proj[at]) : r(h, temb);
  };
  size_t next_kv = 0;
  auto transformer = [&](const blocks::SpatialTransformer& t, const Tensor& h) {
    const std::span<const Tensor> keys(kv.keys), values(kv.values);
    const size_t n = t.blocks.size(), at = next_kv;
    next_kv += n;
    return t(h, keys.subspan(at, n), values.subspan(at, n));
  };

  const Tensor input = to_act(cfg.center_input_sample ? ops::affine(sample, 2.0, -1.0) : sample);
  Tensor x = m.conv_in(m.channels_last ? nn::to_nhwc(input) : input);
  const int channel_axis = m.channels_last ? 3 : 1, row_axis = m.channels_last ? 1 : 2;
  std::vector<Tensor> skips{x};
  for (const Level& L : m.down) {
    for (size_t j = 0; j < L.resnets.size(); ++j) {
      x = resnet(L.resnets[j], x);
      if (!L.attentions.empty()) x = transformer(L.attentions[j], x);
      skips.push_back(x);
    }
    if (L.has_down) {
      x = L.down(x);
      skips.push_back(x);
    }
  }
  if (cfg.mid_block != UNetConfig::MidBlock::None) x = resnet(m.mid_res0, x);
  if (cfg.mid_block == UNetConfig::MidBlock::CrossAttn) {
    x = transformer(m.mid_attn, x);
    x = resnet(m.mid_res1, x);
  }
  for (const Level& L : m.up) {
    for (size_t j = 0; j < L.resnets.size(); ++j) {
      x = nn::concat(x, skips.back(), channel_axis);
      skips.pop_back();
      x = resnet(L.resnets[j], x);
      if (!L.attentions.empty()) x = transformer(L.attentions[j], x);
    }
    // Upsample to the size of the skip it meets next: 2x, or 2x - 1 where a stride-2 convolution rounded an
    // odd side up (diffusers' forward_upsample_size).
    if (L.has_up) x = L.up(x, skips.back().dim(row_axis), skips.back().dim(row_axis + 1));
  }
  Tensor out = m.conv_out(m.norm_out.silu(x));
  if (m.channels_last) out = nn::to_nchw(out);
  return out.dtype() == DType::F32 ? out : ops::cast(out, DType::F32);
}

}  // namespace rbee::sd
