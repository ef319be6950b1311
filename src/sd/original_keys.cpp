// diffusers -> original SD checkpoint names (src/sd/original_keys.h).
#include "sd/original_keys.h"

#include <cstdlib>

namespace rbee::sd {
namespace {

bool starts(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// Splits "a.b.c" into its first field and the rest.
std::pair<std::string, std::string> head(const std::string& s) {
  size_t dot = s.find('.');
  if (dot == std::string::npos) return {s, ""};
  return {s.substr(0, dot), s.substr(dot + 1)};
}

// Reads "<int>.<rest>" at the start of s.
bool take_index(const std::string& s, int* index, std::string* rest) {
  auto [h, r] = head(s);
  if (h.empty() || h.find_first_not_of("0123456789") != std::string::npos) return false;
  *index = std::atoi(h.c_str());
  *rest = r;
  return true;
}

std::string replace_first_field(const std::string& rest, const std::vector<std::pair<std::string, std::string>>& map) {
  auto [h, r] = head(rest);
  for (const auto& [from, to] : map)
    if (h == from) return r.empty() ? to : to + "." + r;
  return rest;
}

std::string unet_resnet(const std::string& rest) {
  return replace_first_field(rest, {{"norm1", "in_layers.0"}, {"conv1", "in_layers.2"},
                                    {"time_emb_proj", "emb_layers.1"}, {"norm2", "out_layers.0"},
                                    {"conv2", "out_layers.3"}, {"conv_shortcut", "skip_connection"}});
}

std::vector<std::string> unet_keys(const std::string& n, int L) {
  const std::string p = "model.diffusion_model.";
  const int per = L + 1;  // input/output block entries per level
  int i = 0, j = 0;
  std::string rest, r2;
  if (starts(n, "time_embedding.linear_1.")) return {p + "time_embed.0." + n.substr(24)};
  if (starts(n, "time_embedding.linear_2.")) return {p + "time_embed.2." + n.substr(24)};
  if (starts(n, "add_embedding.linear_1.")) return {p + "label_emb.0.0." + n.substr(23)};  // SDXL text_time
  if (starts(n, "add_embedding.linear_2.")) return {p + "label_emb.0.2." + n.substr(23)};
  if (starts(n, "conv_in.")) return {p + "input_blocks.0.0." + n.substr(8)};
  if (starts(n, "conv_norm_out.")) return {p + "out.0." + n.substr(14)};
  if (starts(n, "conv_out.")) return {p + "out.2." + n.substr(9)};
  if (starts(n, "down_blocks.") && take_index(n.substr(12), &i, &rest)) {
    if (starts(rest, "resnets.") && take_index(rest.substr(8), &j, &r2))
      return {p + "input_blocks." + std::to_string(per * i + j + 1) + ".0." + unet_resnet(r2)};
    if (starts(rest, "attentions.") && take_index(rest.substr(11), &j, &r2))
      return {p + "input_blocks." + std::to_string(per * i + j + 1) + ".1." + r2};
    if (starts(rest, "downsamplers.0.conv."))
      return {p + "input_blocks." + std::to_string(per * (i + 1)) + ".0.op." + rest.substr(20)};
  }
  if (starts(n, "mid_block.resnets.0.")) return {p + "middle_block.0." + unet_resnet(n.substr(20))};
  if (starts(n, "mid_block.attentions.0.")) return {p + "middle_block.1." + n.substr(23)};
  if (starts(n, "mid_block.resnets.1.")) return {p + "middle_block.2." + unet_resnet(n.substr(20))};
  if (starts(n, "up_blocks.") && take_index(n.substr(10), &i, &rest)) {
    if (starts(rest, "resnets.") && take_index(rest.substr(8), &j, &r2))
      return {p + "output_blocks." + std::to_string(per * i + j) + ".0." + unet_resnet(r2)};
    if (starts(rest, "attentions.") && take_index(rest.substr(11), &j, &r2))
      return {p + "output_blocks." + std::to_string(per * i + j) + ".1." + r2};
    if (starts(rest, "upsamplers.0.conv.")) {
      const std::string b = p + "output_blocks." + std::to_string(per * i + L) + ".";
      return {b + "2.conv." + rest.substr(18), b + "1.conv." + rest.substr(18)};
    }
  }
  return {};
}

std::string vae_resnet(const std::string& rest) { return replace_first_field(rest, {{"conv_shortcut", "nin_shortcut"}}); }

std::string vae_mid(const std::string& rest) {  // rest after "mid_block."
  if (starts(rest, "resnets.0.")) return "mid.block_1." + vae_resnet(rest.substr(10));
  if (starts(rest, "resnets.1.")) return "mid.block_2." + vae_resnet(rest.substr(10));
  if (starts(rest, "attentions.0."))
    return "mid.attn_1." + replace_first_field(rest.substr(13), {{"group_norm", "norm"}, {"to_q", "q"}, {"to_k", "k"},
                                                                   {"to_v", "v"}, {"to_out", "proj_out"}});
  return "";
}

std::vector<std::string> vae_keys(const std::string& n, int levels) {
  const std::string p = "first_stage_model.";
  int i = 0, j = 0;
  std::string rest, r2;
  if (starts(n, "quant_conv.") || starts(n, "post_quant_conv.")) return {p + n};
  for (const std::string side : {"encoder.", "decoder."}) {
    if (!starts(n, side)) continue;
    std::string s = n.substr(side.size());
    if (starts(s, "conv_in.") || starts(s, "conv_out.")) return {p + side + s};
    if (starts(s, "conv_norm_out.")) return {p + side + "norm_out." + s.substr(14)};
    if (starts(s, "mid_block.")) {
      std::string m = vae_mid(s.substr(10));
      if (m.empty()) return {};
      // proj_out of the attention is "proj_out.<w|b>", the rest keep their field; to_out.0 -> proj_out
      size_t k = m.find("proj_out.0.");
      if (k != std::string::npos) m.replace(k, 11, "proj_out.");
      return {p + side + m};
    }
    if (starts(s, "down_blocks.") && take_index(s.substr(12), &i, &rest)) {
      if (starts(rest, "resnets.") && take_index(rest.substr(8), &j, &r2))
        return {p + side + "down." + std::to_string(i) + ".block." + std::to_string(j) + "." + vae_resnet(r2)};
      if (starts(rest, "downsamplers.0.conv."))
        return {p + side + "down." + std::to_string(i) + ".downsample.conv." + rest.substr(20)};
    }
    if (starts(s, "up_blocks.") && take_index(s.substr(10), &i, &rest)) {
      const int o = levels - 1 - i;
      if (starts(rest, "resnets.") && take_index(rest.substr(8), &j, &r2))
        return {p + side + "up." + std::to_string(o) + ".block." + std::to_string(j) + "." + vae_resnet(r2)};
      if (starts(rest, "upsamplers.0.conv."))
        return {p + side + "up." + std::to_string(o) + ".upsample.conv." + rest.substr(18)};
    }
  }
  return {};
}

// SDXL's OpenCLIP ViT-bigG text tower (conditioner.embedders.1.model.*) for CLIPTextModelWithProjection names.
std::vector<OriginalName> open_clip_keys(std::string n) {
  const std::string p = "conditioner.embedders.1.model.";
  if (n == "text_projection.weight") return {{p + "text_projection", -1, true}};
  if (starts(n, "text_model.")) n = n.substr(11);
  if (n == "embeddings.token_embedding.weight") return {{p + "token_embedding.weight"}};
  if (n == "embeddings.position_embedding.weight") return {{p + "positional_embedding"}};
  if (starts(n, "final_layer_norm.")) return {{p + "ln_final." + n.substr(17)}};
  int i = 0;
  std::string rest;
  if (!starts(n, "encoder.layers.") || !take_index(n.substr(15), &i, &rest)) return {};
  const std::string b = p + "transformer.resblocks." + std::to_string(i) + ".";
  auto [field, tail] = head(rest);
  if (field == "layer_norm1") return {{b + "ln_1." + tail}};
  if (field == "layer_norm2") return {{b + "ln_2." + tail}};
  if (field == "mlp") return {{b + "mlp." + replace_first_field(tail, {{"fc1", "c_fc"}, {"fc2", "c_proj"}})}};
  if (field != "self_attn") return {};
  auto [proj, wb] = head(tail);
  if (proj == "out_proj") return {{b + "attn.out_proj." + wb}};
  const int part = proj == "q_proj" ? 0 : proj == "k_proj" ? 1 : proj == "v_proj" ? 2 : -1;
  if (part < 0 || (wb != "weight" && wb != "bias")) return {};
  return {{b + "attn.in_proj_" + wb, part}};
}

std::vector<OriginalName> whole(const std::vector<std::string>& names) {
  std::vector<OriginalName> out;
  for (const std::string& n : names) out.push_back({n});
  return out;
}

}  // namespace

std::vector<OriginalName> original_sd_keys(SdComponent component, const std::string& name, const OriginalLayout& layout) {
  const std::string hf = starts(name, "text_model.") ? name : "text_model." + name;
  switch (component) {
    case SdComponent::Unet: return whole(unet_keys(name, layout.unet_layers_per_block));
    case SdComponent::Vae: return whole(vae_keys(name, layout.vae_levels));
    case SdComponent::TextEncoder: return {{"cond_stage_model.transformer." + hf}};
    case SdComponent::TextEncoderXL1: return {{"conditioner.embedders.0.transformer." + hf}};
    case SdComponent::TextEncoderXL2: return open_clip_keys(name);
  }
  return {};
}

}  // namespace rbee::sd
