"""The tiny SD 1.5 pipeline as one original-layout checkpoint (run tools/goldens/make_tiny_sd.py first).

Renames the diffusers tensors of tests/data/tiny_sd/sd15/{unet,vae,text_encoder} to the CompVis/LDM names
(model.diffusion_model.*, first_stage_model.*, cond_stage_model.transformer.text_model.*; VAE attention
projections as [C, C, 1, 1] convolutions) and writes tests/data/tiny_sd/sd15_single_file.safetensors. The renaming
is checked by converting back with diffusers' own converter (convert_from_ckpt.convert_ldm_unet_checkpoint /
convert_ldm_vae_checkpoint), which must give the original tensors exactly.
Run: .venv/bin/python tools/goldens/make_tiny_sd_single_file.py
"""
import json
import os
import re

import torch
from diffusers.pipelines.stable_diffusion.convert_from_ckpt import (convert_ldm_unet_checkpoint,
                                                                     convert_ldm_vae_checkpoint)
from safetensors.torch import load_file, save_file

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "tiny_sd")
SRC = os.path.join(ROOT, "sd15")

RES_UNET = {"norm1": "in_layers.0", "conv1": "in_layers.2", "time_emb_proj": "emb_layers.1", "norm2": "out_layers.0",
            "conv2": "out_layers.3", "conv_shortcut": "skip_connection"}


def unet_name(n, per, has_attn_up):
    def res(rest):
        f, _, r = rest.partition(".")
        return RES_UNET.get(f, f) + "." + r
    if n.startswith("time_embedding.linear_1."): return "time_embed.0." + n[24:]
    if n.startswith("time_embedding.linear_2."): return "time_embed.2." + n[24:]
    if n.startswith("conv_in."): return "input_blocks.0.0." + n[8:]
    if n.startswith("conv_norm_out."): return "out.0." + n[14:]
    if n.startswith("conv_out."): return "out.2." + n[9:]
    m = re.match(r"down_blocks\.(\d+)\.(resnets|attentions)\.(\d+)\.(.*)", n)
    if m:
        i, kind, j, rest = int(m[1]), m[2], int(m[3]), m[4]
        return f"input_blocks.{per * i + j + 1}." + ("0." + res(rest) if kind == "resnets" else "1." + rest)
    m = re.match(r"down_blocks\.(\d+)\.downsamplers\.0\.conv\.(.*)", n)
    if m: return f"input_blocks.{per * (int(m[1]) + 1)}.0.op.{m[2]}"
    m = re.match(r"mid_block\.(resnets|attentions)\.(\d)\.(.*)", n)
    if m:
        idx = {("resnets", "0"): 0, ("attentions", "0"): 1, ("resnets", "1"): 2}[(m[1], m[2])]
        return f"middle_block.{idx}." + (res(m[3]) if m[1] == "resnets" else m[3])
    m = re.match(r"up_blocks\.(\d+)\.(resnets|attentions)\.(\d+)\.(.*)", n)
    if m:
        i, kind, j, rest = int(m[1]), m[2], int(m[3]), m[4]
        return f"output_blocks.{per * i + j}." + ("0." + res(rest) if kind == "resnets" else "1." + rest)
    m = re.match(r"up_blocks\.(\d+)\.upsamplers\.0\.conv\.(.*)", n)
    if m:
        i = int(m[1])
        return f"output_blocks.{per * i + per - 1}.{2 if has_attn_up[i] else 1}.conv.{m[2]}"
    raise KeyError(n)


def vae_name(n, levels):
    n = n.replace("conv_norm_out", "norm_out")
    n = re.sub(r"mid_block\.resnets\.0\.", "mid.block_1.", n)
    n = re.sub(r"mid_block\.resnets\.1\.", "mid.block_2.", n)
    n = re.sub(r"mid_block\.attentions\.0\.", "mid.attn_1.", n)
    n = n.replace("attn_1.group_norm.", "attn_1.norm.").replace("attn_1.to_q.", "attn_1.q.")
    n = n.replace("attn_1.to_k.", "attn_1.k.").replace("attn_1.to_v.", "attn_1.v.").replace("attn_1.to_out.0.", "attn_1.proj_out.")
    n = re.sub(r"down_blocks\.(\d+)\.resnets\.(\d+)\.", r"down.\1.block.\2.", n)
    n = re.sub(r"down_blocks\.(\d+)\.downsamplers\.0\.", r"down.\1.downsample.", n)
    n = re.sub(r"up_blocks\.(\d+)\.resnets\.(\d+)\.", lambda m: f"up.{levels - 1 - int(m[1])}.block.{m[2]}.", n)
    n = re.sub(r"up_blocks\.(\d+)\.upsamplers\.0\.", lambda m: f"up.{levels - 1 - int(m[1])}.upsample.", n)
    return n.replace("conv_shortcut", "nin_shortcut")


def main():
    ucfg = json.load(open(os.path.join(SRC, "unet", "config.json")))
    vcfg = json.load(open(os.path.join(SRC, "vae", "config.json")))
    unet = load_file(os.path.join(SRC, "unet", "diffusion_pytorch_model.safetensors"))
    vae = load_file(os.path.join(SRC, "vae", "diffusion_pytorch_model.safetensors"))
    te = load_file(os.path.join(SRC, "text_encoder", "model.safetensors"))
    per = ucfg["layers_per_block"] + 1
    has_attn_up = [t.startswith("CrossAttn") for t in ucfg["up_block_types"]]
    levels = len(vcfg["block_out_channels"])
    out = {}
    for k, v in unet.items():
        out["model.diffusion_model." + unet_name(k, per, has_attn_up)] = v
    for k, v in vae.items():
        name = vae_name(k, levels)
        if re.search(r"attn_1\.(q|k|v|proj_out)\.weight$", name):
            v = v[:, :, None, None]
        out["first_stage_model." + name] = v
    for k, v in te.items():
        out["cond_stage_model.transformer." + (k if k.startswith("text_model.") else "text_model." + k)] = v

    # Check with diffusers' converter (original -> diffusers) that the renaming is its exact inverse.
    ckpt = {k: v.float() for k, v in out.items()}
    back_u = convert_ldm_unet_checkpoint(ckpt, dict(ucfg, upcast_attention=False), extract_ema=False)
    assert set(back_u) == set(unet), set(back_u) ^ set(unet)
    assert all(torch.equal(back_u[k], unet[k].float()) for k in unet)
    back_v = convert_ldm_vae_checkpoint(ckpt, vcfg)
    assert set(back_v) == set(vae), set(back_v) ^ set(vae)
    assert all(torch.equal(back_v[k].reshape(vae[k].shape), vae[k].float()) for k in vae)
    save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(ROOT, "sd15_single_file.safetensors"))


if __name__ == "__main__":
    main()
