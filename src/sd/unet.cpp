// SD UNet (rbee/sd/unet.h).
#include "rbee/sd/unet.h"

#include <cmath>

#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "sd/unet_blocks.h"

namespace rbee::sd {

UNetConfig UNetConfig::from_json(const nlohmann::json& c) {
  RBEE_CHECK(c.is_object(), "unet config: expected a JSON object");
  UNetConfig u;
  auto integer = [&](const char* key, int64_t fallback, int64_t lo, int64_t hi) {
    if (!c.contains(key) || c[key].is_null()) return fallback;
    RBEE_CHECK(c[key].is_number_integer(), "unet config: '{}' must be an integer", key);
    int64_t v = c[key].get<int64_t>();
    RBEE_CHECK(v >= lo && v <= hi, "unet config: '{}' = {} outside [{}, {}]", key, v, lo, hi);
    return v;
  };
  u.in_channels = integer("in_channels", 4, 1, 64);
  u.out_channels = integer("out_channels", 4, 1, 64);
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
  const char* heads_key = c.contains("num_attention_heads") && !c["num_attention_heads"].is_null()
                              ? "num_attention_heads"
                              : "attention_head_dim";
  u.heads.assign(levels, 8);
  if (c.contains(heads_key) && c[heads_key].is_array()) {
    RBEE_CHECK(c[heads_key].size() == levels, "unet config: '{}' must have {} entries", heads_key, levels);
    for (size_t i = 0; i < levels; ++i) u.heads[i] = c[heads_key][i].get<int64_t>();
  } else if (c.contains(heads_key) && c[heads_key].is_number_integer()) {
    u.heads.assign(levels, c[heads_key].get<int64_t>());
  }
  for (size_t i = 0; i < levels; ++i)
    RBEE_CHECK(u.heads[i] > 0 && u.block_out_channels[i] % u.heads[i] == 0,
               "unet config: level {} has {} channels, not divisible by {} heads", i, u.block_out_channels[i],
               u.heads[i]);
  u.layers_per_block = (int)integer("layers_per_block", 2, 1, 16);
  if (c.contains("transformer_layers_per_block") && c["transformer_layers_per_block"].is_number_integer())
    u.transformer_layers = c["transformer_layers_per_block"].get<int>();
  RBEE_CHECK_CODE(!c.contains("transformer_layers_per_block") || c["transformer_layers_per_block"].is_number_integer(),
                  ErrorCode::Unsupported, "unet config: per-level transformer_layers_per_block is not supported yet");
  RBEE_CHECK(c.contains("cross_attention_dim") && c["cross_attention_dim"].is_number_integer(),
             "unet config: 'cross_attention_dim' must be an integer");
  u.cross_attention_dim = integer("cross_attention_dim", 768, 1, 1 << 16);
  u.norm_num_groups = (int)integer("norm_num_groups", 32, 1, 1024);
  if (c.contains("norm_eps") && c["norm_eps"].is_number()) u.norm_eps = c["norm_eps"].get<float>();
  u.use_linear_projection = c.value("use_linear_projection", false);
  u.flip_sin_to_cos = c.value("flip_sin_to_cos", true);
  if (c.contains("freq_shift") && c["freq_shift"].is_number()) u.freq_shift = c["freq_shift"].get<double>();
  u.downsample_padding = (int)integer("downsample_padding", 1, 0, 1);
  RBEE_CHECK_CODE(!c.contains("addition_embed_type") || c["addition_embed_type"].is_null(), ErrorCode::Unsupported,
                  "unet config: addition_embed_type {} (SDXL) is not supported yet", c["addition_embed_type"].dump());
  RBEE_CHECK_CODE(!c.contains("class_embed_type") || c["class_embed_type"].is_null(), ErrorCode::Unsupported,
                  "unet config: class_embed_type is not supported");
  RBEE_CHECK_CODE(!c.contains("time_cond_proj_dim") || c["time_cond_proj_dim"].is_null(), ErrorCode::Unsupported,
                  "unet config: time_cond_proj_dim (LCM guidance embedding) is not supported");
  std::string act = c.value("act_fn", std::string("silu"));
  RBEE_CHECK_CODE(act == "silu", ErrorCode::Unsupported, "unet config: act_fn '{}' is not supported", act);
  return u;
}

namespace {

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
  nn::Conv2d conv_in, conv_out;
  nn::Norm norm_out;
  std::vector<Level> down, up;
  blocks::Resnet mid_res0, mid_res1;
  blocks::SpatialTransformer mid_attn;
};

UNet UNet::load(const Weights& w, const UNetConfig& cfg) {
  auto impl = std::make_shared<Impl>();
  impl->cfg = cfg;
  const auto& ch = cfg.block_out_channels;
  const int levels = (int)ch.size();
  const int64_t temb = ch[0] * 4;
  const int g = cfg.norm_num_groups;
  const float eps = cfg.norm_eps;
  impl->time1 = nn::Linear::load(w, "time_embedding.linear_1", ch[0], temb);
  impl->time2 = nn::Linear::load(w, "time_embedding.linear_2", temb, temb);
  impl->conv_in = nn::Conv2d::load(w, "conv_in", cfg.in_channels, ch[0], 3);
  auto transformer = [&](const Weights& b, int64_t c, int64_t heads) {
    return blocks::SpatialTransformer::load(b, c, heads, cfg.cross_attention_dim, cfg.transformer_layers, g,
                                            cfg.use_linear_projection);
  };
  int64_t out_ch = ch[0];
  for (int i = 0; i < levels; ++i) {
    Weights b = w.sub("down_blocks." + std::to_string(i) + ".");
    int64_t in_ch = out_ch;
    out_ch = ch[(size_t)i];
    Level L;
    for (int j = 0; j < cfg.layers_per_block; ++j) {
      L.resnets.push_back(
          blocks::Resnet::load(b.sub("resnets." + std::to_string(j) + "."), j == 0 ? in_ch : out_ch, out_ch, temb, g, eps));
      if (cfg.down_cross_attn[(size_t)i])
        L.attentions.push_back(transformer(b.sub("attentions." + std::to_string(j) + "."), out_ch, cfg.heads[(size_t)i]));
    }
    if (i < levels - 1) {
      L.down = blocks::Downsample::load(b.sub("downsamplers.0."), out_ch, cfg.downsample_padding);
      L.has_down = true;
    }
    impl->down.push_back(std::move(L));
  }
  const int64_t top = ch.back();
  impl->mid_res0 = blocks::Resnet::load(w.sub("mid_block.resnets.0."), top, top, temb, g, eps);
  impl->mid_attn = transformer(w.sub("mid_block.attentions.0."), top, cfg.heads.back());
  impl->mid_res1 = blocks::Resnet::load(w.sub("mid_block.resnets.1."), top, top, temb, g, eps);
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
      L.resnets.push_back(
          blocks::Resnet::load(b.sub("resnets." + std::to_string(j) + "."), res_in + skip, out_ch, temb, g, eps));
      if (cfg.up_cross_attn[(size_t)i])
        L.attentions.push_back(transformer(b.sub("attentions." + std::to_string(j) + "."), out_ch, cfg.heads[rev]));
    }
    if (i < levels - 1) {
      L.up = blocks::Upsample::load(b.sub("upsamplers.0."), out_ch);
      L.has_up = true;
    }
    impl->up.push_back(std::move(L));
  }
  impl->norm_out = nn::Norm::group(w, "conv_norm_out", ch[0], g, eps);
  impl->conv_out = nn::Conv2d::load(w, "conv_out", ch[0], cfg.out_channels, 3);
  UNet u;
  u.impl_ = std::move(impl);
  return u;
}

const UNetConfig& UNet::config() const { return impl_->cfg; }

Tensor UNet::forward(const Tensor& sample, double timestep, const Tensor& context) const {
  const Impl& m = *impl_;
  const UNetConfig& cfg = m.cfg;
  const int levels = (int)cfg.block_out_channels.size();
  RBEE_CHECK(sample.rank() == 4 && sample.dim(1) == cfg.in_channels,
             "unet: sample must be [B, {}, H, W], got {}", cfg.in_channels, sample.shape().to_string());
  const int64_t mult = int64_t{1} << (levels - 1);
  RBEE_CHECK(sample.dim(2) % mult == 0 && sample.dim(3) % mult == 0 && sample.dim(2) > 0 && sample.dim(3) > 0,
             "unet: latent size {}x{} must be a positive multiple of {}", sample.dim(2), sample.dim(3), mult);
  RBEE_CHECK(context.rank() == 3 && context.dim(0) == sample.dim(0) && context.dim(2) == cfg.cross_attention_dim,
             "unet: context must be [{}, S, {}], got {}", sample.dim(0), cfg.cross_attention_dim,
             context.shape().to_string());
  RBEE_CHECK(std::isfinite(timestep), "unet: timestep must be finite");
  const int64_t B = sample.dim(0);
  Device& dev = sample.device();

  // Sinusoidal timestep embedding [B, ch0]: [cos | sin] when flip_sin_to_cos, frequencies
  // exp(-ln(10000) * i / (half - freq_shift)), computed in f32 as diffusers does.
  const int64_t ch0 = cfg.block_out_channels[0], half = ch0 / 2;
  std::vector<float> emb((size_t)ch0, 0.0f);
  for (int64_t i = 0; i < half; ++i) {
    float freq = std::exp(-std::log(10000.0f) * (float)i / (float)((double)half - cfg.freq_shift));
    float arg = (float)timestep * freq;
    float s = std::sin(arg), c = std::cos(arg);
    emb[(size_t)i] = cfg.flip_sin_to_cos ? c : s;
    emb[(size_t)(half + i)] = cfg.flip_sin_to_cos ? s : c;
  }
  // Activations in the conv weights' dtype (nn::act_dtype: 16-bit on GPUs with 16-bit weights); the embedding is
  // computed in f32 and then cast, and the prediction comes back in F32, as diffusers does in fp16.
  const DType act = m.conv_in.w.dtype();
  auto to_act = [&](const Tensor& v) { return v.dtype() == act ? v : ops::cast(v, act); };
  Tensor t = to_act(Tensor::from_vector(emb, {1, ch0}, dev).expand({B, ch0}).contiguous());
  Tensor temb = m.time2(ops::silu(m.time1(t)));
  const Tensor ctx = to_act(context);

  Tensor x = m.conv_in(to_act(sample));
  std::vector<Tensor> skips{x};
  for (const Level& L : m.down) {
    for (size_t j = 0; j < L.resnets.size(); ++j) {
      x = L.resnets[j](x, temb);
      if (!L.attentions.empty()) x = L.attentions[j](x, ctx);
      skips.push_back(x);
    }
    if (L.has_down) {
      x = L.down(x);
      skips.push_back(x);
    }
  }
  x = m.mid_res0(x, temb);
  x = m.mid_attn(x, ctx);
  x = m.mid_res1(x, temb);
  for (const Level& L : m.up) {
    for (size_t j = 0; j < L.resnets.size(); ++j) {
      x = nn::concat(x, skips.back(), 1);
      skips.pop_back();
      x = L.resnets[j](x, temb);
      if (!L.attentions.empty()) x = L.attentions[j](x, ctx);
    }
    if (L.has_up) x = L.up(x);
  }
  Tensor out = m.conv_out(ops::silu(m.norm_out(x)));
  return out.dtype() == DType::F32 ? out : ops::cast(out, DType::F32);
}

}  // namespace rbee::sd
