"""The tiny SDXL pipeline as one original-layout checkpoint (run tools/goldens/make_tiny_sdxl.py first).

Renames the diffusers tensors of tests/data/tiny_sd/sdxl/{unet,vae,text_encoder,text_encoder_2} to the names of
Stability's SDXL single files: model.diffusion_model.* (label_emb.0.0 / label_emb.0.2 for the text_time
add_embedding), first_stage_model.* (VAE attention projections as [C, C, 1, 1] convolutions),
conditioner.embedders.0.transformer.text_model.* (CLIP ViT-L, Hugging Face names) and conditioner.embedders.1.model.*
(OpenCLIP ViT-bigG layout: token_embedding, positional_embedding, transformer.resblocks.N.{ln_1, attn.in_proj_weight
/ in_proj_bias (q, k, v rows stacked), attn.out_proj, ln_2, mlp.c_fc, mlp.c_proj}, ln_final, text_projection stored
[hidden, projection_dim]), and writes tests/data/tiny_sd/sdxl_single_file.safetensors (f16, as the folder).
The renaming is checked by converting back with diffusers' own single-file converters (convert_ldm_unet_checkpoint,
convert_ldm_vae_checkpoint, convert_ldm_clip_checkpoint, convert_open_clip_checkpoint), which must give the folder's
tensors exactly. The goldens are the folder's (tests/data/tiny_sd/sdxl/goldens.safetensors).
Run: .venv/bin/python tools/goldens/make_tiny_sdxl_single_file.py
"""
import json
import os
import re
import sys

import torch
from diffusers.loaders.single_file_utils import (convert_ldm_clip_checkpoint, convert_ldm_unet_checkpoint,
                                                 convert_ldm_vae_checkpoint, convert_open_clip_checkpoint)
from safetensors.torch import load_file, save_file
from transformers import CLIPTextModelWithProjection

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_sd_single_file import ROOT, unet_name, vae_name  # noqa: E402

SRC = os.path.join(ROOT, "sdxl")


def open_clip_tensors(te2, hidden):
    """CLIPTextModelWithProjection tensors -> OpenCLIP names (prefix conditioner.embedders.1.model.)."""
    p = "conditioner.embedders.1.model."
    bare = {(k[len("text_model."):] if k.startswith("text_model.") else k): v for k, v in te2.items()}
    out = {p + "token_embedding.weight": bare.pop("embeddings.token_embedding.weight"),
           p + "positional_embedding": bare.pop("embeddings.position_embedding.weight"),
           p + "ln_final.weight": bare.pop("final_layer_norm.weight"),
           p + "ln_final.bias": bare.pop("final_layer_norm.bias"),
           p + "text_projection": bare.pop("text_projection.weight").T.contiguous()}
    layers = sorted({int(m[1]) for k in bare for m in [re.match(r"encoder\.layers\.(\d+)\.", k)] if m})
    for i in layers:
        s, d = f"encoder.layers.{i}.", f"{p}transformer.resblocks.{i}."
        for wb in ("weight", "bias"):
            out[d + "attn.in_proj_" + wb] = torch.cat([bare.pop(f"{s}self_attn.{x}_proj.{wb}") for x in "qkv"])
            out[d + "attn.out_proj." + wb] = bare.pop(f"{s}self_attn.out_proj.{wb}")
            out[d + "ln_1." + wb] = bare.pop(f"{s}layer_norm1.{wb}")
            out[d + "ln_2." + wb] = bare.pop(f"{s}layer_norm2.{wb}")
            out[d + "mlp.c_fc." + wb] = bare.pop(f"{s}mlp.fc1.{wb}")
            out[d + "mlp.c_proj." + wb] = bare.pop(f"{s}mlp.fc2.{wb}")
    assert not bare, sorted(bare)
    assert all(v.shape[0] == 3 * hidden for k, v in out.items() if "in_proj" in k)
    return out


def main():
    ucfg = json.load(open(os.path.join(SRC, "unet", "config.json")))
    vcfg = json.load(open(os.path.join(SRC, "vae", "config.json")))
    t2cfg = json.load(open(os.path.join(SRC, "text_encoder_2", "config.json")))
    unet = load_file(os.path.join(SRC, "unet", "diffusion_pytorch_model.safetensors"))
    vae = load_file(os.path.join(SRC, "vae", "diffusion_pytorch_model.safetensors"))
    te1 = load_file(os.path.join(SRC, "text_encoder", "model.safetensors"))
    te2 = load_file(os.path.join(SRC, "text_encoder_2", "model.safetensors"))
    per = ucfg["layers_per_block"] + 1
    has_attn_up = [t.startswith("CrossAttn") for t in ucfg["up_block_types"]]
    levels = len(vcfg["block_out_channels"])
    out = {}
    for k, v in unet.items():
        if k.startswith("add_embedding."):
            name = k.replace("add_embedding.linear_1.", "label_emb.0.0.").replace("add_embedding.linear_2.", "label_emb.0.2.")
        else:
            name = unet_name(k, per, has_attn_up)
        out["model.diffusion_model." + name] = v
    for k, v in vae.items():
        name = vae_name(k, levels)
        if re.search(r"attn_1\.(q|k|v|proj_out)\.weight$", name):
            v = v[:, :, None, None]
        out["first_stage_model." + name] = v
    for k, v in te1.items():
        out["conditioner.embedders.0.transformer." + (k if k.startswith("text_model.") else "text_model." + k)] = v
    out.update(open_clip_tensors(te2, t2cfg["hidden_size"]))

    # Check with diffusers' converters (original -> diffusers) that the renaming is their exact inverse.
    ckpt = {k: v.float() for k, v in out.items()}
    back_u = convert_ldm_unet_checkpoint(ckpt, ucfg)
    assert set(back_u) == set(unet), set(back_u) ^ set(unet)
    assert all(torch.equal(back_u[k], unet[k].float()) for k in unet)
    back_v = convert_ldm_vae_checkpoint(ckpt, vcfg)
    assert set(back_v) == set(vae), set(back_v) ^ set(vae)
    assert all(torch.equal(back_v[k].reshape(vae[k].shape), vae[k].float()) for k in vae)
    back_1 = convert_ldm_clip_checkpoint(ckpt, remove_prefix="conditioner.embedders.0.transformer.")
    want_1 = {(k if k.startswith("text_model.") else "text_model." + k): v for k, v in te1.items()}
    assert set(back_1) == set(want_1), set(back_1) ^ set(want_1)
    assert all(torch.equal(back_1[k], want_1[k].float()) for k in want_1)
    model2 = CLIPTextModelWithProjection.from_pretrained(os.path.join(SRC, "text_encoder_2"))
    back_2 = convert_open_clip_checkpoint(model2, ckpt, prefix="conditioner.embedders.1.model.")
    want_2 = {(k if k.startswith(("text_model.", "text_projection")) else "text_model." + k): v for k, v in te2.items()}
    assert set(back_2) == set(want_2), set(back_2) ^ set(want_2)
    assert all(torch.equal(back_2[k], want_2[k].float()) for k in want_2)
    save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(ROOT, "sdxl_single_file.safetensors"))


if __name__ == "__main__":
    main()
