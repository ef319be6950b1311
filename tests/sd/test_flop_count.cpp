// The UNet step's floating-point operations as the layers count them (Pipeline::unet_step_flops, sd/flop_count.h)
// against a count written out by hand from diffusers' UNet2DConditionModel structure (SD 1.x wiring: resnets with a
// time projection and a 1x1 shortcut where the channels change, spatial transformers with 1x1 proj_in / proj_out,
// self-attention, cross-attention over the 77 context tokens and a GEGLU feed-forward of 4C, stride-2 downsampling
// convolutions, nearest upsampling followed by a convolution).
#include <gtest/gtest.h>

#include <vector>

#include "common/scoped_env.h"
#include "rbee/sd/pipeline.h"
#include "sd/flop_count.h"
#include "sd_test_util.h"

namespace rbee::sd {
namespace {

// 2 flops per multiply-add.
struct HandCount {
  int64_t B;  // UNet rows (both guidance halves)
  bool context_kv_in_step;  // the cross-attention's k, v projections of the context counted in the step
  double total = 0;
  void conv(int64_t cin, int64_t cout, int64_t k, int64_t h, int64_t w) { total += 2.0 * B * h * w * cout * cin * k * k; }
  void linear(int64_t rows, int64_t in, int64_t out) { total += 2.0 * rows * in * out; }
  void attention(int64_t tq, int64_t tk, int64_t c) { total += 4.0 * B * tq * tk * c; }  // Q K^T and P V
  void resnet(int64_t cin, int64_t cout, int64_t temb, int64_t h, int64_t w) {
    conv(cin, cout, 3, h, w);
    linear(B, temb, cout);  // time_emb_proj
    conv(cout, cout, 3, h, w);
    if (cin != cout) conv(cin, cout, 1, h, w);
  }
  void transformer(int64_t c, int64_t cross, int64_t tokens, int64_t h, int64_t w) {
    const int64_t t = h * w;
    conv(c, c, 1, h, w);              // proj_in
    linear(B * t, c, 3 * c);          // q, k, v
    attention(t, t, c);               // self
    linear(B * t, c, c);              // to_out
    linear(B * t, c, c);              // cross q
    if (context_kv_in_step) linear(B * tokens, cross, 2 * c);  // cross k, v from the context
    attention(t, tokens, c);          // cross
    linear(B * t, c, c);              // to_out
    linear(B * t, c, 8 * c);          // ff in: GEGLU's hidden and gate
    linear(B * t, 4 * c, c);          // ff out
    conv(c, c, 1, h, w);              // proj_out
  }
};

// tests/data/tiny_sd/sd15/unet/config.json: block_out_channels [16, 32, 32], layers_per_block 2, down blocks
// CrossAttn, CrossAttn, Down, up blocks Up, CrossAttn, CrossAttn, cross_attention_dim 32, 4 channels in and out.
// context_kv_in_step: RBEE_SD_CONTEXT_KV_ONCE=0 (the context's keys and values projected in every step); by default
// they are projected once per context, outside the step, and not counted in it.
double tiny_sd15_unet_flops(int64_t B, int64_t h, int64_t w, bool context_kv_in_step = false) {
  const std::vector<int64_t> ch = {16, 32, 32};
  const std::vector<bool> down_attn = {true, true, false}, up_attn = {false, true, true};
  const int64_t layers = 2, cross = 32, tokens = 77, temb = 4 * ch[0];
  HandCount n{B, context_kv_in_step};
  n.linear(B, ch[0], temb);  // time_embedding.linear_1
  n.linear(B, temb, temb);   // linear_2
  n.conv(4, ch[0], 3, h, w);  // conv_in
  std::vector<int64_t> skips = {ch[0]};
  std::vector<std::pair<int64_t, int64_t>> sizes;  // (h, w) of each level
  int64_t lh = h, lw = w, cin = ch[0];
  for (size_t d = 0; d < ch.size(); ++d) {
    sizes.push_back({lh, lw});
    for (int64_t j = 0; j < layers; ++j) {
      n.resnet(cin, ch[d], temb, lh, lw);
      if (down_attn[d]) n.transformer(ch[d], cross, tokens, lh, lw);
      cin = ch[d];
      skips.push_back(cin);
    }
    if (d + 1 < ch.size()) {
      lh = (lh + 1) / 2, lw = (lw + 1) / 2;  // 3x3, stride 2, padding 1
      n.conv(cin, cin, 3, lh, lw);
      skips.push_back(cin);
    }
  }
  n.resnet(cin, cin, temb, lh, lw);  // mid block
  n.transformer(cin, cross, tokens, lh, lw);
  n.resnet(cin, cin, temb, lh, lw);
  for (size_t u = 0; u < ch.size(); ++u) {
    const int64_t out = ch[ch.size() - 1 - u];
    const auto [uh, uw] = sizes[ch.size() - 1 - u];
    for (int64_t j = 0; j <= layers; ++j) {
      const int64_t skip = skips.back();
      skips.pop_back();
      n.resnet(cin + skip, out, temb, uh, uw);
      if (up_attn[u]) n.transformer(out, cross, tokens, uh, uw);
      cin = out;
    }
    if (u + 1 < ch.size()) {
      const auto [nh, nw] = sizes[ch.size() - 2 - u];
      n.conv(cin, cin, 3, nh, nw);  // upsampler: nearest to the next level's size, then a convolution
    }
  }
  n.conv(ch[0], 4, 3, h, w);  // conv_out
  return n.total;
}

TEST(SdFlopCount, TinyUnetStepMatchesTheHandCount) {
  const Pipeline p = Pipeline::load(test::tiny_sd("sd15"));
  EXPECT_EQ(p.unet_step_flops(), 0.0);  // no step yet (the CPU does not prepare at load)
  const int64_t f = p.latent_scale();
  // A non-square image (width 64, height 48) and guidance (2 UNet rows): odd sizes at the deepest level.
  p.prepare(64, 48);
  EXPECT_DOUBLE_EQ(p.unet_step_flops(), tiny_sd15_unet_flops(2, 48 / f, 64 / f));
  GenerateRequest r;
  r.width = 32;
  r.height = 32;
  r.steps = 1;
  r.guidance_scale = 1.0;  // no guidance: one UNet row
  (void)p.generate_latents(r);
  EXPECT_DOUBLE_EQ(p.unet_step_flops(), tiny_sd15_unet_flops(1, 32 / f, 32 / f));
  // Several steps and a second prompt (projected anew, outside the step): still the step's own count.
  r.steps = 3;
  r.prompt = "a red cube";
  (void)p.generate_latents(r);
  EXPECT_DOUBLE_EQ(p.unet_step_flops(), tiny_sd15_unet_flops(1, 32 / f, 32 / f));
}

TEST(SdFlopCount, ContextProjectionsInTheStepWhenSwitchedOff) {
  const Pipeline p = Pipeline::load(test::tiny_sd("sd15"));
  const int64_t f = p.latent_scale();
  rbee::test::ScopedEnv env("RBEE_SD_CONTEXT_KV_ONCE", "0");  // read at the pipeline's first request
  p.prepare(64, 48);
  EXPECT_DOUBLE_EQ(p.unet_step_flops(), tiny_sd15_unet_flops(2, 48 / f, 64 / f, true));
  EXPECT_GT(tiny_sd15_unet_flops(2, 48 / f, 64 / f, true), tiny_sd15_unet_flops(2, 48 / f, 64 / f));
}

TEST(SdFlopCount, CountsOnlyInsideALiveCounter) {
  FlopCounter::add(5.0);  // no counter: dropped
  FlopCounter outer;
  FlopCounter::add(1.0);
  {
    FlopCounter inner;
    FlopCounter::add(2.0);
    EXPECT_EQ(inner.total(), 2.0);
  }
  FlopCounter::add(4.0);
  EXPECT_EQ(outer.total(), 5.0);
}

}  // namespace
}  // namespace rbee::sd
