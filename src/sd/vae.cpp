// SD VAE (rbee/sd/vae.h).
#include "rbee/sd/vae.h"

#include "rbee/core/env.h"
#include "rbee/core/error.h"
#include "rbee/ops.h"
#include "sd/nn.h"
#include "sd/unet_blocks.h"

namespace rbee::sd {

VaeConfig VaeConfig::from_json(const nlohmann::json& c) {
  RBEE_CHECK(c.is_object(), "vae config: expected a JSON object");
  VaeConfig v;
  auto integer = [&](const char* key, int64_t fallback, int64_t lo, int64_t hi) {
    if (!c.contains(key) || c[key].is_null()) return fallback;
    RBEE_CHECK(c[key].is_number_integer(), "vae config: '{}' must be an integer", key);
    int64_t x = c[key].get<int64_t>();
    RBEE_CHECK(x >= lo && x <= hi, "vae config: '{}' = {} outside [{}, {}]", key, x, lo, hi);
    return x;
  };
  v.in_channels = integer("in_channels", 3, 1, 64);
  v.out_channels = integer("out_channels", 3, 1, 64);
  v.latent_channels = integer("latent_channels", 4, 1, 64);
  RBEE_CHECK(c.contains("block_out_channels") && c["block_out_channels"].is_array() &&
                 !c["block_out_channels"].empty() && c["block_out_channels"].size() <= 8,
             "vae config: 'block_out_channels' must be a list of 1..8 integers");
  v.block_out_channels.clear();
  for (const auto& x : c["block_out_channels"]) {
    RBEE_CHECK(x.is_number_integer() && x.get<int64_t>() > 0 && x.get<int64_t>() <= 8192,
               "vae config: bad block_out_channels entry {}", x.dump());
    v.block_out_channels.push_back(x.get<int64_t>());
  }
  v.layers_per_block = (int)integer("layers_per_block", 2, 1, 16);
  v.norm_num_groups = (int)integer("norm_num_groups", 32, 1, 1024);
  if (c.contains("scaling_factor") && c["scaling_factor"].is_number()) v.scaling_factor = c["scaling_factor"].get<double>();
  if (c.contains("use_quant_conv") && c["use_quant_conv"].is_boolean()) v.use_quant_conv = c["use_quant_conv"].get<bool>();
  if (c.contains("use_post_quant_conv") && c["use_post_quant_conv"].is_boolean())
    v.use_post_quant_conv = c["use_post_quant_conv"].get<bool>();
  if (c.contains("mid_block_add_attention") && c["mid_block_add_attention"].is_boolean())
    v.mid_block_add_attention = c["mid_block_add_attention"].get<bool>();
  if (c.contains("force_upcast") && c["force_upcast"].is_boolean()) v.force_upcast = c["force_upcast"].get<bool>();
  std::string act = c.value("act_fn", std::string("silu"));
  RBEE_CHECK_CODE(act == "silu", ErrorCode::Unsupported, "vae config: act_fn '{}' is not supported", act);
  const size_t levels = v.block_out_channels.size();
  for (auto [key, type] : {std::pair{"down_block_types", "DownEncoderBlock2D"}, std::pair{"up_block_types",
                                                                                        "UpDecoderBlock2D"}}) {
    if (!c.contains(key) || c[key].is_null()) continue;
    RBEE_CHECK(c[key].is_array() && c[key].size() == levels, "vae config: '{}' must list {} block types", key, levels);
    for (const auto& t : c[key])
      RBEE_CHECK_CODE(t == type, ErrorCode::Unsupported, "vae config: {} entry {} is not supported (only {})", key,
                      t.dump(), type);
  }
  // Read by the SDXL pipelines (Playground-style latent statistics): not implemented, so refused rather than
  // ignored. shift_factor is read only by SD3 / Flux pipelines, sample_size only by tiling: both ignored.
  for (const char* key : {"latents_mean", "latents_std"})
    RBEE_CHECK_CODE(!c.contains(key) || c[key].is_null(), ErrorCode::Unsupported,
                    "vae config: {} (latent normalization) is not supported", key);
  return v;
}

namespace {
constexpr float kEps = 1e-6f;

struct Level {
  std::vector<blocks::Resnet> resnets;
  bool has_resample = false;
  blocks::Downsample down;
  blocks::Upsample up;
};

struct Mid {
  blocks::Resnet r0, r1;
  blocks::VaeAttention attn;
  bool has_attn = false;
  static Mid load(const Weights& w, int64_t c, int g, bool attn) {
    Mid m;
    m.r0 = blocks::Resnet::load(w.sub("resnets.0."), c, c, 0, g, kEps);
    m.r1 = blocks::Resnet::load(w.sub("resnets.1."), c, c, 0, g, kEps);
    if (attn) {
      m.attn = blocks::VaeAttention::load(w.sub("attentions.0."), c, g, kEps);
      m.has_attn = true;
    }
    return m;
  }
  void to_channels_last() {
    r0.to_channels_last();
    r1.to_channels_last();
    if (has_attn) attn.to_channels_last();
  }
  Tensor operator()(const Tensor& x) const {
    Tensor h = r0(x, Tensor());
    if (has_attn) h = attn(h);
    return r1(h, Tensor());
  }
};
}  // namespace

struct Vae::Impl {
  VaeConfig cfg;
  bool has_encoder = false;
  // decoder
  nn::Conv2d post_quant, dec_in, dec_out;
  Mid dec_mid;
  std::vector<Level> dec_up;
  nn::Norm dec_norm;
  // The decoder's activations NHWC from dec_in to dec_out (RBEE_SD_VAE_CHANNELS_LAST=1):
  // the latent is permuted after post_quant_conv and the image back before it is returned. The encoder stays NCHW.
  bool dec_channels_last = false;

  void decoder_to_channels_last() {
    dec_in.to_channels_last();
    dec_mid.to_channels_last();
    for (Level& lv : dec_up) {
      for (blocks::Resnet& r : lv.resnets) r.to_channels_last();
      if (lv.has_resample) lv.up.to_channels_last();
    }
    dec_norm.channels_last = true;
    dec_out.to_channels_last();
    dec_channels_last = true;
  }
  // encoder
  nn::Conv2d quant, enc_in, enc_out;
  Mid enc_mid;
  std::vector<Level> enc_down;
  nn::Norm enc_norm;
};

Vae Vae::load(const Weights& w, const VaeConfig& cfg, bool with_encoder) {
  auto impl = std::make_shared<Impl>();
  impl->cfg = cfg;
  const auto& ch = cfg.block_out_channels;
  const int levels = (int)ch.size();
  const int g = cfg.norm_num_groups;
  const int64_t L = cfg.latent_channels;
  if (cfg.use_post_quant_conv) impl->post_quant = nn::Conv2d::load(w, "post_quant_conv", L, L, 1);
  Weights d = w.sub("decoder.");
  impl->dec_in = nn::Conv2d::load(d, "conv_in", L, ch.back(), 3);
  impl->dec_mid = Mid::load(d.sub("mid_block."), ch.back(), g, cfg.mid_block_add_attention);
  int64_t out_ch = ch.back();
  for (int i = 0; i < levels; ++i) {
    Weights b = d.sub("up_blocks." + std::to_string(i) + ".");
    int64_t prev = out_ch;
    out_ch = ch[(size_t)(levels - 1 - i)];
    Level lv;
    for (int j = 0; j <= cfg.layers_per_block; ++j)
      lv.resnets.push_back(
          blocks::Resnet::load(b.sub("resnets." + std::to_string(j) + "."), j == 0 ? prev : out_ch, out_ch, 0, g, kEps));
    if (i < levels - 1) {
      lv.up = blocks::Upsample::load(b.sub("upsamplers.0."), out_ch);
      lv.has_resample = true;
    }
    impl->dec_up.push_back(std::move(lv));
  }
  impl->dec_norm = nn::Norm::group(d, "conv_norm_out", ch[0], g, kEps);
  impl->dec_out = nn::Conv2d::load(d, "conv_out", ch[0], cfg.out_channels, 3);
  // The decoder channels last where the UNet is (nn::channels_last_for: a device with a convolution library, or
  // RBEE_SD_CHANNELS_LAST=1) and its weights are 16-bit; RBEE_SD_VAE_CHANNELS_LAST=1 / =0 forces it on / off. On an
  // H100 with the row-chunk NHWC group norm it decoded SD 1.5's 512x512 in 6 ms against 11 ms channels first and
  // SDXL's 1024x1024 in 24 ms against 41 ms (docs/perf-notes/sd-speed.md, session 11's final call). An F32 decoder
  // stays NCHW unless forced.
  const bool half_weights = impl->dec_in.w.dtype() == DType::F16 || impl->dec_in.w.dtype() == DType::BF16;
  if (env::flag("RBEE_SD_VAE_CHANNELS_LAST").value_or(half_weights && nn::channels_last_for(impl->dec_in.w.device())))
    impl->decoder_to_channels_last();

  if (with_encoder) {
    impl->has_encoder = true;
    if (cfg.use_quant_conv) impl->quant = nn::Conv2d::load(w, "quant_conv", 2 * L, 2 * L, 1);
    Weights e = w.sub("encoder.");
    impl->enc_in = nn::Conv2d::load(e, "conv_in", cfg.in_channels, ch[0], 3);
    out_ch = ch[0];
    for (int i = 0; i < levels; ++i) {
      Weights b = e.sub("down_blocks." + std::to_string(i) + ".");
      int64_t in_ch = out_ch;
      out_ch = ch[(size_t)i];
      Level lv;
      for (int j = 0; j < cfg.layers_per_block; ++j)
        lv.resnets.push_back(
            blocks::Resnet::load(b.sub("resnets." + std::to_string(j) + "."), j == 0 ? in_ch : out_ch, out_ch, 0, g, kEps));
      if (i < levels - 1) {
        lv.down = blocks::Downsample::load(b.sub("downsamplers.0."), out_ch, 0);
        lv.has_resample = true;
      }
      impl->enc_down.push_back(std::move(lv));
    }
    impl->enc_mid = Mid::load(e.sub("mid_block."), ch.back(), g, cfg.mid_block_add_attention);
    impl->enc_norm = nn::Norm::group(e, "conv_norm_out", ch.back(), g, kEps);
    impl->enc_out = nn::Conv2d::load(e, "conv_out", ch.back(), 2 * L, 3);
  }
  Vae v;
  v.impl_ = std::move(impl);
  return v;
}

const VaeConfig& Vae::config() const { return impl_->cfg; }

Tensor Vae::decode(const Tensor& z) const {
  const Impl& m = *impl_;
  RBEE_CHECK(z.rank() == 4 && z.dim(1) == m.cfg.latent_channels && z.dim(2) > 0 && z.dim(3) > 0,
             "vae decode: latent must be [B, {}, h, w], got {}", m.cfg.latent_channels, z.shape().to_string());
  // Activations in the conv weights' dtype (nn::act_dtype); the image comes back in F32.
  const Tensor zc = z.dtype() == m.dec_in.w.dtype() ? z : ops::cast(z, m.dec_in.w.dtype());
  Tensor x = m.cfg.use_post_quant_conv ? m.post_quant(zc) : zc;
  if (m.dec_channels_last) x = nn::to_nhwc(x);
  x = m.dec_mid(m.dec_in(x));
  for (const Level& lv : m.dec_up) {
    for (const auto& r : lv.resnets) x = r(x, Tensor());
    if (lv.has_resample) x = lv.up(x);
  }
  x = m.dec_out(m.dec_norm.silu(x));
  if (m.dec_channels_last) x = nn::to_nchw(x);
  return x.dtype() == DType::F32 ? x : ops::cast(x, DType::F32);
}

Tensor Vae::encode(const Tensor& image) const {
  return encode_moments(image).narrow(1, 0, impl_->cfg.latent_channels).contiguous();
}

Tensor Vae::encode_moments(const Tensor& image) const {
  const Impl& m = *impl_;
  RBEE_CHECK(m.has_encoder, "vae encode: the encoder was not loaded");
  const int64_t f = m.cfg.scale();
  RBEE_CHECK(image.rank() == 4 && image.dim(1) == m.cfg.in_channels && image.dim(2) > 0 && image.dim(3) > 0 &&
                 image.dim(2) % f == 0 && image.dim(3) % f == 0,
             "vae encode: image must be [B, {}, H, W] with H, W multiples of {}, got {}", m.cfg.in_channels, f,
             image.shape().to_string());
  Tensor x = m.enc_in(image);  // cast to the conv weights' dtype inside
  for (const Level& lv : m.enc_down) {
    for (const auto& r : lv.resnets) x = r(x, Tensor());
    if (lv.has_resample) x = lv.down(x);
  }
  x = m.enc_out(m.enc_norm.silu(m.enc_mid(x)));
  if (m.cfg.use_quant_conv) x = m.quant(x);
  return x.dtype() == DType::F32 ? x : ops::cast(x, DType::F32);
}

}  // namespace rbee::sd
