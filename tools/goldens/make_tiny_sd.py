"""Tiny random-weight SD pipelines and their goldens, built with diffusers from the real configs cut down.

For each of sd15 (runwayml/stable-diffusion-v1-5) and sd21 (stabilityai/stable-diffusion-2-1: v-prediction,
OpenCLIP-style text encoder with gelu and "!" padding, linear transformer projections, upcast attention) this
writes tests/data/tiny_sd/<name>/ in diffusers layout (model_index.json, scheduler/, tokenizer/, text_encoder/,
unet/, vae/) and tests/data/tiny_sd/<name>/goldens.safetensors:
  ids_cond, ids_uncond       tokenizer output (padded to 77) for PROMPT and ""
  text_cond, text_uncond     text encoder last hidden states [1, 77, C]
  unet_sample, unet_context, unet_out (timesteps UNET_T)   one UNet forward on random latents
  vae_latent, vae_image      VAE decode of a random latent (latent / scaling_factor, as pipelines call it)
  vae_enc_image, vae_enc_mean   VAE encode: the posterior mean of a random image
  t2i_noise, t2i_latent      4-step txt2img (Euler, guidance 7.5) from explicit initial noise, final latent
and tests/data/tiny_sd/tokenizer_goldens.json (CLIPTokenizer ids of assorted prompts on the tiny vocabulary).

Weights are rounded to f16 and stored as f16 (goldens are computed with the rounded weights in f32). The tiny
vocabulary is CLIP's byte alphabet plus the first TINY_MERGES merges of OpenAI CLIP's BPE (open_clip's
bpe_simple_vocab_16e6.txt.gz), so tokenization follows the real merge ranks.

Peers: diffusers, transformers, torch (CPU), open_clip_torch (for the BPE file only).
Run: .venv/bin/python tools/goldens/make_tiny_sd.py
"""
import gzip
import json
import os

import torch
from diffusers import (AutoencoderKL, EulerDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel)
from safetensors.torch import save_file
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "tiny_sd")
TINY_MERGES = 1000
PROMPT = "a photograph of an astronaut riding a horse"
UNET_T = 500

SCHED_SD15 = {"beta_end": 0.012, "beta_schedule": "scaled_linear", "beta_start": 0.00085, "clip_sample": False,
              "num_train_timesteps": 1000, "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1,
              "trained_betas": None, "prediction_type": "epsilon"}
SCHED_SD21 = dict(SCHED_SD15, prediction_type="v_prediction")

TOKENIZER_TEXTS = [
    "a photograph of an astronaut riding a horse",
    "A Photograph   of an ASTRONAUT\triding\na horse!!",
    "",
    "it's a dog's life, isn't it? we'll see; they're here and you've been",
    "cyberpunk city at night, 8k, ultra-detailed, trending on artstation (masterpiece:1.2)",
    "numbers 1234567890 and 3.14159, emails a@b.com #hashtag",
    "café naïve résumé",
    "<|startoftext|>hello<|endoftext|> world",
    "repeat " * 40,
]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def write_tiny_tokenizer(dir_, pad_token):
    import importlib.util  # the package is not imported (it needs torchvision): only its BPE file is read
    pkg_dir = importlib.util.find_spec("open_clip").submodule_search_locations[0]
    bpe_path = os.path.join(pkg_dir, "bpe_simple_vocab_16e6.txt.gz")
    lines = gzip.open(bpe_path).read().decode("utf-8").split("\n")
    merges = [tuple(l.split()) for l in lines[1:1 + TINY_MERGES]]
    alphabet = bytes_to_unicode()
    vocab = alphabet + [a + "</w>" for a in alphabet] + ["".join(m) for m in merges] + ["<|startoftext|>", "<|endoftext|>"]
    os.makedirs(dir_, exist_ok=True)
    with open(os.path.join(dir_, "vocab.json"), "w") as f:
        json.dump({t: i for i, t in enumerate(vocab)}, f, ensure_ascii=False)
    with open(os.path.join(dir_, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n" + "\n".join(" ".join(m) for m in merges) + "\n")
    tok = CLIPTokenizer(os.path.join(dir_, "vocab.json"), os.path.join(dir_, "merges.txt"), pad_token=pad_token,
                        model_max_length=77)
    return tok, len(vocab)


def round_f16(model):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())
    return model


def randomize(model, seed, scale=0.2):
    """Random weights with visible magnitude (diffusers zero-inits some layers, e.g. conv_out of resnets)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or ".norm" in name and name.endswith("weight") or "layer_norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p[0].numel() if p.dim() > 1 else 1
                p.copy_(torch.randn(p.shape, generator=g) * (scale if p.dim() == 1 else 1.0 / fan_in ** 0.5))
    return round_f16(model)


def build(name, v2):
    out_dir = os.path.join(ROOT, name)
    torch.manual_seed(0)
    pad = "!" if v2 else "<|endoftext|>"
    tok, vocab_size = write_tiny_tokenizer(os.path.join(out_dir, "tokenizer"), pad)
    te_cfg = CLIPTextConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                            num_attention_heads=4, max_position_embeddings=77,
                            hidden_act="gelu" if v2 else "quick_gelu", layer_norm_eps=1e-5,
                            bos_token_id=vocab_size - 2, eos_token_id=vocab_size - 1,
                            pad_token_id=tok.pad_token_id, projection_dim=32)
    te = randomize(CLIPTextModel(te_cfg).eval(), 1)
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, center_input_sample=False, flip_sin_to_cos=True, freq_shift=0,
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        block_out_channels=(16, 32, 32), layers_per_block=2, downsample_padding=1, mid_block_scale_factor=1,
        act_fn="silu", norm_num_groups=8, norm_eps=1e-5, cross_attention_dim=32,
        attention_head_dim=(2, 4, 4) if v2 else 2, use_linear_projection=v2, upcast_attention=v2).eval()
    unet = randomize(unet, 2, 0.1)
    vae = AutoencoderKL(in_channels=3, out_channels=3,
                        down_block_types=("DownEncoderBlock2D",) * 3, up_block_types=("UpDecoderBlock2D",) * 3,
                        block_out_channels=(16, 32, 32), layers_per_block=2, act_fn="silu", latent_channels=4,
                        norm_num_groups=8, sample_size=32, scaling_factor=0.18215).eval()
    vae = randomize(vae, 3, 0.1)
    sched = EulerDiscreteScheduler.from_config(SCHED_SD21 if v2 else SCHED_SD15)
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=te, tokenizer=tok, unet=unet, scheduler=sched,
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.save_pretrained(out_dir, safe_serialization=True)
    for sub in ("text_encoder", "unet", "vae"):  # store f16 (the values are already f16-exact)
        comp = getattr(pipe, sub)
        comp.half().save_pretrained(os.path.join(out_dir, sub), safe_serialization=True)
        comp.float()

    g = {}
    with torch.no_grad():
        ids_c = tok(PROMPT, padding="max_length", max_length=77, truncation=True, return_tensors="pt").input_ids
        ids_u = tok("", padding="max_length", max_length=77, truncation=True, return_tensors="pt").input_ids
        g["ids_cond"], g["ids_uncond"] = ids_c.to(torch.int32), ids_u.to(torch.int32)
        g["text_cond"] = te(ids_c)[0]
        g["text_uncond"] = te(ids_u)[0]
        gen = torch.Generator().manual_seed(42)
        sample = torch.randn((2, 4, 8, 8), generator=gen)
        context = torch.cat([g["text_uncond"], g["text_cond"]])
        g["unet_sample"], g["unet_context"] = sample, context
        g["unet_out"] = unet(sample, UNET_T, encoder_hidden_states=context).sample
        lat = torch.randn((1, 4, 8, 8), generator=gen)
        g["vae_latent"] = lat
        g["vae_image"] = vae.decode(lat / vae.config.scaling_factor).sample
        img = torch.rand((1, 3, 32, 32), generator=gen) * 2 - 1
        g["vae_enc_image"] = img
        g["vae_enc_mean"] = vae.encode(img).latent_dist.mean
        noise = torch.randn((1, 4, 8, 8), generator=gen)
        g["t2i_noise"] = noise
        g["t2i_latent"] = pipe(PROMPT, height=32, width=32, num_inference_steps=4, guidance_scale=7.5,
                               latents=noise.clone(), output_type="latent").images
    save_file({k: v.contiguous() for k, v in g.items()}, os.path.join(out_dir, "goldens.safetensors"))
    return tok


def main():
    tok = build("sd15", v2=False)
    build("sd21", v2=True)
    goldens = [{"text": t, "ids": tok(t).input_ids,
                "padded": tok(t, padding="max_length", max_length=77, truncation=True).input_ids}
               for t in TOKENIZER_TEXTS]
    with open(os.path.join(ROOT, "tokenizer_goldens.json"), "w") as f:
        json.dump(goldens, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
